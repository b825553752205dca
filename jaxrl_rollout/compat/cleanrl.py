"""CleanRL `ppo.py`: GAE over start flags, with time limits treated as termination.

CleanRL stores `dones[t] = next_done` before step t (a start flag: obs[t]
begins an episode) with next_done = terminated or truncated, and bootstraps
the last step from `next_value` masked by `next_done`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.advantages import _starts_to_ends, gae
from jaxrl_rollout.types import Trajectory

__all__ = ["compute_gae", "from_trajectory"]


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    dones: jax.Array,
    next_value: jax.Array,
    next_done: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """CleanRL's reversed GAE loop.

    nextnonterminal = 1 - next_done at t = T - 1, else 1 - dones[t + 1];
    delta = r_t + gamma V' nextnonterminal - V_t;
    A_t = delta + gamma lambda nextnonterminal A_{t+1}; returns = A + values.

    Args:
      rewards, values: [T, B].
      dones: [T, B] start flags as CleanRL stores them.
      next_value: [B] V(next_obs) after the last step.
      next_done: [B] the start flag of next_obs.
      gamma, gae_lambda: floats (or traced scalars).

    Returns:
      (advantages, returns), each [T, B].
    """
    _checks.check_last_step("cleanrl.compute_gae", "values", values, next_value=next_value, next_done=next_done)
    ends = _starts_to_ends(dones, next_done, ("dones", "next_done"))
    next_values = jnp.concatenate([jnp.asarray(values)[1:], jnp.asarray(next_value, jnp.result_type(values))[None]])
    return gae(rewards, values, next_values, ends, ends, gamma, gae_lambda)


def from_trajectory(traj: Trajectory, gamma: float, gae_lambda: float) -> tuple[jax.Array, jax.Array]:
    """CleanRL's advantages and returns for a `rollout` trajectory.

    Time limits count as terminations (no bootstrap from the final
    observation), as in CleanRL. Works with either `bootstrap_truncated`
    setting: the value after the last step is read only when that step did not
    end an episode, and then it is V(next obs) in both.
    """
    return compute_gae(
        traj.reward, traj.value, traj.first, traj.next_value[-1], traj.done[-1], gamma, gae_lambda
    )
