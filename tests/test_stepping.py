"""The step kit's contracts (jaxrl_rollout.stepping), on CountingEnv (see toy_envs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl_rollout import stepping
from tests.toy_envs import CountingEnv, CountingState, OldApiEnv, counting_recurrent_policy, obs_time, scripted_policy

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
