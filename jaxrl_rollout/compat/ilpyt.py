"""ilpyt `Runner` and `Experiences` (seed 001), as pure JAX with fixed shapes and masks."""

from __future__ import annotations

import jax

from jaxrl_rollout.advantages import discounted_returns

__all__ = ["compute_target"]


def compute_target(rewards: jax.Array, dones: jax.Array, next_value: jax.Array, gamma: float) -> jax.Array:
    """ilpyt's `compute_target`: G = V(next_states[-1]); G_i = r_i + gamma G (1 - done_i), reversed.

    Args:
      rewards: [T, B]; dones: [T, B] end flags; next_value: [B]; gamma: float.

    Returns:
      [T, B] targets (time-major, as `flatten_batch` expects).
    """
    return discounted_returns(rewards, dones, next_value, gamma)
