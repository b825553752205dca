"""A short PPO run that learns through a non-gymnax suite: brax's inverted_pendulum.

The policy starts near uniform (an episode lasts about 5 steps before the pole
falls, return about 5); after 131k steps PPO keeps it up for tens of steps on
average. One compile (about 30 s on 2 cores) and a few seconds of run.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxrl_rollout.algorithms import ppo


def test_ppo_learns_brax_inverted_pendulum_through_the_adapter():
    config = ppo.PPOConfig(env_id="brax/inverted_pendulum", num_envs=16, num_steps=64, total_timesteps=131072,
                           update_epochs=4, num_minibatches=4)
    _, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    returns = np.asarray(metrics.episode_return)
    assert np.all(np.isfinite(returns)) and returns.shape == (128,)
    first, last = returns[:4].mean(), returns[-13:].mean()
    assert first < 10, returns[:4]  # a near-uniform policy drops the pole within a few steps
    assert last > 40 and last > 5 * first, (first, last)
