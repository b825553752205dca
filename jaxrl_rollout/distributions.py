"""Action distributions with torch.distributions' numerics.

`Categorical` follows torch's two construction paths exactly
(../SEMANTICS.md section 10):

- from logits: logits are normalised as l - logsumexp(l); probs = softmax(l);
  the entropy clamps the logits at finfo.min, so a -inf logit contributes 0
  (a naive JAX entropy gives NaN there).
- from probs (the A2C seed): probs are divided by their sum and the logits are
  log(clamp(p, eps, 1 - eps)) with eps = finfo.eps, without renormalising, so
  log_prob saturates at log(eps) = -15.94 in float32.

Sampling uses `jax.random`, whose stream cannot reproduce torch.multinomial;
golden tests teacher-force the recorded actions.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Categorical", "categorical_from_logits", "categorical_from_probs"]


class Categorical(NamedTuple):
    """A categorical distribution over the last axis, batched over the others.

    Attributes:
      logits: [..., A] normalised log-probabilities as torch stores them.
      probs: [..., A] probabilities as torch stores them.
    """

    logits: jax.Array
    probs: jax.Array

    def log_prob(self, action: jax.Array) -> jax.Array:
        """log p(action) for integer actions of the batch shape [...]."""
        action = jnp.asarray(action)
        if action.shape != self.logits.shape[:-1]:
            raise ValueError(
                f"action must have the distribution's batch shape {self.logits.shape[:-1]}, "
                f"got {action.shape}."
            )
        return jnp.take_along_axis(self.logits, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """-sum p log p, with torch's clamp of the logits at finfo.min."""
        logits = jnp.maximum(self.logits, jnp.finfo(self.logits.dtype).min)
        return -jnp.sum(logits * self.probs, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """int32 samples of the batch shape."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def mode(self) -> jax.Array:
        """The most probable action (the first one on ties, as torch's argmax)."""
        return jnp.argmax(self.probs, axis=-1).astype(jnp.int32)


def _check_events(x: jax.Array, name: str) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < 1 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must be a floating array [..., A] with rank >= 1, got {x.dtype}{x.shape}.")
    return x


def categorical_from_logits(logits: jax.Array) -> Categorical:
    """torch `Categorical(logits=logits)`."""
    logits = _check_events(logits, "logits")
    normalised = logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
    return Categorical(logits=normalised, probs=jax.nn.softmax(normalised, axis=-1))


def categorical_from_probs(probs: jax.Array) -> Categorical:
    """torch `Categorical(probs=probs)`: the logits are log of the clamped probs."""
    probs = _check_events(probs, "probs")
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    eps = jnp.finfo(probs.dtype).eps
    return Categorical(logits=jnp.log(jnp.clip(probs, eps, 1.0 - eps)), probs=probs)
