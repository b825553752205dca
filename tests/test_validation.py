"""Bad input gets a clear error naming the argument, at trace or call time."""

import re

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import jaxrl_rollout as jr
from tests.toy_envs import CountingEnv, OldApiEnv, scripted_policy


def init(num_envs=2, env=None, **kw):
    env = env or CountingEnv()
    return jr.rollout_init(jax.random.key(0), env, env.default_params, num_envs, **kw)


def policy_returning(**fields):
    def policy_fn(params, obs, key):
        b = obs.shape[0]
        out = jr.PolicyOutput(jnp.zeros((b,), jnp.int32), jnp.zeros((b,)), jnp.zeros((b,)))
        return out._replace(**fields)

    return policy_fn


def run(policy_fn, state=None, num_steps=3, env=None):
    env = env or CountingEnv()
    return jr.rollout(env, env.default_params, policy_fn, None, state or init(), num_steps)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4", None])
def test_num_envs_must_be_a_positive_int(bad):
    with pytest.raises((TypeError, ValueError), match="num_envs"):
        init(num_envs=bad)


@pytest.mark.parametrize("bad", [0, -3, 1.0, False])
def test_num_steps_must_be_a_positive_int(bad):
    with pytest.raises((TypeError, ValueError), match="num_steps"):
        run(scripted_policy([0, 0]), num_steps=bad)


def test_rollout_init_and_evaluate_keys_must_be_one_prng_key():
    env = CountingEnv()
    for bad, got in ((0, "got int"), (jnp.zeros(2), r"got float32 array of shape \(2,\)")):
        with pytest.raises(TypeError, match=r"rollout_init's key must be a PRNG key, jax.random.key\(seed\) or "
                                            r"jax.random.PRNGKey\(seed\), " + got):
            jr.rollout_init(bad, env, env.default_params, 4)
    with pytest.raises(ValueError, match=r"rollout_init's key must be one PRNG key, got a batch of shape \(4,\); "
                                         "it splits the one key over the num_envs envs itself"):
        jr.rollout_init(jax.random.split(jax.random.key(0), 4), env, env.default_params, 4)
    with pytest.raises(ValueError, match=r"must be one raw PRNG key .*got uint32 of shape \(4, 2\)"):
        jr.rollout_init(jax.random.split(jax.random.PRNGKey(0), 4), env, env.default_params, 4)
    for good in (jax.random.key(0), jax.random.PRNGKey(0)):
        assert jr.rollout_init(good, env, env.default_params, 4).obs.shape[0] == 4
    policy = scripted_policy([0, 0])
    with pytest.raises(TypeError, match=r"evaluate's key must be a PRNG key, .* got int"):
        jr.evaluate(env, env.default_params, policy, None, 3, num_episodes=2)
    with pytest.raises(ValueError, match=r"evaluate's key must be one PRNG key, got a batch of shape \(2,\); it splits "
                                         "the one key over the num_episodes episodes itself"):
        jr.evaluate(env, env.default_params, policy, None, jax.random.split(jax.random.key(0), 2), num_episodes=2)


def test_every_function_that_takes_one_key_names_itself_when_given_a_seed_or_a_batch():
    """A seed int (AttributeError: 'int' object has no attribute 'dtype' before) or a batch of keys (jax's or flax's
    own errors) is a TypeError / ValueError naming the function's key and how to get several."""
    from flax import linen as nn

    from jaxrl_rollout import batching, networks, video

    env = CountingEnv()
    policy = scripted_policy([0, 0])
    net = networks.ActorCriticMLP(action_dim=2)
    obs = jnp.zeros((1, 3))
    calls = {
        "minibatch_indices'": (lambda k: batching.minibatch_indices(k, 8, 2), "for several draws, vmap minibatch_indices"),
        "permutation's": (lambda k: batching.permutation(k, 5), "for several draws, vmap permutation over"),
        "permutations'": (lambda k: batching.permutations(k, 2, 5), "for several draws, vmap permutations over"),
        "sequence_minibatch_indices'": (lambda k: batching.sequence_minibatch_indices(k, 4, 2),
                                        "for several draws, vmap sequence_minibatch_indices over"),
        "fused_init's": (lambda k: networks.fused_init(nn.Dense(2), k, obs), "for several initialisations, vmap "
                                                                              "fused_init over"),
        "batched_init's": (lambda k: networks.batched_init(net, k, obs), "for several initialisations, vmap batched_init over"),
        "record_episodes'": (lambda k: video.record_episodes(env, env.default_params, policy, None, k, 2, max_steps=3),
                             "it splits the one key over the num_episodes episodes itself"),
    }
    for owner, (call, hint) in calls.items():
        with pytest.raises(TypeError, match=f"^{owner} key must be a PRNG key, .* got int"):
            call(7)
        with pytest.raises(ValueError, match=rf"^{owner} key must be one PRNG key, got a batch of shape \(3,\); {hint}"):
            call(jax.random.split(jax.random.key(0), 3))
        # one key of either kind is taken, and under vmap each call sees one key (jitted: the checks run as it
        # traces; op by op these calls took 14 s of the test's 15 on 2 cores, jitted the test takes 8)
        jax.jit(call)(jax.random.key(0)), jax.jit(call)(jax.random.PRNGKey(0))
        jax.jit(jax.vmap(call))(jax.random.split(jax.random.key(0), 2))
    # a dict of keys per RNG stream is flax's own and goes to module.init as it is (fused_init crashed on it)
    module = nn.Sequential([nn.Dropout(0.5, deterministic=False), nn.Dense(2)])
    rngs = {"params": jax.random.key(1), "dropout": jax.random.key(2)}
    want = module.init(rngs, obs)
    for init in (networks.fused_init, networks.batched_init):
        assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), init(module, rngs, obs), want))


def test_num_steps_traced_under_jit_is_rejected_clearly():
    with pytest.raises(TypeError, match="num_steps must be a positive Python int"):
        jax.jit(lambda n: run(scripted_policy([0, 0]), num_steps=n))(3)


def test_five_value_step_env_is_rejected_with_the_reason():
    with pytest.raises(TypeError, match=r"6 values.*got 5.*pre-1.0 gymnax"):
        init(env=OldApiEnv())


def test_a_final_observation_unlike_the_observation_is_rejected_naming_the_env():
    """An env whose info['final_observation'] had another shape than its obs trained until the value call on
    it failed inside the network (flax's ScopeParamShapeError), which did not name the env."""

    class ShortFinal(CountingEnv):
        def step(self, key, state, action, params=None):
            obs, state, reward, terminated, truncated, info = super().step(key, state, action, params)
            return obs, state, reward, terminated, truncated, {**info, "final_observation": obs[:1]}

    with pytest.raises(ValueError, match=r"^env.step of ShortFinal: info\['final_observation'\] must be an observation "
                                         r"like the obs it returns \(the one before any reset\), float32\[2\] per env, got "
                                         r"float32\[1\]\."):
        run(scripted_policy([0, 0]), env=ShortFinal())


def test_action_with_a_trailing_axis_is_not_broadcast():
    bad = policy_returning(action=jnp.zeros((2, 1), jnp.int32))
    with pytest.raises(ValueError, match=r"action must have shape \[B\]=\(2,\).*\(2, 1\)"):
        run(bad)


def test_float_action_for_a_discrete_space():
    with pytest.raises(ValueError, match="action must have an integer dtype"):
        run(policy_returning(action=jnp.zeros((2,), jnp.float32)))


def test_box_action_shape_and_dtype():
    env, env_params = gymnax.make("Pendulum-v1")
    state = jr.rollout_init(jax.random.key(0), env, env_params, 3)

    def policy(action):
        return lambda p, o, k: jr.PolicyOutput(action, jnp.zeros(3), jnp.zeros(3))

    with pytest.raises(ValueError, match=r"shape \[B, \*action_space.shape\]=\(3, 1\)"):
        jr.rollout(env, env_params, policy(jnp.zeros((3,))), None, state, 2)
    with pytest.raises(ValueError, match="floating dtype"):
        jr.rollout(env, env_params, policy(jnp.zeros((3, 1), jnp.int32)), None, state, 2)
    # The right shape runs.
    _, traj = jr.rollout(env, env_params, policy(jnp.zeros((3, 1))), None, state, 2)
    assert traj.action.shape == (2, 3, 1)


@pytest.mark.parametrize("num_logits", [1, 2, 3])
def test_categorical_policy_logits_must_match_the_discrete_actions(num_logits):
    """A network with the wrong number of outputs for the env: with 3 logits on CartPole's Discrete(2) the policy
    sampled action 2, which CartPole took as a push of three times the force, without a word; with 1 it never pushed
    right. Now the rollout and evaluate, under jit, raise a ValueError at trace time naming both counts, with no note
    on the params (they are not the cause); the right count runs."""
    env, env_params = gymnax.make("CartPole-v1")
    policy_fn = jr.categorical_policy(lambda w, obs: (obs @ w, jnp.zeros(obs.shape[0])))
    w = jnp.ones((4, num_logits))
    state = jr.rollout_init(jax.random.key(0), env, env_params, 3)
    rollout = jax.jit(lambda w, state: jr.rollout(env, env_params, policy_fn, w, state, 4))
    evaluate = jax.jit(lambda w, key: jr.evaluate(env, env_params, policy_fn, w, key, 2, max_steps=5))
    if num_logits == 2:
        _, traj = rollout(w, state)
        assert traj.action.shape == (4, 3)
        result = evaluate(w, jax.random.key(1))
        assert result.returns.shape == (2,) and bool((result.lengths <= 5).all()), result
        return
    what = "would sample action 2, which the env does not have" if num_logits == 3 else "could never take action 1"
    for call, arg in ((rollout, state), (evaluate, jax.random.key(1))):
        with pytest.raises(ValueError, match=rf"returned logits for A={num_logits} actions .* Discrete\(2\): "
                                             rf"it {what}") as error:
            call(w, arg)
        assert not any("jaxrl_rollout" in note for note in getattr(error.value, "__notes__", ())), error.value
    # Outside a rollout the policy cannot know the env: called directly it samples from its A logits.
    out = jax.jit(policy_fn)(w, jnp.ones((5, 4)), jax.random.key(2))
    assert out.action.shape == (5,) and int(out.action.max()) < num_logits


def _one_env_acting(action):
    """A policy whose env 1 takes `action` and every other env action 0."""
    def policy_fn(params, obs, key):
        b = obs.shape[0]
        return jr.PolicyOutput(jnp.where(jnp.arange(b) == 1, action, 0).astype(jnp.int32), jnp.zeros(b), jnp.zeros(b))

    return policy_fn


def _without_metadata(compiled_text):
    """The computations of an optimised HLO module's text, without the source locations (file, line and function
    tables and each instruction's metadata) and the numbers of their names."""
    computations = compiled_text[re.search(r"^(%|ENTRY )", compiled_text, re.MULTILINE).start():]
    computations = re.sub(r", metadata=\{[^}]*\}", "", computations)
    return re.sub(r"\b([A-Za-z_][\w-]*)\.\d+\b", r"\1", computations)  # XLA numbers names as they were traced


@pytest.mark.parametrize("action", [-1, 1, 2])
def test_discrete_action_values_are_checked_under_checkify(action, monkeypatch):
    """A policy of one's own whose action is outside [0, n): gymnax's CartPole took action 2 as a push of three
    times the force, without a word. The values are traced, so the check is a run-time one, asked for with
    `checkify.checkify(f, errors=checkify.user_checks)` (of a vmap too, and of evaluate); without it the program
    XLA compiles is the one without the check, so it costs nothing."""
    env, env_params = gymnax.make("CartPole-v1")
    policy_fn = _one_env_acting(action)

    def roll(key):
        state = jr.rollout_init(key, env, env_params, 3)
        return jr.rollout(env, env_params, policy_fn, None, state, 4)[1].action

    def evaluate(key):
        return jr.evaluate(env, env_params, policy_fn, None, key, 3, max_steps=5).returns

    keys = jax.random.split(jax.random.key(0), 2)
    # A vmapped rollout, and evaluate's one run (JAX 0.10's checkify fails on a vmapped while loop, evaluate's,
    # with or without jaxrl_rollout, whichever side of it the vmap is).
    for f, arg in ((jax.vmap(roll), keys), (evaluate, keys[0])):
        error, out = jax.jit(checkify.checkify(f, errors=checkify.user_checks))(arg)
        np.testing.assert_array_equal(out, jax.jit(f)(arg))  # the check changes no result
        if action == 1:
            error.throw()  # nothing to throw
        else:
            with pytest.raises(checkify.JaxRuntimeError,
                               match=rf"policy_fn output action must be in \[0, n\) for the env's Discrete\(n=2\) "
                                     rf"action space; got actions from {min(action, 0)} to {max(action, 0)}"):
                error.throw()
    def compiled():  # traced anew (a new function: jit's trace cache is keyed by the function)
        return _without_metadata(jax.jit(lambda key: roll(key)).lower(keys[0]).compile().as_text())

    checked = compiled()
    monkeypatch.setattr(jr._checks, "_debug_check_discrete_values", lambda *args: None)
    assert compiled() == checked


def test_a_program_with_the_check_lowers_to_the_same_module_whenever_it_is_traced():
    """checkify numbers the checks it traces from one counter per process, and the number stayed in the lowered
    module where the check itself is dropped. JAX's persistent compilation cache keys a program by that module, so
    every new trace of the same rollout with a Discrete action space was a new program to it: the command line's
    `--compile-cache` compiled a resumed run's chunks again whenever the process had traced checks in another order
    (in one process: always), and so did the tests' shared cache."""
    env, env_params = gymnax.make("CartPole-v1")
    policy_fn = _one_env_acting(1)

    def lowered():  # a new function each time: traced anew
        def roll(key):
            return jr.rollout(env, env_params, policy_fn, None, jr.rollout_init(key, env, env_params, 3), 4)[1].action

        return jax.jit(roll).lower(jax.random.key(0)).as_text(debug_info=False)

    first = lowered()
    checkify.debug_check(jnp.bool_(True), "a check of someone else's, traced in between")
    assert lowered() == first


@pytest.mark.parametrize("field", ["value", "log_prob"])
def test_unbatched_value_or_log_prob(field):
    with pytest.raises(ValueError, match=rf"{field} must have shape \[B\]=\(2,\).*\(2, 1\)"):
        run(policy_returning(**{field: jnp.zeros((2, 1))}))
    with pytest.raises(ValueError, match=rf"{field} must have shape \[B\]"):
        run(policy_returning(**{field: jnp.zeros(())}))


def test_policy_must_return_policy_output():
    def bad(params, obs, key):
        return jnp.zeros((2,), jnp.int32), jnp.zeros(2), jnp.zeros(2)

    with pytest.raises(TypeError, match="PolicyOutput"):
        run(bad)


def test_recurrent_policy_contract():
    carry = jnp.zeros((2, 3))
    state = init(initial_carry=carry)
    with pytest.raises(TypeError, match=r"\(PolicyOutput, new_carry\)"):
        run(lambda p, o, k, c: policy_returning()(p, o, k), state=state)
    with pytest.raises(ValueError, match="new_carry leaves must keep their shape"):
        run(lambda p, o, k, c: (policy_returning()(p, o, k), jnp.zeros((2, 4))), state=state)
    with pytest.raises(ValueError, match=r"initial_carry.*leading axis num_envs=2"):
        init(initial_carry=jnp.zeros((3, 4)))


def test_state_must_be_a_rollout_state():
    with pytest.raises(TypeError, match="state must be a RolloutState"):
        run(scripted_policy([0, 0]), state=(1, 2))


def test_env_without_the_protocol():
    with pytest.raises(TypeError, match=r"gymnax>=1.0.1 Environment protocol.*no callable `reset`"):
        jr.rollout_init(jax.random.key(0), object(), None, 2)


def test_is_int_takes_integers_and_refuses_bools_and_floats():
    import numpy as np

    from jaxrl_rollout._checks import is_int

    assert is_int(3) and is_int(np.int64(3)) and is_int(np.uint8(0))
    assert is_int(3, numpy=False) and not is_int(np.int64(3), numpy=False)  # configs are written to JSON as they are
    for value in (True, np.True_, 3.0, np.float32(3), "3", None, jnp.int32(3)):
        assert not is_int(value) and not is_int(value, numpy=False), value


def test_distributions_networks_optimisers_and_episodes_refuse_what_they_got_wrong():
    """Each case returned a wrong number, or failed deep inside JAX or flax, before it was refused."""
    import numpy as np

    from jaxrl_rollout import distributions as D
    from jaxrl_rollout import episodes, networks, optim, prng
    from jaxrl_rollout.networks.init import OrthogonalDense, householder_q, orthogonal

    gru = networks.ActorCriticGRU(action_dim=2, hidden_size=4)
    cases = [
        (lambda: D.categorical_from_probs(jnp.array([[0.5, -0.2, 0.7]])), r"^probs must be finite and >= 0, got -0.2"),
        (lambda: D.categorical_from_probs(jnp.zeros((1, 3))), r"^probs must have a positive sum in every row"),
        (lambda: D.masked_logits(jnp.zeros(5), jnp.ones((3, 5), bool)), r"^mask must be broadcastable to the logits' "
                                                                         r"shape \(5,\), got \(3, 5\)"),
        (lambda: D.masked_logits(jnp.zeros(5), jnp.full(5, 0.5)), r"^mask must be bool"),
        (lambda: D.diag_gaussian(jnp.zeros((1, 2)), jnp.array([-jnp.inf, 0.0])), r"^log_std must not be -inf or NaN"),
        (lambda: prng.split(0), r"^key must be a PRNG key"),
        (lambda: D.categorical_from_logits(jnp.ones((2, 3))).sample(0), r"^key must be a PRNG key"),
        (lambda: networks.unroll(gru, None, gru.initial_carry(2), jnp.zeros((3, 2, 4)), jnp.full((3, 2), 0.5)),
         r"^first must be bool or \{0, 1\}"),
        (lambda: orthogonal(1.0)(jax.random.key(0), (5, 0)), r"^orthogonal init needs a kernel of positive sizes"),
        (lambda: orthogonal(float("nan")), r"^orthogonal's scale .* must be a finite number"),
        (lambda: OrthogonalDense(0, 1.0), r"^features must be a positive int, got 0"),
        (lambda: householder_q(jnp.ones((2, 5))), r"^householder_q needs a tall or square matrix"),
        (lambda: optim.linear_annealing(1e-3, 2**40, 4), r"is more than the int32 update count holds"),
        (lambda: optim.torch_adam(1e-3).update({"a": jnp.ones((3, 2))}, optim.torch_adam(1e-3).init({"a": jnp.ones(2)})),
         r"^torch_adam: the gradient\['a'\] has shape \(3, 2\), but the optimiser state was made for \(2,\)"),
        (lambda: episodes.episode_metrics(jr.Trajectory(*([None] * len(jr.Trajectory._fields)))._replace(
            done=jnp.zeros((3, 2), bool), completed_return=jnp.zeros((3, 1)), completed_length=jnp.zeros((3, 2)))),
         r"^traj.completed_return must have the shape of traj.done \(3, 2\), got \(3, 1\)"),
        (lambda: episodes.episode_metrics({"done": 1}), r"^traj must be a Trajectory"),
        (lambda: jr.advantages.trajectory_gae({"reward": 1}, 0.99, 0.95), r"^traj must be a Trajectory"),
        # a 1-tuple was "not enough values to unpack"; int logits failed inside jax.random.gumbel
        (lambda: jr.categorical_policy(lambda p, o: (jnp.zeros((2, 3)),))(None, jnp.zeros((2, 4)), jax.random.key(0)),
         r"^apply_fn must return \(logits \[B, A\], value \[B\]\), got tuple of 1"),
        (lambda: jr.categorical_policy(lambda p, o: (jnp.zeros((2, 3), jnp.int32), jnp.zeros(2)))(
            None, jnp.zeros((2, 4)), jax.random.key(0)), r"^apply_fn must return floating logits, got int32"),
    ]
    for call, message in cases:
        with pytest.raises((TypeError, ValueError), match=message):
            call()
    # from probs, an action of probability 0 is never drawn (the clamped logits gave each eps: 1.2e-7 in float32,
    # 9.8e-4 in float16, here about 100 draws of impossible actions)
    one_hot = jnp.zeros((1_000, 100), jnp.float16).at[:, 0].set(1.0)
    assert int(jnp.sum(D.categorical_from_probs(one_hot).sample(jax.random.key(0)) != 0)) == 0
    # a bfloat16 float action 256 picked both 256 and 257 (one bfloat16 value) and summed their logits
    c = D.categorical_from_logits(jnp.zeros((1, 300)))
    np.testing.assert_allclose(c.log_prob(jnp.array([256.0], jnp.bfloat16)), -np.log(300), rtol=1e-6)
    # a NumPy int64 action past int32 was read modulo 2**32 (2**32 + 1 as action 1)
    assert np.isnan(D.categorical_from_logits(jnp.zeros((1, 3))).log_prob(np.array([2**32 + 1]))).all()
    # bfloat16 probs keep their dtype, as torch's do (float32 logits before)
    assert D.categorical_from_probs(jnp.array([[0.2, 0.3, 0.5]], jnp.bfloat16)).logits.dtype == jnp.bfloat16


def test_a_policy_of_the_other_kind_than_the_state_is_named():
    """A feedforward policy with a recurrent state failed with the function's own "takes 3 positional arguments
    but 4 were given" (and a recurrent one with a feedforward state likewise)."""
    env = CountingEnv()
    recurrent_state = init(initial_carry=jnp.zeros((2, 3)))

    def recurrent(params, obs, key, carry):
        return scripted_policy([0, 0])(params, obs, key), carry

    with pytest.raises(TypeError, match=r"^the rollout state holds a recurrent carry .* which scripted_policy|"
                                        r"^the rollout state holds a recurrent carry"):
        jr.rollout(env, env.default_params, scripted_policy([0, 0]), None, recurrent_state, 3)
    with pytest.raises(TypeError, match=r"^the rollout state holds no carry, so policy_fn is called as "
                                        r"policy_fn\(params, obs, key\), which recurrent\(params, obs, key, carry\)"):
        jr.rollout(env, env.default_params, recurrent, None, init(), 3)
