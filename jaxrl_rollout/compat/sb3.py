"""Stable-Baselines3: `RolloutBuffer.compute_returns_and_advantage` and the time-limit bootstrap.

SB3's `collect_rollouts` adds gamma * V(terminal observation) to the reward of
a step that hit a time limit (done, `TimeLimit.truncated`, terminal
observation present) and stores that augmented reward; the done flag stays set,
so the GAE trace is cut there. `episode_starts` are start flags, all ones at
the start of `learn`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks
from jaxrl_rollout.advantages import _starts_to_ends, gae
from jaxrl_rollout.types import Trajectory

__all__ = ["compute_returns_and_advantage", "from_trajectory", "timeout_rewards"]


def compute_returns_and_advantage(
    rewards: jax.Array,
    values: jax.Array,
    episode_starts: jax.Array,
    last_values: jax.Array,
    dones: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """SB3's GAE: the CleanRL loop with `episode_starts` for `dones`.

    Args:
      rewards: [T, B] stored rewards (already augmented on timeouts).
      values: [T, B].
      episode_starts: [T, B] start flags.
      last_values: [B] V(obs) after the last step.
      dones: [B] whether the last step ended an episode.
      gamma, gae_lambda: floats.

    Returns:
      (advantages, returns), each [T, B].
    """
    values = jnp.asarray(values)
    if jnp.size(last_values) == int(np.prod(values.shape[1:])):  # SB3 flattens them (its critic gives [B, 1])
        last_values = jnp.reshape(jnp.asarray(last_values), values.shape[1:])
    _checks.check_last_step("sb3.compute_returns_and_advantage", "values", values, last_values=last_values,
                            dones=dones)
    ends = _starts_to_ends(episode_starts, dones, ("episode_starts", "dones"))
    next_values = jnp.concatenate([values[1:], jnp.asarray(last_values, values.dtype)[None]])
    return gae(rewards, values, next_values, ends, ends, gamma, gae_lambda)


def timeout_rewards(
    rewards: jax.Array, truncated: jax.Array, terminal_values: jax.Array, gamma: float
) -> jax.Array:
    """r_t + gamma V(terminal_obs_t) where the step was truncated by a time limit, else r_t.

    Args:
      rewards: [T, B] rewards (integers are computed in float, as the estimators do).
      truncated: [T, B] flags, bool or {0, 1}: the step hit a time limit.
      terminal_values: [T, B] V(terminal observation), read where truncated.
      gamma: a float in [0, 1].

    Returns:
      [T, B] rewards in the inputs' float dtype (at least float32).

    Raises:
      ValueError: the three arrays of different shapes (a [B] flag beside [T, B] rewards would broadcast to
        every step), a flag other than 0 and 1, or gamma outside [0, 1].
    """
    _checks.check_same_shapes("sb3.timeout_rewards", rewards=rewards, truncated=truncated,
                              terminal_values=terminal_values)
    _checks.check_flags(truncated=truncated)
    _checks.check_coefficient(gamma, "gamma")
    dtype = _checks.float_dtype(rewards, terminal_values)  # int rewards: V(terminal) was cast to int (0.75 -> 0)
    rewards = jnp.asarray(rewards, dtype)
    bonus = gamma * jnp.asarray(terminal_values, dtype)
    return jnp.where(jnp.asarray(truncated, bool), rewards + bonus, rewards)


def from_trajectory(
    traj: Trajectory, gamma: float, gae_lambda: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """What SB3 stores and computes for a `rollout` trajectory.

    Needs `rollout(..., bootstrap_truncated=True)` (the default), whose
    `next_value` is V(final observation) where truncated.

    Returns:
      (stored_rewards, advantages, returns), each [T, B].
    """
    rewards = timeout_rewards(traj.reward, traj.truncated, traj.next_value, gamma)
    advantages, returns = compute_returns_and_advantage(
        rewards, traj.value, traj.first, traj.next_value[-1], traj.done[-1], gamma, gae_lambda
    )
    return rewards, advantages, returns
