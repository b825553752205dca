"""Observation normalisation and reward scaling against gymnasium's RunningMeanStd.

The references below run gymnasium's own `RunningMeanStd` (float64) over the
same streams, with the wrapper semantics written out step by step: update the
observation statistics with each arriving batch, then normalise and clip; for
rewards, gym 0.23's NormalizeReward (R = gamma R + r, update with R, divide by
sqrt(var + eps), zero R at episode ends) followed by CleanRL's clip at 10.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import normalization as nz
from jaxrl_rollout.algorithms import ppo
from tests.toy_envs import CountingEnv

gym_utils = pytest.importorskip("gymnasium.wrappers.utils")

EPS = 1e-8


def ref_normalize(rms, x, clip=10.0):
    return np.clip((x - rms.mean) / np.sqrt(rms.var + EPS), -clip, clip)


def test_rms_update_matches_gymnasium_over_a_stream():
    rng = np.random.default_rng(0)
    ours, ref = nz.rms_init((3,)), gym_utils.RunningMeanStd(shape=(3,))
    for n in (1, 5, 64, 2, 300):
        batch = rng.normal(loc=[1.0, -20.0, 300.0], scale=[0.1, 4.0, 50.0], size=(n, 3)).astype(np.float32)
        ours = nz.rms_update(ours, batch)
        ref.update(batch.astype(np.float64))
        np.testing.assert_allclose(ours.mean, ref.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.var, ref.var, rtol=1e-4)
        np.testing.assert_allclose(ours.count, ref.count, rtol=1e-6)


def test_rms_update_rejects_a_batch_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"batch must be \[N, \*\(3,\)\]"):
        nz.rms_update(nz.rms_init((3,)), jnp.zeros((4, 2)))


def value_policy(params, obs, key):
    """Never terminates; reports V(obs) = obs . (1, 100), so normalised final observations show in next_value."""
    del params, key
    b = obs.shape[0]
    return jr.PolicyOutput(jnp.zeros((b,), jnp.int32), jnp.zeros((b,)), obs @ jnp.array([1.0, 100.0]))


def test_rollout_normalises_observations_like_the_wrapper_stack():
    env, B, T = CountingEnv(), 4, 12  # 5-step time limit: truncations at t = 4, 9
    key = jax.random.key(3)
    raw_state, raw = jr.rollout(env, None, value_policy, None, jr.rollout_init(key, env, None, B), T)
    state0 = jr.rollout_init(key, env, None, B, normalize_observations=True)
    state, traj = jr.rollout(env, None, value_policy, None, state0, T)

    raw_obs = np.asarray(raw.obs, np.float64)
    arrivals = np.concatenate([raw_obs[1:], np.asarray(raw_state.obs, np.float64)[None]])
    ref = gym_utils.RunningMeanStd(shape=(2,))
    ref.update(raw_obs[0])
    expected_obs, expected_next = [], []
    for t in range(T):
        expected_obs.append(ref_normalize(ref, raw_obs[t]))
        ref.update(arrivals[t])
        # At a time limit the final observation is (time + 1, same tag): normalised, not added.
        final = np.stack([raw_obs[t, :, 0] + 1, raw_obs[t, :, 1]], -1)
        expected_next.append(ref_normalize(ref, final) @ np.array([1.0, 100.0]))
    np.testing.assert_array_equal(np.asarray(traj.obs[..., 0]) >= 10.0, np.asarray(expected_obs)[..., 0] >= 10.0)
    np.testing.assert_allclose(traj.obs, np.asarray(expected_obs), rtol=1e-4, atol=1e-4)
    truncated = np.asarray(traj.truncated)
    assert truncated.sum() == 2 * B
    np.testing.assert_allclose(
        np.asarray(traj.next_value)[truncated], np.asarray(expected_next)[truncated], rtol=1e-4, atol=1e-3
    )
    np.testing.assert_allclose(state.obs_rms.mean, ref.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.obs_rms.var, ref.var, rtol=1e-4)
    # The state keeps raw observations and raw rewards; only the policy's view is normalised.
    np.testing.assert_array_equal(state.obs, raw_state.obs)
    np.testing.assert_array_equal(traj.reward, raw.reward)
    np.testing.assert_array_equal(traj.done, raw.done)


def test_two_half_rollouts_equal_one_whole_with_normalisation():
    env, key = CountingEnv(), jax.random.key(1)
    state = jr.rollout_init(key, env, None, 3, normalize_observations=True)
    whole_state, whole = jr.rollout(env, None, value_policy, None, state, 8)
    mid, a = jr.rollout(env, None, value_policy, None, state, 4)
    end, b = jr.rollout(env, None, value_policy, None, mid, 4)
    np.testing.assert_array_equal(jnp.concatenate([a.obs, b.obs]), whole.obs)
    for x, y in zip(end.obs_rms, whole_state.obs_rms):
        np.testing.assert_array_equal(x, y)


def test_normalize_observations_needs_a_single_array_observation():
    with pytest.raises(ValueError, match="normalize_observations=True needs"):
        jr.rollout_init(jax.random.key(0), CountingEnv(dict_obs=True), None, 2, normalize_observations=True)


def reference_scaled_rewards(reward, done, gamma, clip=10.0):
    T, B = reward.shape
    returns, rms, out = np.zeros(B), gym_utils.RunningMeanStd(shape=()), np.zeros((T, B))
    for t in range(T):
        returns = returns * gamma + reward[t]
        rms.update(returns)
        out[t] = np.clip(reward[t] / np.sqrt(rms.var + EPS), -clip, clip)
        returns[done[t]] = 0.0
    return out, returns, rms


@pytest.mark.parametrize("clip", [10.0, 0.5])
def test_scale_rewards_matches_gym_normalize_reward(clip):
    rng = np.random.default_rng(1)
    T, B, gamma = 40, 6, 0.9
    reward = rng.normal(3.0, 5.0, size=(T, B)).astype(np.float32)
    done = rng.random((T, B)) < 0.15
    expected, returns, rms = reference_scaled_rewards(reward.astype(np.float64), done, gamma, clip)
    state = nz.reward_scale_init(B)
    # Two calls in a row equal one over the whole stream (the state carries over updates).
    state, first = nz.scale_rewards(state, reward[:25], done[:25], gamma, clip)
    state, second = nz.scale_rewards(state, reward[25:], done[25:], gamma, clip)
    np.testing.assert_allclose(np.concatenate([first, second]), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.returns, returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.rms.var, rms.var, rtol=1e-5)
    if clip == 0.5:
        assert np.any(np.abs(expected) == 0.5)


def test_scale_rewards_checks_shapes():
    with pytest.raises(ValueError, match=r"reward and done must both be \[T, B\] with B=3"):
        nz.scale_rewards(nz.reward_scale_init(3), jnp.zeros((5, 4)), jnp.zeros((5, 4), bool), 0.99)


@pytest.mark.parametrize(
    "field, value, message",
    [("normalize_observations", 1, "normalize_observations must be a bool"),
     ("obs_clip", 0.0, "obs_clip must be a positive number or None"),
     ("reward_clip", "10", "reward_clip must be a positive number or None")],
)
def test_ppo_config_rejects_bad_normalisation_fields(field, value, message):
    with pytest.raises(ValueError, match=message):
        ppo.PPOConfig(**{field: value})


@pytest.fixture(scope="module")
def normalised_ppo():
    config = ppo.PPOConfig(env_id="Pendulum-v1", num_envs=4, num_steps=8, total_timesteps=64, update_epochs=1,
                           num_minibatches=2, normalize_observations=True, normalize_rewards=True)
    algo = ppo.make_ppo(config)
    state, metrics = jax.jit(algo.train)(jax.random.key(0))
    return config, algo, state, metrics


def test_ppo_keeps_running_statistics_in_its_state(normalised_ppo):
    config, algo, state, metrics = normalised_ppo
    # Reset observations, then every step's observations, all counted.
    np.testing.assert_allclose(state.rollout.obs_rms.count, 1e-4 + config.num_envs * (1 + 64 // config.num_envs),
                               rtol=1e-6)
    np.testing.assert_allclose(state.reward_scale.rms.count, 1e-4 + 64, rtol=1e-6)
    assert state.reward_scale.returns.shape == (config.num_envs,)
    assert np.all(np.isfinite(metrics.policy_loss))
    # Episode returns are reported in raw rewards (Pendulum's are <= 0, 200-step episodes: none finished).
    assert np.all(np.asarray(metrics.num_episodes) == 0)


def test_ppo_policies_act_on_raw_observations_with_frozen_statistics(normalised_ppo):
    config, algo, state, _ = normalised_ppo
    obs = jnp.array([[1.0, 0.0, 0.5], [-0.5, 0.8, -3.0]])
    key = jax.random.key(5)
    out = algo.eval_policy_fn(algo.policy_params(state), obs, key)
    seen = nz.normalize(state.rollout.obs_rms, obs, config.obs_clip)
    dist, value = algo.module.apply(state.params, seen)
    np.testing.assert_allclose(out.action, dist.mode(), rtol=1e-6)
    np.testing.assert_allclose(out.value, value, rtol=1e-6)
    result = jr.evaluate(algo.env, algo.env_params, algo.eval_policy_fn, algo.policy_params(state), key, 2,
                         max_steps=5)
    assert result.lengths.tolist() == [5, 5]
