"""envpool tasks through `EnvpoolEnv`: next-step auto-reset turned into same-step."""

from __future__ import annotations

import envpool  # the test extra installs it (1.2.5 on Python 3.11, 1.2.7 on 3.12+): a missing one must fail
import jax
import numpy as np
import pytest

import jaxrl_rollout as jr
from jaxrl_rollout import envs
from tests.test_envs_host import _apply, _params, _value_np


def test_envpool_next_step_reset_becomes_same_step():
    """Episodes of exactly LIMIT steps, every step a real one (reward 1, no reset step lost)."""
    env, env_params = envs.make("envpool/CartPole-v1", max_episode_steps=5)
    assert env_params.max_steps_in_episode == 5
    params = _params()
    policy = jr.policies.categorical_policy(_apply)
    state = jr.rollout_init(jax.random.key(0), env, None, 2)
    _, traj = jax.jit(lambda s: jr.rollout(env, None, policy, params, s, 12))(state)
    traj = jax.tree.map(np.asarray, traj)
    ends = traj.terminated | traj.truncated
    # Random CartPole balances for 5 steps from a reset: every episode is truncated after 5 real steps.
    np.testing.assert_array_equal(ends[:, 0], [t % 5 == 4 for t in range(12)])
    np.testing.assert_array_equal(traj.reward, np.ones((12, 2)))
    assert traj.truncated[4].all() and not traj.terminated.any()
    # The first observation of the next episode is a fresh reset (|x| < 0.05), not the final one.
    assert np.all(np.abs(traj.obs[5]) < 0.05)

    # The final observation equals the raw envpool's (next-step auto-reset) observation at that step.
    raw = envpool.make_gymnasium("CartPole-v1", num_envs=2, seed=env._seed, max_episode_steps=5)
    raw.reset()
    for t in range(5):
        obs, *_ = raw.step(traj.action[t].astype(np.int64))
    np.testing.assert_allclose(traj.next_value[4], _value_np(params, obs), rtol=1e-5, atol=1e-6)
    assert not np.allclose(obs, traj.obs[5])


def test_envpool_unknown_task():
    with pytest.raises(ValueError, match="CartPole-v1"):
        envs.make("envpool/Cartpole-v1")


def test_envpool_seed_i_of_a_sweep_equals_its_run_alone():
    from tests.test_envs_host import assert_seed_i_equals_its_run_alone

    assert_seed_i_equals_its_run_alone("envpool/CartPole-v1")


def test_envpool_makes_and_steps_without_gymnasium_box_cast_warnings():
    """envpool gives its float32 Boxes float64 bounds, and gymnasium warned of the cast (4 lines on every
    command: when made, then when each pool first read its spaces); the adapter leaves that warning out."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        env, _ = envs.make("envpool/Pendulum-v1")
        state = jr.rollout_init(jax.random.key(0), env, None, 2)
        policy = jr.policies.uniform_random_policy(env.action_space(None))
        jax.block_until_ready(jr.rollout(env, None, policy, None, state, 3))
    assert not [w for w in seen if "precision lowered" in str(w.message)], [str(w.message) for w in seen]


def test_envpool_images_come_channels_last():
    """envpool's Atari frames are channels first ([stack, H, W]); network='auto' read [4, 84, 84] as a 4 x 84 image
    of 84 channels and trained on it silently. The adapter gives them as [H, W, stack], and its final observations
    too; the frames are envpool's own."""
    from jaxrl_rollout.algorithms import _common

    options = dict(img_height=20, img_width=24, stack_num=2, max_episode_steps=3)
    env, env_params = envs.make("envpool/Pong-v5", **options)
    space = env.observation_space(env_params)
    assert tuple(space.shape) == (20, 24, 2) and np.dtype(space.dtype) == np.uint8
    obs, state = env.reset(jax.random.split(jax.random.key(0), 2), env_params)
    raw = envpool.make_gymnasium("Pong-v5", num_envs=2, seed=env._seed, **options)
    raw_obs, _ = raw.reset()
    np.testing.assert_array_equal(np.asarray(obs), np.moveaxis(raw_obs, 1, -1))
    for t in range(3):
        action = np.array([t % 6, (t + 2) % 6], np.int32)
        obs, state, _, _, truncated, info = env.step(None, state, action, env_params)
        raw_obs, *_ = raw.step(action.astype(np.int64))
    assert np.asarray(truncated).all()  # max_episode_steps: the final observation is the third step's frames
    np.testing.assert_array_equal(np.asarray(info["final_observation"]), np.moveaxis(raw_obs, 1, -1))
    assert np.asarray(obs).shape == (2, 20, 24, 2)
    env.close()
    module = _common.choose_network("auto", space, 6, False, (64,), "tanh")
    assert type(module).__name__ == "ActorCriticCNN"
