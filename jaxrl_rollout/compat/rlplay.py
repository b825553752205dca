"""rlplay engine (seed 004): fragment estimators, as pure JAX.

A fragment has T + 1 rows: row t holds (x_t, a_{t-1}, r_t, fin_t), fin_t meaning
the transition into t ended the episode; row T is the bootstrap step.
Estimators read rew = rew[1:], fin = fin[1:], val = value[:-1] and
bootstrap = value[-1], and mask with a select (`masked_fill`), so a NaN in a
masked value does not propagate (unlike the multiplicative masks elsewhere).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["gae", "returns"]


def _check_fragment(rew, fin, value):
    rew, fin, value = jnp.asarray(rew), jnp.asarray(fin, bool), jnp.asarray(value)
    if rew.ndim < 1 or rew.shape[0] < 2 or fin.shape != rew.shape or value.shape != rew.shape:
        raise ValueError(
            "rew, fin and value must share a fragment shape [T + 1, ...] with T >= 1, got "
            f"{rew.shape}, {fin.shape} and {value.shape}."
        )
    return rew[1:], fin[1:], value


def _reverse_select(deltas, coefs, fin, init):
    """x_t = deltas_t + where(fin_t, 0, coefs_t x_{t+1}), x_T = init."""

    def step(carry, inputs):
        delta, coef, done = inputs
        carry = delta + jnp.where(done, 0.0, coef * carry)
        return carry, carry

    return jax.lax.scan(step, init, (deltas, coefs, fin), reverse=True)[1]


def gae(rew: jax.Array, fin: jax.Array, value: jax.Array, gamma: float, gae_lambda: float) -> jax.Array:
    """rlplay's GAE on a fragment: delta_t = where(fin_t, 0, gamma v_{t+1}) + (r_t - v_t).

    Args:
      rew, fin, value: [T + 1, ...] fragment columns (value from the actor,
        row T the bootstrap).
      gamma, gae_lambda: floats.

    Returns:
      [T, ...] advantages for the actions in rows 0..T-1.
    """
    rew, fin, value = _check_fragment(rew, fin, value)
    val, following = value[:-1], value[1:]
    deltas = jnp.where(fin, 0.0, gamma * following) + (rew - val)
    coefs = jnp.broadcast_to(jnp.asarray(gamma * gae_lambda, rew.dtype), rew.shape)
    return _reverse_select(deltas, coefs, fin, jnp.zeros(rew.shape[1:], rew.dtype))


def returns(rew: jax.Array, fin: jax.Array, value: jax.Array, gamma: float) -> jax.Array:
    """rlplay's discounted returns on a fragment: G_t = r_t + where(fin_t, 0, gamma G_{t+1}), G_T = value[-1]."""
    rew, fin, value = _check_fragment(rew, fin, value)
    coefs = jnp.broadcast_to(jnp.asarray(gamma, rew.dtype), rew.shape)
    return _reverse_select(rew, coefs, fin, value[-1])
