"""ARENA's PPO chapter: `compute_advantages`, `get_minibatch_indices`, `play_step`, `get_minibatches`.

ARENA stores `terminated[t]`, the flag carried from the previous step (a start
flag, False initially), and ignores truncation: at a time limit the value of
the reset observation is bootstrapped across the episode boundary. That is
reproduced here, not fixed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, batching
from jaxrl_rollout.advantages import _ends_to_starts, _starts_to_ends, gae
from jaxrl_rollout.collect import rollout
from jaxrl_rollout.types import RolloutState

__all__ = ["ArenaMemory", "compute_advantages", "get_minibatch_indices", "get_minibatches", "play_steps"]


class ArenaMemory(NamedTuple):
    """ARENA's `ReplayMemory` contents, time-major [T, B, ...]."""

    obs: Any
    actions: jax.Array
    logprobs: jax.Array
    values: jax.Array
    rewards: jax.Array
    terminated: jax.Array  # start flags: transition t - 1 terminated


def compute_advantages(
    next_value: jax.Array,
    next_terminated: jax.Array,
    rewards: jax.Array,
    values: jax.Array,
    terminated: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> jax.Array:
    """ARENA's argument order: A_{T-1} = delta_{T-1}; A_s = delta_s + gamma lambda (1 - d_{s+1}) A_{s+1}.

    Args:
      next_value: [B] V(s_T).
      next_terminated: [B] d_T.
      rewards, values: [T, B].
      terminated: [T, B] start flags d_t.
      gamma, gae_lambda: floats.

    Returns:
      [T, B] advantages.
    """
    _checks.check_last_step("arena.compute_advantages", "values", values, next_value=next_value,
                            next_terminated=next_terminated)
    ends = _starts_to_ends(terminated, next_terminated, ("terminated", "next_terminated"))
    values = jnp.asarray(values)
    next_values = jnp.concatenate([values[1:], jnp.asarray(next_value, values.dtype)[None]])
    advantages, _ = gae(rewards, values, next_values, ends, ends, gamma, gae_lambda)
    return advantages


def get_minibatch_indices(key: jax.Array, batch_size: int, minibatch_size: int) -> jax.Array:
    """A permutation of range(batch_size) cut into [batch_size // minibatch_size, minibatch_size]."""
    if not _checks.is_int(minibatch_size) or minibatch_size <= 0:
        raise ValueError(f"minibatch_size must be a positive Python int, got {minibatch_size!r}.")
    if _checks.is_int(batch_size) and batch_size % minibatch_size:
        raise ValueError(f"batch_size={batch_size} is not a multiple of minibatch_size={minibatch_size}.")
    return batching.minibatch_indices(key, batch_size, batch_size // minibatch_size)[0]


def play_steps(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: Any,
    state: RolloutState,
    num_steps: int,
    terminated: jax.Array,
) -> tuple[RolloutState, ArenaMemory, jax.Array, jax.Array]:
    """`num_steps` calls of ARENA's `PPOAgent.play_step`.

    Args:
      env, env_params, policy_fn, params, state, num_steps: as in `rollout`.
      terminated: [B] ARENA's `next_terminated` carried from the previous call
        (all False at the start).

    Returns:
      (state, memory, next_value, next_terminated): next_value is V(next_obs)
      (the reset observation after a done), as ARENA's critic computes it.
    """
    state, traj = rollout(env, env_params, policy_fn, params, state, num_steps, bootstrap_truncated=False)
    memory = ArenaMemory(
        obs=traj.obs,
        actions=traj.action,
        logprobs=traj.log_prob,
        values=traj.value,
        rewards=traj.reward,
        terminated=_ends_to_starts(traj.terminated, terminated, ("the rollout's terminated", "terminated")),
    )
    return state, memory, traj.next_value[-1], traj.terminated[-1]


def get_minibatches(
    memory: ArenaMemory,
    next_value: jax.Array,
    next_terminated: jax.Array,
    gamma: float,
    gae_lambda: float,
    indices: jax.Array,
) -> dict:
    """ARENA's `get_minibatches`: advantages, returns, then `flatten(0, 1)[indices]`.

    Args:
      memory: `ArenaMemory` [T, B].
      next_value, next_terminated: [B].
      gamma, gae_lambda: floats.
      indices: int [P, M, mb] (P = batches_per_learning_phase), e.g. from
        `get_minibatch_indices` or replayed from a PyTorch run.

    Returns:
      dict of obs, actions, logprobs, advantages, returns, terminated, each
      [P, M, mb, ...].
    """
    advantages = compute_advantages(
        next_value, next_terminated, memory.rewards, memory.values, memory.terminated, gamma, gae_lambda
    )
    data = {
        "obs": memory.obs,
        "actions": memory.actions,
        "logprobs": memory.logprobs,
        "advantages": advantages,
        "returns": advantages + memory.values,
        "terminated": memory.terminated,
    }
    return batching.take(batching.flatten_time_major(data), indices)
