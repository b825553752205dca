"""Policy-gradient losses with CleanRL's and the A2C agent's exact semantics (docs/semantics.md §9).

Each loss returns `(loss, parts)`: the scalar to differentiate and a dict of
named scalars for logging, in the inputs' dtype (`clip_fraction` is float32). Inputs are per-sample arrays of one shape,
flat minibatches [N] or [T, B] (every mean is over all elements); arrays of
different shapes (a critic's [N, 1] beside [N] returns) are a ValueError, never
broadcast.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.advantages import normalize_advantages

__all__ = ["a2c_loss", "ppo_loss"]


def ppo_loss(
    log_prob: jax.Array,
    old_log_prob: jax.Array,
    advantages: jax.Array,
    value: jax.Array,
    old_value: jax.Array,
    returns: jax.Array,
    entropy: jax.Array,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    *,
    clip_value_loss: bool = True,
    normalize: bool = True,
) -> tuple[jax.Array, dict]:
    """PPO's clipped surrogate, CleanRL `ppo.py` (Schulman et al. 2017, arXiv:1707.06347).

        r = exp(log_prob - old_log_prob)
        A <- (A - mean A) / (std A + 1e-8)        (torch's unbiased std, per minibatch)
        policy_loss = mean(max(-A r, -A clip(r, 1 - eps, 1 + eps)))
        value_loss  = 1/2 mean(max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2))
                      (1/2 mean((v - R)^2) without value clipping)
        loss = policy_loss - ent_coef mean(entropy) + vf_coef value_loss

    Args:
      log_prob: [N] log pi(a | s) under the current parameters.
      old_log_prob: [N] log-probs stored by the rollout.
      advantages: [N] advantage estimates.
      value: [N] current critic values.
      old_value: [N] values stored by the rollout.
      returns: [N] value targets.
      entropy: [N] entropy of the current policy.
      clip_eps: the clipping epsilon (also clips the value, as in CleanRL).
      vf_coef, ent_coef: loss coefficients.
      clip_value_loss: CleanRL's `clip_vloss`.
      normalize: CleanRL's `norm_adv` (per-minibatch normalisation).

    Returns:
      (loss, parts) with parts policy_loss, value_loss, entropy, approx_kl
      (CleanRL's mean((r - 1) - log r)), clip_fraction (mean |r - 1| > eps).
    """
    _checks.check_same_shapes("ppo_loss", log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages,
                              value=value, old_value=old_value, returns=returns, entropy=entropy)
    _checks.check_coefficient(clip_eps, "clip_eps", high=None)
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    if normalize:
        advantages = normalize_advantages(advantages, ddof=1)
    policy_loss = jnp.mean(
        jnp.maximum(-advantages * ratio, -advantages * jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps))
    )
    unclipped = (value - returns) ** 2
    if clip_value_loss:
        clipped_value = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
        value_loss = 0.5 * jnp.mean(jnp.maximum(unclipped, (clipped_value - returns) ** 2))
    else:
        value_loss = 0.5 * jnp.mean(unclipped)
    mean_entropy = jnp.mean(entropy)
    loss = policy_loss - ent_coef * mean_entropy + vf_coef * value_loss
    ratio_sg, log_ratio_sg = jax.lax.stop_gradient(ratio), jax.lax.stop_gradient(log_ratio)
    parts = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": mean_entropy,
        "approx_kl": jnp.mean((ratio_sg - 1.0) - log_ratio_sg),
        "clip_fraction": jnp.mean((jnp.abs(ratio_sg - 1.0) > clip_eps).astype(jnp.float32)),
    }
    return loss, parts


def a2c_loss(
    log_prob: jax.Array,
    value: jax.Array,
    returns: jax.Array,
    entropy: jax.Array,
    vf_coef: float,
    ent_coef: float,
) -> tuple[jax.Array, dict]:
    """The A2C agent's `_update_network` loss (docs/semantics.md §9.2; Mnih et al. 2016, arXiv:1602.01783).

        A = R - v;  value_loss = mean(A^2) (no 1/2);  policy_loss = -mean(stop_gradient(A) log pi(a))
        loss = policy_loss + vf_coef value_loss - ent_coef mean(entropy)

    Args:
      log_prob: [N] log pi(a | s). value: [N]. returns: [N] n-step returns.
      entropy: [N]. vf_coef, ent_coef: coefficients.

    Returns:
      (loss, parts) with parts policy_loss, value_loss, entropy.
    """
    _checks.check_same_shapes("a2c_loss", log_prob=log_prob, value=value, returns=returns, entropy=entropy)
    advantages = returns - value
    value_loss = jnp.mean(advantages**2)
    policy_loss = -jnp.mean(jax.lax.stop_gradient(advantages) * log_prob)
    mean_entropy = jnp.mean(entropy)
    loss = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": mean_entropy}
