"""The step kit's contracts (jaxrl_rollout.stepping), on CountingEnv (see toy_envs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import spaces

import jaxrl_rollout as jr
from jaxrl_rollout import stepping
from jaxrl_rollout.envs import ClipAction
from jaxrl_rollout.envs._base import SameStepEnv
from tests.toy_envs import BoxCountingEnv, CountingEnv, CountingState, OldApiEnv, counting_recurrent_policy, obs_time, scripted_policy

B = 3


def test_env_reset_and_env_step_batch_the_envs():
    env = CountingEnv()
    params = env.default_params
    keys = jax.random.split(jax.random.key(0), B)
    obs, state = stepping.env_reset(env, keys, params)
    assert obs.shape == (B, 2)
    np.testing.assert_array_equal(state.time, [0, 0, 0])
    step = stepping.env_step(env, params, keys, state, jnp.array([0, 1, 0]), B)
    assert isinstance(step, stepping.EnvStep)
    assert step.reward.dtype == jnp.float32 and step.reward.shape == (B,)
    assert step.terminated.dtype == jnp.bool_ and step.truncated.dtype == jnp.bool_
    np.testing.assert_array_equal(step.terminated, [False, True, False])
    # Env 1 terminated: obs is its reset observation, final_obs the one before the reset.
    np.testing.assert_array_equal(obs_time(step.obs), [1, 0, 1])
    np.testing.assert_array_equal(obs_time(step.final_obs), [1, 1, 1])


def test_a_gymnax_env_stepped_without_its_reset_is_its_step_and_keeps_the_state_its_episode_ended_in():
    """`env_step(..., reset_done=False)`, as `evaluate` and the videos step: a gymnax Environment with gymnax's own
    `step` runs its `step_env` and `is_truncated` with the step's key and no reset, so an env whose episode goes on
    is its step bit for bit, and a done one keeps its final state and observation (a video's last frame)."""
    env = CountingEnv()
    params = env.default_params
    keys = jax.random.split(jax.random.key(0), B)
    _, state = stepping.env_reset(env, keys, params)
    state = state.replace(time=jnp.array([0, 4, 2]))  # env 1 reaches the time limit (5), env 2 terminates
    action = jnp.array([0, 0, 1])
    resetting = stepping.env_step(env, params, keys, state, action, B)
    kept = jax.jit(lambda s: stepping.env_step(env, params, keys, s, action, B, reset_done=False))(state)
    for name in ("reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(resetting, name), err_msg=name)
    np.testing.assert_array_equal(kept.truncated, [False, True, False])
    np.testing.assert_array_equal(kept.env_state.time, [1, 5, 3])  # the reset put 0 in the done envs
    np.testing.assert_array_equal(resetting.env_state.time, [1, 0, 0])
    np.testing.assert_array_equal(kept.env_state.tag, state.tag)
    np.testing.assert_array_equal(kept.obs, resetting.final_obs)
    np.testing.assert_array_equal(kept.obs[0], resetting.obs[0])
    assert stepping.keeps_final_state(env)
    # an env with a step of its own resets itself in it: its final state is gone
    assert not stepping.keeps_final_state(OldApiEnv())
    # the algorithms' ClipAction around a continuous env is seen through (its evaluation and videos: brax's, SAC's)
    clipped = ClipAction(BoxCountingEnv())
    assert stepping.keeps_final_state(clipped)
    action = jnp.array([[0.0], [-7.0], [9.0]])  # above 2.5: env 2 terminates
    resetting = stepping.env_step(clipped, params, keys, state, action, B)
    kept = jax.jit(lambda s: stepping.env_step(clipped, params, keys, s, action, B, reset_done=False))(state)
    for name in ("reward", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(resetting, name), err_msg=name)
    np.testing.assert_array_equal(kept.terminated, [False, False, True])
    np.testing.assert_array_equal(kept.env_state.time, [1, 5, 3])


def test_env_step_names_what_breaks_the_protocol():
    env = OldApiEnv()
    params = env.default_params
    keys = jax.random.split(jax.random.key(0), B)
    _, state = stepping.env_reset(env, keys, params)
    with pytest.raises(TypeError, match="must return 6 values"):
        stepping.env_step(env, params, keys, state, jnp.zeros((B,), jnp.int32), B)
    with pytest.raises(TypeError, match="must return 6 values"):
        stepping.check_env(env, params, jax.random.key(0), B)
    env = CountingEnv()
    _, state = stepping.env_reset(env, keys, params)
    with pytest.raises(ValueError, match=r"scalar reward per env \(\[B\]=\(4,\)"):
        stepping.env_step(env, params, keys, state, jnp.zeros((B,), jnp.int32), 4)


def test_a_gymnax_env_that_jax_64_bit_mode_breaks_is_named_with_the_mode():
    """With JAX_ENABLE_X64=1, gymnax's Pendulum resets to a float64 state but steps a float32 action into it:
    PPO (its actions clipped by `ClipAction`) ended in gymnax's "lax.select requires arguments to have the same
    dtypes" traceback, SAC's message asked to fix the env's step_env. Both name the mode now."""
    import gymnax

    env, params = gymnax.make("Pendulum-v1")
    with jax.enable_x64(True):
        for wrapped in (env, ClipAction(env)):
            with pytest.raises(ValueError, match=r"^env Pendulum: step_env returns a state whose \.last_u is "
                               r"float32\[\], where reset_env's is float64\[\]; .* \(jax's 64-bit mode is on, "
                               r"JAX_ENABLE_X64 or jax_enable_x64, .*unset JAX_ENABLE_X64\)\.$"):
                stepping.check_env(wrapped, params, jax.random.key(0), B)
    stepping.check_env(ClipAction(env), params, jax.random.key(0), B)  # the mode off: nothing to say


def test_resolve_params_and_is_vectorized():
    env = CountingEnv()
    assert stepping.resolve_params(env, None) == env.default_params
    params = env.default_params.replace(max_steps_in_episode=9)
    assert stepping.resolve_params(env, params) is params
    with pytest.raises(TypeError, match="object has no callable `reset`"):
        stepping.resolve_params(object(), None)
    assert not stepping.is_vectorized(env)
    env.vectorized = True
    assert stepping.is_vectorized(env)
    env.vectorized = 1  # only True itself counts
    assert not stepping.is_vectorized(env)


def test_step_keys_are_one_split_of_the_key():
    key = jax.random.key(7)
    next_key, policy_key, env_keys = stepping.step_keys(key, B)
    expected = jax.random.key_data(jax.random.split(key, B + 2))
    np.testing.assert_array_equal(jax.random.key_data(next_key), expected[0])
    np.testing.assert_array_equal(jax.random.key_data(policy_key), expected[1])
    np.testing.assert_array_equal(jax.random.key_data(env_keys), expected[2:])
    assert env_keys.dtype == key.dtype


def test_reset_keys_are_the_split_of_the_key_in_either_form():
    from jaxrl_rollout import prng

    key = jax.random.PRNGKey(7)  # raw uint32, as jax.random.PRNGKey gives
    expected = jax.random.split(key, B)
    plain = stepping.reset_keys(key, B)
    np.testing.assert_array_equal(plain, expected)
    assert plain.dtype == key.dtype
    fused = stepping.reset_keys(key, B, fused_env_keys=True)
    assert jax.random.key_impl(fused) == prng.FUSED_THREEFRY
    np.testing.assert_array_equal(jax.random.key_data(fused), expected)


@struct.dataclass
class _KeyedState(CountingState):
    key: jax.Array


class _KeyInStateEnv(CountingEnv):
    """Keeps its last key in its state (as some envs do): a fused key would change the state's type."""

    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs, _KeyedState(time=state.time, tag=state.tag, key=key)

    def step_env(self, key, state, action, params):
        obs, inner, reward, done, info = super().step_env(key, state, action, params)
        return obs, _KeyedState(time=inner.time, tag=inner.tag, key=key), reward, done, info


class _RawKeyEnv(CountingEnv):
    """Reads its key as a uint32 array, which only a raw key is."""

    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs, state.replace(tag=state.tag + 0.0 * jnp.asarray(key, jnp.uint32)[0])


def test_takes_fused_keys_only_where_nothing_else_changes(monkeypatch):
    from jaxrl_rollout import envs, prng

    env, params = envs.make("CartPole-v1")
    assert stepping.takes_fused_keys(env, params, B)
    assert stepping.takes_fused_keys(CountingEnv(), CountingEnv().default_params, B)
    for env in (_KeyInStateEnv(), _RawKeyEnv()):
        assert not stepping.takes_fused_keys(env, env.default_params, B), type(env).__name__
        # and with its own keys it still resets and steps
        keys = stepping.reset_keys(jax.random.PRNGKey(0), B)
        _, state = stepping.env_reset(env, keys, env.default_params)
        stepping.env_step(env, env.default_params, keys, state, jnp.zeros((B,), jnp.int32), B)
    monkeypatch.setattr(prng, "_enabled", lambda: False)  # fusing off (e.g. off CPU): JAX's own keys
    assert not stepping.takes_fused_keys(CountingEnv(), CountingEnv().default_params, B)


def test_a_rollout_traces_the_env_step_twice_in_all(monkeypatch):
    """rollout_init's protocol check and fused-key probe share one traced reset and step, and the rollout's scan
    traces the step once more; an env that keeps a typed key in its state is not tried on fused keys there (no
    failed trace); a broken env still gets check_env's error."""
    from jaxrl_rollout import collect

    for env in (CountingEnv(), _KeyInStateEnv()):
        traced, step = [], type(env).step
        monkeypatch.setattr(type(env), "step", lambda self, *a, _step=step: traced.append(1) or _step(self, *a))

        def run(key, env=env):
            state = collect.rollout_init(key, env, None, B)
            return collect.rollout(env, None, scripted_policy([2, 3, 9]), None, state, 4)[1].reward

        rewards = jax.jit(run)(jax.random.key(0))
        assert len(traced) == 2, (type(env).__name__, len(traced))
        assert rewards.shape == (4, B)
        monkeypatch.undo()
    with pytest.raises(TypeError, match="must return 6 values"):
        collect.rollout_init(jax.random.key(0), OldApiEnv(), None, B)


def test_the_fused_key_probe_is_traced_once_per_env_and_params_shapes(monkeypatch):
    """`_fused_trace`'s answer is the env's: asked again for the same env object (another B, its params traced
    under jit or concrete) it traces nothing; another env object, params of other shapes or a vectorized env at
    another B are probed again; an env the probe rejects raises each time; the oldest entries go past
    `_FUSED_PROBES_KEPT`."""
    monkeypatch.setattr(stepping, "_FUSED_PROBES", type(stepping._FUSED_PROBES)())
    probed, probe = [], stepping._fused_probe
    monkeypatch.setattr(stepping, "_fused_probe", lambda env, *a: probed.append(env) or probe(env, *a))
    env, key_env = CountingEnv(), _KeyInStateEnv()
    params = env.default_params
    assert stepping.takes_fused_keys(env, params, 4) and stepping.takes_fused_keys(env, params, 2)
    jax.jit(lambda p: jnp.float32(stepping.takes_fused_keys(env, p, 3)))(params)  # traced params: the same entry
    assert probed == [env]
    assert not stepping.takes_fused_keys(key_env, key_env.default_params, 4)
    assert not stepping.takes_fused_keys(key_env, key_env.default_params, 2) and probed == [env, key_env]
    other = CountingEnv()  # another object: its own probe
    assert stepping.takes_fused_keys(other, params, 4) and probed == [env, key_env, other]
    wider = params.replace(max_steps_in_episode=jnp.zeros((2,), jnp.int32))  # other shapes: probed again
    stepping._fused_trace(env, wider, 4)
    assert probed[-1] is env and len(probed) == 4
    # the answer kept is the one the probe gives
    assert stepping._fused_trace(env, params, 5) is probe(env, params, 5, jax.random.PRNGKey(0)) is True

    class Vectorized(CountingEnv):
        vectorized = True  # B copies in one call: the probe's batch is the env's, so each B is its own

    calls = len(probed)
    vec = Vectorized()
    for b in (4, 2, 4):
        stepping._fused_trace(vec, vec.default_params, b)
    assert len(probed) == calls + 2

    class BadStep(CountingEnv):  # its step's observation is not its reset's: the env's error, each time
        def step_env(self, key, state, action, params):
            obs, *rest = super().step_env(key, state, action, params)
            return (obs[:1], *rest)

    from jaxrl_rollout import collect

    bad = BadStep()
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^env BadStep: step returns observations float32\[1\]"):
            collect.rollout_init(jax.random.key(0), bad, None, 4)
    # a probe that raises keeps nothing: the next call probes again
    failing = CountingEnv()
    monkeypatch.setattr(stepping, "_fused_probe", lambda env, *a: (_ for _ in ()).throw(RuntimeError("probe")))
    with pytest.raises(RuntimeError, match="probe"):
        stepping._fused_trace(failing, params, 4)
    monkeypatch.setattr(stepping, "_fused_probe", lambda env, *a: probed.append(env) or probe(env, *a))
    assert stepping._fused_trace(failing, params, 4) is True and probed[-1] is failing
    monkeypatch.setattr(stepping, "_FUSED_PROBES_KEPT", 3)
    many = [CountingEnv() for _ in range(4)]
    for e in many:
        stepping._fused_trace(e, e.default_params, 2)
    assert [entry[0] for entry in stepping._FUSED_PROBES.values()] == many[1:]


def test_batch_where_and_reset_carry_select_rows():
    mask = jnp.array([True, False, True])
    on_true = {"a": jnp.ones((B, 2)), "b": jnp.ones((B,))}
    on_false = {"a": jnp.zeros((B, 2)), "b": jnp.zeros((B,))}
    picked = stepping.batch_where(mask, on_true, on_false)
    np.testing.assert_array_equal(picked["a"], [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(picked["b"], [1, 0, 1])
    carry = jnp.full((B, 2), jnp.nan)
    np.testing.assert_array_equal(stepping.reset_carry(carry, mask)[::2], 0.0)
    assert np.isnan(np.asarray(stepping.reset_carry(carry, mask)[1])).all()


def test_act_calls_feedforward_and_recurrent_policies():
    env = CountingEnv()
    space = env.action_space()
    obs, _ = stepping.env_reset(env, jax.random.split(jax.random.key(0), B), env.default_params)
    out, carry = stepping.act(scripted_policy([9, 9, 9]), None, obs, jax.random.key(1), None, None, B, space)
    assert carry is None and out.action.shape == (B,) and out.value.shape == (B,)
    # The recurrent policy counts in its carry; rows with `first` start from zero.
    policy = counting_recurrent_policy([9, 9, 9])
    start = jnp.full((B, 1), 5.0)
    first = jnp.array([True, False, False])
    out, carry = stepping.act(policy, None, obs, jax.random.key(1), start, first, B, space)
    np.testing.assert_array_equal(out.value, [0.0, 5.0, 5.0])
    np.testing.assert_array_equal(carry[:, 0], [1.0, 6.0, 6.0])


class _Resets:
    """Counts the resets a program computes (a `jax.debug.callback` in `_LazyResetEnv.reset_env`; XLA may call it
    from several threads at once, so each call appends, which the GIL keeps whole, and `count` sums)."""

    calls: list = []

    @classmethod
    def add(cls, ones):
        cls.calls.append(int(np.sum(ones)))

    @classmethod
    def count(cls):
        jax.effects_barrier()
        return sum(cls.calls)


class _LazyResetEnv(SameStepEnv):
    """An adapter on SameStepEnv: an episode ends with action 1 (terminated) or at step 5 (truncated); a typed
    key in its state; a count of the resets computed."""

    resets_only_done = True

    def __init__(self, reset_obs_dtype=jnp.float32):
        self.reset_obs_dtype = reset_obs_dtype

    def reset_env(self, key, params):
        jax.debug.callback(_Resets.add, jax.random.key_data(key)[0] * 0 + 1)  # one per env reset (batched)
        key, draw = jax.random.split(key)
        obs = jnp.stack([jnp.float32(0), jax.random.uniform(draw)]).astype(self.reset_obs_dtype)
        return obs, {"time": jnp.int32(0), "key": key}

    def step_env(self, key, state, action, params):
        time = state["time"] + 1
        obs = jnp.stack([time.astype(jnp.float32), jax.random.uniform(key)])
        return obs, {"time": time, "key": state["key"]}, jnp.float32(time), action == 1, time >= 5, {"t": time}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1e6, (2,), jnp.float32)


def _run_both_ways(env, num_envs, steps, runs=None):
    """Per step: `stepping.env_step`'s results and `jax.vmap(env.step)`'s, in one jitted scan each (a vmap over
    `runs` runs around it when given), from the same keys and random actions."""

    def run(key, lazy):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), None)

        def one(state, key):
            act_key, step_key = jax.random.split(key)
            action = jax.random.bernoulli(act_key, 0.05, (num_envs,)).astype(jnp.int32)
            keys = jax.random.split(step_key, num_envs)
            if lazy:
                out = stepping.env_step(env, None, keys, state, action, num_envs)
            else:
                out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, None)
                out = (*out[:5], out[5]["final_observation"])
            return out[1], (out[0], out[2], out[3], out[4], out[5], out[1]["time"],
                            jax.random.key_data(out[1]["key"]))

        return jax.lax.scan(one, state, jax.random.split(key, steps))[1]

    if runs is None:
        return [jax.jit(run, static_argnums=1)(jax.random.key(7), lazy) for lazy in (True, False)]
    keys = jax.random.split(jax.random.key(7), runs)
    return [jax.jit(jax.vmap(run, in_axes=(0, None)), static_argnums=1)(keys, lazy) for lazy in (True, False)]


@pytest.mark.parametrize("runs", [None, 3])
def test_env_step_computes_only_the_done_envs_resets_and_equals_the_vmapped_step(runs):
    """For an adapter on SameStepEnv the rollout's step resets the done envs only, in groups of ceil(B / 8), and
    gives `jax.vmap(env.step)`'s results bit for bit, a typed key in the state included; under a vmap over runs
    too (each group then as many times as the run with the most done envs needs)."""
    env, num_envs, steps = _LazyResetEnv(), 10, 12
    assert stepping._resets_only_done(env) and stepping.reset_group(num_envs) == 2
    _Resets.calls.clear()
    lazy, plain = _run_both_ways(env, num_envs, steps, runs)
    jax.block_until_ready((lazy, plain))
    for a, b in zip(lazy, plain):
        np.testing.assert_array_equal(a, b)
    done = np.asarray(lazy[2] | lazy[3]).reshape(-1, steps, num_envs).sum(-1)  # [runs, steps]
    assert done.min() == 0 and done.max() >= 3, done  # steps without a reset and steps with several groups
    groups = np.ceil(done / 2).max(axis=0)  # per step, the run with the most done envs
    lazy_resets = (runs or 1) * (num_envs + 2 * groups.sum())  # the initial resets, then the groups of 2
    plain_resets = (runs or 1) * num_envs * (1 + steps)
    assert _Resets.count() == lazy_resets + plain_resets, (_Resets.count(), lazy_resets, plain_resets)


def test_env_step_resets_every_env_where_the_reset_differs_from_the_step_or_the_adapter_says_so():
    """A reset whose obs dtype is not its step's takes the vmapped step's select (which promotes), and an adapter
    with `resets_only_done = False` the vmapped step itself: the same results either way."""
    env = _LazyResetEnv(reset_obs_dtype=jnp.bfloat16)
    lazy, plain = _run_both_ways(env, 4, 6)
    assert lazy[0].dtype == plain[0].dtype == jnp.float32
    for a, b in zip(lazy, plain):
        np.testing.assert_array_equal(a, b)
    env = _LazyResetEnv()
    env.resets_only_done = False
    assert not stepping._resets_only_done(env)
    _Resets.calls.clear()
    jax.block_until_ready(_run_both_ways(env, 4, 6))
    assert _Resets.count() == 2 * 4 * (1 + 6)  # both programs: every env's reset at every step


class _OwnStepLazyResetEnv(_LazyResetEnv):
    """`_LazyResetEnv` with a `step` of its own (the base's, called): stepped as any env, every env reset by itself
    at every step."""

    def step(self, key, state, action, params=None):
        return SameStepEnv.step(self, key, state, action, params)


def _coin_policy(params, obs, key):
    """Action 1 (which ends the toy's episode) with probability 0.2."""
    action = jax.random.bernoulli(key, 0.2, (obs.shape[0],)).astype(jnp.int32)
    return jr.PolicyOutput(action, jnp.zeros(obs.shape[0]), jnp.zeros(obs.shape[0]))


@pytest.mark.parametrize("only_done", [True, False])
def test_evaluate_and_recordings_compute_no_reset_after_an_episode_ends(only_done):
    """`evaluate` and `video.record_episodes` discard what an env does after its episode: an adapter on SameStepEnv
    is stepped there without its auto-reset (only the initial resets are computed), with the same episodes, bit for
    bit, as the env stepped with every reset."""
    from jaxrl_rollout import video

    n, limit = 6, 8
    lazy, plain = _LazyResetEnv(), _OwnStepLazyResetEnv()
    lazy.resets_only_done = plain.resets_only_done = only_done
    assert stepping._steps_until_reset(lazy) and not stepping._steps_until_reset(plain)

    def both(env):
        key = jax.random.key(3)
        evaluated = jr.evaluate(env, None, _coin_policy, None, key, n, max_steps=limit)
        recorded = video.record_episodes(env, None, _coin_policy, None, key, n, max_steps=limit)
        return evaluated, recorded

    _Resets.calls.clear()
    evaluated, recorded = jax.block_until_ready(jax.jit(both, static_argnums=0)(lazy))
    assert _Resets.count() == 2 * n  # the initial resets of each, nothing after
    _Resets.calls.clear()
    plain_evaluated, plain_recorded = jax.block_until_ready(jax.jit(both, static_argnums=0)(plain))
    steps = int(np.max(np.asarray(evaluated.lengths)))
    assert 1 < steps <= limit and np.asarray(evaluated.completed).any()
    assert _Resets.count() == 2 * n * (1 + steps)  # an env that resets itself: every env at every step
    for a, b in zip(evaluated, plain_evaluated):
        np.testing.assert_array_equal(a, b)
    for a, b in zip((recorded.returns, recorded.lengths, recorded.completed, recorded.rewards),
                    (plain_recorded.returns, plain_recorded.lengths, plain_recorded.completed, plain_recorded.rewards)):
        np.testing.assert_array_equal(a, b)
    lengths = np.asarray(recorded.lengths)
    for episode, length in enumerate(lengths):  # every state of every episode, up to its end
        for a, b in zip(jax.tree.leaves(video.episode_states(recorded, episode)),
                        jax.tree.leaves(video.episode_states(plain_recorded, episode))):
            assert len(a) == length
            np.testing.assert_array_equal(*map(_raw, (a, b)))


def _raw(x):
    """An array's values, a typed key's as its raw data."""
    return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
