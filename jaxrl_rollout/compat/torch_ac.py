"""torch-ac `BaseAlgo.collect_experiences` (seed 000), as pure JAX.

torch-ac keeps `mask = 1 - done` (start flags as masks: masks[i] = 1 - s_i),
calls a recurrent model with `memory * mask`, stores the unmasked memory,
optionally reshapes rewards from the post-step observation, runs the CleanRL
GAE recurrence in float32 and flattens every field env-major ([T, P] ->
[P, T] -> [P * T]). Time limits count as terminations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_rollout.advantages import gae

__all__ = ["compute_gae"]


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    masks: jax.Array,
    next_value: jax.Array,
    next_mask: jax.Array,
    discount: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """torch-ac's advantage loop.

    next_mask_i = masks[i + 1] (next_mask at the last step);
    delta = r_i + discount V_{i+1} next_mask_i - V_i;
    A_i = delta + discount lambda A_{i+1} next_mask_i; returnn = V + A.

    Args:
      rewards, values: [T, P].
      masks: [T, P] float 1 - start flag.
      next_value: [P] V(obs after the last step).
      next_mask: [P] 1 - done of the last step.
      discount, gae_lambda: floats.

    Returns:
      (advantages, returnn), each [T, P] (time-major; flatten env-major for exps).
    """
    masks = jnp.asarray(masks)
    ends = 1.0 - jnp.concatenate([masks[1:], jnp.asarray(next_mask, masks.dtype)[None]])
    values = jnp.asarray(values)
    next_values = jnp.concatenate([values[1:], jnp.asarray(next_value, values.dtype)[None]])
    return gae(rewards, values, next_values, ends, ends, discount, gae_lambda)
