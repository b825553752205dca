"""Episode statistics read from a trajectory, without an env wrapper."""

from __future__ import annotations

import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.types import EpisodeMetrics, Trajectory

__all__ = ["episode_means", "episode_metrics", "episode_sums"]


def episode_metrics(traj: Trajectory) -> EpisodeMetrics:
    """Mean return and length of the episodes that completed in `traj`.

    Pools every episode that ended anywhere in the trajectory (all of its
    leading axes); vmap it over a seed axis to get per-seed figures. Jittable.

    Args:
      traj: a `Trajectory` with `done`, `completed_return` and
        `completed_length` of shape [T, B] (or any shape, pooled).

    Returns:
      `EpisodeMetrics`; the means are NaN, never 0, when no episode completed,
      and `num_episodes` says how many did.
    """
    return episode_means(*episode_sums(traj))


def episode_sums(traj: Trajectory) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """`(count, total_return, total_length)` of the episodes that completed in `traj` (int32, float32, float32).

    Sums add up over pieces of one long rollout (the `rollout` command keeps one chunk's trajectory at a time);
    `episode_means` turns them into `episode_metrics`' figures.
    """
    if not all(hasattr(traj, f) for f in ("done", "completed_return", "completed_length")):
        raise TypeError(f"traj must be a Trajectory (done, completed_return, completed_length), got "
                        f"{type(traj).__name__}.")
    for name in ("completed_return", "completed_length"):  # a [T, 1] beside [T, B] flags broadcast silently
        if jnp.shape(getattr(traj, name)) != jnp.shape(traj.done):
            raise ValueError(f"traj.{name} must have the shape of traj.done {jnp.shape(traj.done)}, got "
                             f"{jnp.shape(getattr(traj, name))}.")
    _checks.check_flags(done=traj.done)  # where concrete: a 0.5 counted as an episode end
    done = jnp.asarray(traj.done, dtype=bool)
    return (jnp.sum(done, dtype=jnp.int32),
            jnp.sum(jnp.where(done, traj.completed_return, 0.0), dtype=jnp.float32),
            jnp.sum(jnp.where(done, traj.completed_length, 0), dtype=jnp.float32))


def episode_means(count: jnp.ndarray, total_return: jnp.ndarray, total_length: jnp.ndarray) -> EpisodeMetrics:
    """`EpisodeMetrics` from `episode_sums`: the means NaN, never 0, when no episode completed."""
    denom = jnp.maximum(count, 1).astype(jnp.float32)
    nan = jnp.float32(jnp.nan)
    return EpisodeMetrics(
        mean_return=jnp.where(count > 0, total_return / denom, nan),
        mean_length=jnp.where(count > 0, total_length / denom, nan),
        num_episodes=count,
    )
