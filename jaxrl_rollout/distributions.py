"""Action distributions with torch.distributions' numerics.

Both distributions are NamedTuples of arrays, so they pass through `jit`,
`vmap` and `lax.scan` (a scan stacks them along a new leading axis) and can be
indexed like any pytree. Their methods follow torch's formulas term by term
(docs/semantics.md §13).

`Categorical` follows torch's two construction paths exactly:

- from logits: logits are normalised as l - logsumexp(l); probs = softmax(l);
  the entropy clamps the logits at finfo.min, so a -inf logit contributes 0
  (a naive JAX entropy gives NaN there).
- from probs (the A2C agent's path, docs/semantics.md §13.2): probs are
  divided by their sum and the logits are log(clamp(p, eps, 1 - eps)) with
  eps = finfo.eps, without renormalising, so log_prob saturates at
  log(eps) = -15.94 in float32.

`DiagGaussian` is torch `Normal(mean, exp(log_std))` with log_prob and entropy
summed over the last (action) axis, as CleanRL's continuous PPO does:

    log_prob(x) = sum_a [ -(x - mu)^2 / (2 sigma^2) - log sigma - log sqrt(2 pi) ]
    entropy     = sum_a [ 0.5 + 0.5 log(2 pi) + log sigma ]

with the terms grouped as torch groups them. `jax.scipy.stats.norm.logpdf`
computes -(log(2 pi sigma^2) + (x - mu)^2 / sigma^2) / 2 instead, which differs
by a few ulps on ordinary inputs (about 2.8e-7 relative) and returns -inf
where sigma^2 overflows float32 (log sigma > 44), where torch's quadratic term
just vanishes and its log_prob stays finite (docs/semantics.md §13.3).

Sampling uses `jax.random`, whose streams cannot reproduce torch.multinomial
or torch.normal; golden tests teacher-force the recorded actions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, prng
from jaxrl_rollout._fusion import computed_once

__all__ = [
    "Categorical",
    "DiagGaussian",
    "ProbsCategorical",
    "categorical_from_logits",
    "categorical_from_probs",
    "diag_gaussian",
    "masked_logits",
]

# Python floats, as in torch's Normal, rounded to float32 when they meet an array.
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
_ENTROPY_CONST = 0.5 + 0.5 * math.log(2 * math.pi)


class Categorical(NamedTuple):
    """A categorical distribution over the last axis, batched over the others.

    Attributes:
      logits: [..., A] normalised log-probabilities as torch stores them.
      probs: [..., A] probabilities as torch stores them.
    """

    logits: jax.Array
    probs: jax.Array

    def log_prob(self, action: jax.Array) -> jax.Array:
        """log p(action) for integer actions of the batch shape [...]; NaN for an action outside [0, A).

        Float actions holding whole numbers are read as torch reads them
        (`value.long()`; ilpyt stores its discrete actions as floats); a
        float that is not a whole number is NaN too (torch's argument
        validation refuses it). A bool action is a TypeError.

        The logit is picked with a one-hot select and a sum (adding zeros, so
        the value is the logit itself, -inf included) rather than a gather,
        whose gradient is a scatter: a learner's backward pass stays
        elementwise.
        """
        # A NumPy int64 action is checked before jnp.asarray casts it to int32 (2**32 + 1 read as 1 otherwise)
        host = np.asarray(action) if isinstance(action, (np.ndarray, np.generic)) else None
        action = jnp.asarray(action)
        if action.shape != self.logits.shape[:-1]:
            raise ValueError(
                f"action must have the distribution's batch shape {self.logits.shape[:-1]}, "
                f"got {action.shape}."
            )
        if action.dtype == jnp.bool_ or not jnp.issubdtype(action.dtype, jnp.number):
            raise TypeError(f"action must hold action indices (integers), got {action.dtype}.")
        num_actions = self.logits.shape[-1]
        if jnp.issubdtype(action.dtype, jnp.integer):
            # checked in the action's own dtype: cast first, a 64-bit 2**32 + 1 read as 1, and a uint32 past
            # 2**31 went negative; a dtype too narrow to hold A (uint8 against 300 logits) is always below it
            below = action < num_actions if num_actions <= jnp.iinfo(action.dtype).max else True
            valid = (action >= 0) & below
            action = action.astype(jnp.int32)
        else:
            valid = (action >= 0) & (action < num_actions) & (action == jnp.floor(action))
            # compared as ints: a half-precision range holds some indices twice (bfloat16 reads 257 as 256)
            action = jnp.where(valid, action, 0).astype(jnp.int32)
        if host is not None and jnp.issubdtype(host.dtype, jnp.integer):
            valid = valid & jnp.asarray((host >= 0) & (host < num_actions))
        picked = action[..., None] == jnp.arange(num_actions, dtype=action.dtype)
        log_prob = jnp.sum(jnp.where(picked, self.logits, 0.0), axis=-1)
        return jnp.where(valid, log_prob, jnp.nan)

    def entropy(self) -> jax.Array:
        """-sum p log p, with torch's clamp of the logits at finfo.min."""
        logits = jnp.maximum(self.logits, jnp.finfo(self.logits.dtype).min)
        return -jnp.sum(logits * self.probs, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """int32 samples of the batch shape."""
        # prng.fused: the same draw as from `key`, hashed in one kernel on CPU
        return jax.random.categorical(prng.fused(key), self.logits, axis=-1).astype(jnp.int32)

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


def masked_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """`logits` with every masked-out action's logit set to -inf.

    `categorical_from_logits` of the result is the distribution renormalised
    over the allowed actions: p'(a) = p(a) / sum_{b allowed} p(b) for allowed
    a, 0 otherwise. Its `log_prob` is finite for allowed actions (-inf for
    the others) and `Categorical.entropy` clamps the -inf logits at
    finfo.min, so the entropy and every gradient stay finite.

    Args:
      logits: [..., A] floating.
      mask: [..., A] bool (True: allowed), broadcastable to `logits`. At least
        one action per row must be allowed; a row with none gives NaN.
    """
    logits = _check_events(logits, "logits")
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_:  # an int 2 or a float 0.5 read as "allowed"
        raise TypeError(f"mask must be bool (True: allowed), got {mask.dtype}.")
    try:
        shape = jnp.broadcast_shapes(mask.shape, logits.shape)
    except ValueError:
        shape = None
    if shape != logits.shape:  # a [3, 5] mask made [5] logits [3, 5]
        raise ValueError(f"mask must be broadcastable to the logits' shape {logits.shape}, got {mask.shape}.")
    return jnp.where(mask, logits, jnp.array(-jnp.inf, dtype=logits.dtype))


class ProbsCategorical(Categorical):
    """A `Categorical` built from probabilities (`categorical_from_probs`): the same fields and numerics, and
    `sample` never draws an action of probability 0, as torch's multinomial does not (the clamped logits alone
    give each such action eps, about 1.2e-7 in float32)."""

    def sample(self, key: jax.Array) -> jax.Array:
        """int32 samples of the batch shape, from the actions of nonzero probability."""
        logits = jnp.where(self.probs > 0, self.logits, -jnp.inf)
        return jax.random.categorical(prng.fused(key), logits, axis=-1).astype(jnp.int32)


def categorical_from_probs(probs: jax.Array) -> ProbsCategorical:
    """torch `Categorical(probs=probs)`: the logits are log of the clamped probs (a `ProbsCategorical`).

    Concrete probabilities are checked as torch checks them: a negative one, or a row summing to 0, is a
    ValueError (the entropy came out negative, or NaN); traced ones are not.
    """
    probs = _check_events(probs, "probs")
    values = _checks.concrete(probs)
    if values is not None:
        values = values.astype(np.float64)
        if (values < 0).any() or not np.isfinite(values).all():
            bad = values[(values < 0) | ~np.isfinite(values)].ravel()[0]
            raise ValueError(f"probs must be finite and >= 0, got {bad:g}.")
        if (values.sum(axis=-1) <= 0).any():
            raise ValueError("probs must have a positive sum in every row, got a row of zeros.")
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    eps = jnp.finfo(probs.dtype).eps
    # bounds in the probs' dtype: bfloat16 probs gave float32 logits
    low, high = jnp.asarray(eps, probs.dtype), jnp.asarray(1.0 - float(eps), probs.dtype)
    return ProbsCategorical(logits=jnp.log(jnp.clip(probs, low, high)), probs=probs)


class DiagGaussian(NamedTuple):
    """A diagonal Gaussian over the last axis, batched over the others.

    torch `Normal(mean, exp(log_std))` with `log_prob` and `entropy` summed over
    the action axis (CleanRL `ppo_continuous_action.py`). Build it with
    `diag_gaussian`, which checks shapes and broadcasts `log_std` to the shape
    of `mean` so that both fields stack and slice together.

    Attributes:
      mean: [..., A] float, mu.
      log_std: [..., A] (or anything broadcastable to it) float, log sigma.
    """

    mean: jax.Array
    log_std: jax.Array

    def _check_value(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != jnp.shape(self.mean):
            raise ValueError(
                f"x must have the distribution's event shape [..., A]={jnp.shape(self.mean)} "
                f"(batch and action axes), got {x.shape}."
            )
        return x

    def log_prob(self, x: jax.Array) -> jax.Array:
        """sum_a -(x - mu)^2 / (2 sigma^2) - log sigma - log sqrt(2 pi): [...] for x [..., A]."""
        x = self._check_value(x)
        std = jnp.exp(self.log_std)
        var = std**2
        # torch computes log(scale) of scale = exp(log_std); log_std itself is
        # within 1 ulp of that and is what XLA would simplify log(exp(.)) to anyway.
        per_dim = -((x - self.mean) ** 2) / (2 * var) - self.log_std - _LOG_SQRT_2PI
        return jnp.sum(per_dim, axis=-1)

    def entropy(self) -> jax.Array:
        """sum_a 0.5 + 0.5 log(2 pi) + log sigma: [...]."""
        per_dim = _ENTROPY_CONST + jnp.broadcast_to(self.log_std, jnp.shape(self.mean))
        return jnp.sum(per_dim, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """mean + sigma * N(0, 1) of shape [..., A] (the raw sample, not clipped)."""
        shape = jnp.broadcast_shapes(jnp.shape(self.mean), jnp.shape(self.log_std))
        noise = jax.random.normal(prng.fused(key), shape, dtype=jnp.result_type(self.mean))
        # computed_once: the sample's readers (env step, log-prob, the stored
        # action) load it instead of each recomputing erf_inv's polynomial.
        return computed_once(self.mean + jnp.exp(self.log_std) * noise, self.mean)

    def mode(self) -> jax.Array:
        """The mean, [..., A]."""
        shape = jnp.broadcast_shapes(jnp.shape(self.mean), jnp.shape(self.log_std))
        return jnp.broadcast_to(self.mean, shape)


def diag_gaussian(mean: jax.Array, log_std: jax.Array) -> DiagGaussian:
    """torch `Normal(mean, exp(log_std))` over the last axis, log_std broadcast to mean.

    Args:
      mean: [..., A] floating, rank >= 1.
      log_std: floating, broadcastable to `mean`'s shape without enlarging it
        (e.g. a state-independent [A] parameter).

    Returns:
      A `DiagGaussian` whose `log_std` has the shape of `mean`.
    """
    mean = _check_events(mean, "mean")
    log_std = jnp.asarray(log_std)
    if not jnp.issubdtype(log_std.dtype, jnp.floating):
        raise ValueError(f"log_std must be a floating array, got {log_std.dtype}{log_std.shape}.")
    values = _checks.concrete(log_std)  # where concrete: torch's Normal refuses a scale of 0 or NaN
    bad = None if values is None else values[np.isnan(values) | (values == -np.inf)]
    if bad is not None and bad.size:
        raise ValueError(f"log_std must not be -inf or NaN (a scale of 0 or NaN), got {bad.ravel()[0]}.")
    try:
        shape = jnp.broadcast_shapes(mean.shape, log_std.shape)
    except ValueError:
        shape = None
    if shape != mean.shape:
        raise ValueError(
            f"log_std of shape {log_std.shape} must broadcast to mean's shape {mean.shape} "
            "([..., A]) without enlarging it."
        )
    return DiagGaussian(mean=mean, log_std=jnp.broadcast_to(log_std, mean.shape).astype(mean.dtype))
