"""evaluate: whole episodes in parallel, stopping each env at its episode's end."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from tests.toy_envs import CountingEnv, counting_recurrent_policy, mlp_policy, scripted_policy


def test_each_env_stops_at_the_end_of_its_episode():
    env = CountingEnv()
    # Env 0 terminates on its first step, env 1 on its third, env 2 is truncated at 5.
    res = jax.jit(lambda k: jr.evaluate(env, None, scripted_policy([0, 2, 99]), None, k, 3))(
        jax.random.key(0)
    )
    np.testing.assert_array_equal(res.lengths, [1, 3, 5])
    np.testing.assert_array_equal(res.returns, [1.0, 6.0, 15.0])  # L (L + 1) / 2, no reward after
    np.testing.assert_array_equal(res.completed, [True, True, True])
    assert res.returns.dtype == jnp.float32 and res.lengths.dtype == jnp.int32


def test_max_steps_cuts_episodes_and_marks_them_incomplete():
    env = CountingEnv()
    res = jr.evaluate(env, None, scripted_policy([0, 99]), None, jax.random.key(0), 2, max_steps=3)
    np.testing.assert_array_equal(res.lengths, [1, 3])
    np.testing.assert_array_equal(res.returns, [1.0, 6.0])
    np.testing.assert_array_equal(res.completed, [True, False])


def test_recurrent_evaluation_resets_the_initial_carry():
    env = CountingEnv()
    carry = jnp.full((2, 1), 50.0)  # a stale carry would terminate at once
    res = jr.evaluate(
        env, None, counting_recurrent_policy([2, 3]), None, jax.random.key(0), 2, initial_carry=carry
    )
    np.testing.assert_array_equal(res.lengths, [3, 4])


def test_deterministic_evaluation_replays_by_hand_and_vmaps():
    env, env_params = gymnax.make("CartPole-v1")
    policy_fn, params = mlp_policy(jax.random.key(1), deterministic=True)

    def run(key):
        return jr.evaluate(env, env_params, policy_fn, params, key, 4)

    key = jax.random.key(7)
    det = jax.jit(run)(key)
    assert np.all(np.asarray(det.completed))
    # Replay env 0 step by step: rollout_init resets env i with split(reset_key, N)[i].
    obs, state = env.reset(jax.random.split(jax.random.split(key)[0], 4)[0], env_params)
    length, total = 0, 0.0
    while True:
        # Any key: the deterministic policy ignores it.
        action = policy_fn(params, obs[None], jax.random.key(length)).action[0]
        obs, state, reward, terminated, truncated, _ = env.step(
            jax.random.key(0), state, action, env_params
        )
        length, total = length + 1, total + float(reward)
        if terminated or truncated:
            break
    assert int(det.lengths[0]) == length and float(det.returns[0]) == total
    # Keys through vmap equal single calls.
    keys = jax.random.split(jax.random.key(8), 3)
    batched = jax.jit(jax.vmap(run))(keys)
    for i in range(3):
        single = run(keys[i])
        np.testing.assert_array_equal(batched.lengths[i], single.lengths)
        np.testing.assert_array_equal(batched.returns[i], single.returns)


def test_categorical_policy_deterministic_takes_the_argmax():
    logits = jnp.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]])
    apply_fn = lambda params, obs: (logits, jnp.zeros(2))  # noqa: E731
    det = jr.categorical_policy(apply_fn, deterministic=True)(None, None, jax.random.key(0))
    np.testing.assert_array_equal(det.action, [1, 0])
    np.testing.assert_allclose(det.log_prob, jax.nn.log_softmax(logits)[jnp.arange(2), det.action])
    samples = jax.vmap(lambda k: jr.categorical_policy(apply_fn)(None, None, k).action)(
        jax.random.split(jax.random.key(0), 4000)
    )
    freq = np.mean(np.asarray(samples[:, 0]) == 1)
    assert freq == pytest.approx(float(jax.nn.softmax(logits[0])[1]), abs=0.03)


@pytest.mark.parametrize("bad", [0, -2, 2.0, True])
def test_bad_num_episodes(bad):
    with pytest.raises((TypeError, ValueError), match="num_episodes"):
        jr.evaluate(CountingEnv(), None, scripted_policy([0]), None, jax.random.key(0), bad)


def test_max_steps_required_when_params_have_no_time_limit():
    class NoLimitParams:
        pass

    with pytest.raises(ValueError, match="max_steps"):
        jr.evaluate(CountingEnv(), NoLimitParams(), scripted_policy([0]), None, jax.random.key(0), 1)


def test_wrong_policy_or_params_say_what_to_pass():
    """A learner's policy and params passed the wrong way failed with Python's or flax's own words ("'NoneType'
    object is not callable", "not enough values to unpack", a kernel of shape (2, 4, 120))."""
    from jaxrl_rollout.algorithms import dqn, pqn

    d = dqn.make_dqn(dqn.DQNConfig(total_timesteps=2000, learning_starts=100, log_interval=1000,
                                   hidden_sizes=(8,), buffer_size=100, batch_size=8))
    key = jax.random.key(0)
    state = d.init(key)
    with pytest.raises(TypeError, match=r"^policy_fn must be a function .*got NoneType; .*eval_policy_fn"):
        jr.evaluate(d.env, d.env_params, d.policy_fn, d.policy_params(state), key, 2)  # DQN's policy_fn is None
    with pytest.raises(TypeError, match=r"^params is the whole train state, a DQNState; .*policy_params\(state\)"):
        jr.evaluate(d.env, d.env_params, d.eval_policy_fn, state, key, 2)
    sweep = jax.vmap(d.init)(jax.random.split(key, 2))
    with pytest.raises(Exception) as raised:  # flax's own error, with a note on the run axis
        jr.evaluate(d.env, d.env_params, d.eval_policy_fn, d.policy_params(sweep), key, 2)
    assert any("leading run axis" in note for note in getattr(raised.value, "__notes__", ())), raised.value
    p = pqn.make_pqn(pqn.PQNConfig(total_timesteps=256, num_envs=4, num_steps=32, num_minibatches=2,
                                   hidden_sizes=(8,)))
    pstate = p.init(key)
    with pytest.raises(TypeError, match=r"^PQN's policy takes params = \(q_params, epsilon\).*got a dict"):
        jr.evaluate(p.env, p.env_params, p.eval_policy_fn, pstate.params, key, 2)
    result = jr.evaluate(p.env, p.env_params, p.eval_policy_fn, p.policy_params(pstate), key, 2)
    assert result.returns.shape == (2,)
