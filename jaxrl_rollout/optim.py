"""Torch-equivalent optimizer pieces as optax transformations (docs/semantics.md §10, §11).

`torch_adam`, `torch_adamw` and `torch_rmsprop` reproduce `torch.optim.Adam`,
`AdamW` and `RMSprop` step for step; `clip_grad_norm` / `clip_grad_norm_torch`
reproduce `torch.nn.utils.clip_grad_norm_`; `linear_annealing` is CleanRL's
once-per-iteration learning-rate decay as an optax schedule. Each optimizer
returns the whole update (learning rate included), so use it on its own or
after `clip_grad_norm_torch` in an `optax.chain`, and apply it with
`optax.apply_updates`.

Where plain optax differs (docs/semantics.md §10, §11): `optax.adam` defaults to
eps = 1e-8 while every reference here passes 1e-5 (`REFERENCE_EPS`), and it
computes the bias corrections 1 - b^t in float32 (up to 2e-5 relative error
at b2 = 0.999); `optax.adamw` decays by wd * p with wd = 1e-4, torch multiplies
p by the float32 number (1 - lr * wd) with wd = 1e-2; `optax.rmsprop` defaults
to decay 0.9 and eps inside the square root; `optax.clip_by_global_norm` has no
1e-6 and leaves gradients untouched below the threshold.

State is float32. `learning_rate` may be a Python float, a traced scalar (to
vmap a sweep over it) or an optax schedule of the update count; the other
hyperparameters of the optimizers are Python floats fixed at construction.
Everything is jittable and vmappable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_rollout import _checks

__all__ = [
    "REFERENCE_EPS",
    "ClipGradNormState",
    "TorchAdamState",
    "TorchRMSpropState",
    "clip_grad_norm",
    "clip_grad_norm_torch",
    "linear_annealing",
    "torch_adam",
    "torch_adamw",
    "torch_rmsprop",
]

ScalarOrSchedule = float | jax.Array | Callable[[jax.Array], jax.Array]

# The eps that CleanRL, ARENA and SB3 pass to Adam (and SB3's A2C to RMSprop);
# torch's own default, kept by the factories below, is 1e-8.
REFERENCE_EPS = 1e-5

# torch.nn.utils.clip_grad_norm_ adds this to the norm before dividing.
_CLIP_EPS = 1e-6

_F32 = jnp.float32


class TorchAdamState(NamedTuple):
    """State of `torch_adam` and `torch_adamw` (torch's `exp_avg`, `exp_avg_sq`, `step`)."""

    count: jax.Array  # [] int32, steps taken so far (torch keeps one per parameter)
    mu: optax.Updates  # like params, float32: first moment m
    nu: optax.Updates  # like params, float32: second moment v


class TorchRMSpropState(NamedTuple):
    """State of `torch_rmsprop` (torch's `square_avg`, `step`)."""

    count: jax.Array  # [] int32, steps taken so far (indexes a learning-rate schedule)
    nu: optax.Updates  # like params, float32: running mean of g^2


class ClipGradNormState(NamedTuple):
    """State of `clip_grad_norm_torch`."""

    total_norm: jax.Array  # [] float32, pre-clip norm of the last update (0 before the first)


# --------------------------------------------------------------------------
# Argument checks. Python numbers and concrete arrays are checked at
# construction; traced values (inside jit or vmap) cannot be and pass.
# --------------------------------------------------------------------------


def _static_float(name: str, value, low: float, high: float = math.inf, high_open: bool = False) -> float:
    """A Python real in [low, high] (or [low, high)), as a float, or raise naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a Python float fixed at construction, got {value!r}.")
    value = float(value)
    in_range = low <= value and (value < high if high_open else value <= high)
    if not (math.isfinite(value) and in_range):
        interval = f"[{low}, {high})" if high_open else f"[{low}, {high}]"
        raise ValueError(f"{name} must be in {interval}, got {value!r}.")
    return value


def _check_scalar(name: str, value, positive: bool = False, inf: bool = False) -> None:
    """A finite real scalar >= 0 (> 0 when `positive`; +inf too when `inf`), unless traced; else raise naming it."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real scalar, got {value!r}.")
    if jnp.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(value)}.")
    if isinstance(value, jax.core.Tracer):
        return
    array = np.asarray(value)
    # jnp.issubdtype: NumPy's own does not count ml_dtypes' bfloat16 as floating (a bfloat16 rate was refused)
    if not (jnp.issubdtype(array.dtype, jnp.floating) or jnp.issubdtype(array.dtype, jnp.integer)):
        raise ValueError(f"{name} must be a real scalar, got {value!r}.")
    v = float(array)
    if inf and v == math.inf:
        return
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        bound = "> 0" if positive else ">= 0"
        if inf:
            raise ValueError(f"{name} must be {bound} (inf: no limit), got {v!r}.")
        raise ValueError(f"{name} must be finite and {bound}, got {v!r}.")


def _check_learning_rate(learning_rate: ScalarOrSchedule) -> None:
    if not callable(learning_rate):
        _check_scalar("learning_rate", learning_rate)


def _learning_rate_at(learning_rate: ScalarOrSchedule, count: jax.Array) -> jax.Array:
    """The rate for the update after `count` updates (optax's schedule convention)."""
    lr = learning_rate(count) if callable(learning_rate) else learning_rate
    return jnp.asarray(lr, _F32)


def _f32(x: float) -> np.float32:
    """A Python float (torch computes its scalar hyperparameters in float64) rounded once to float32."""
    return np.float32(x)


def _zeros_like(params: optax.Params) -> optax.Updates:
    return jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), _F32), params)


def _one_minus_pow(log_b: np.float32, t: jax.Array) -> jax.Array:
    """1 - b^t as -expm1(t log b), with log b computed in float64 on the host.

    torch computes 1 - b^t in float64. Doing it in float32 as 1 - b^t (as
    optax does) inherits the rounding of b itself: float32(0.999) is off by
    1.3e-8, so b2^t and then 1 - b2^t are off by up to 2e-5 relative. This
    form stays within a few float32 ulps of torch's value.
    """
    return -jnp.expm1(t * log_b)


def _add_rounded(product: jax.Array, addend: jax.Array) -> jax.Array:
    """product + addend with `product` rounded to float32 first, as torch's separate ops do.

    XLA on CPU fuses a * b + c into one FMA, skipping a rounding. Where the
    skipped roundings are correlated from step to step (AdamW's decay of a
    slowly moving parameter; v under a constant gradient) they add up:
    measured 3e-6 after 200 AdamW steps and 5e-6 after 1000 constant-gradient
    Adam steps, against 2.4e-7 and 3.6e-7 with this form. The second use of
    the product (a NaN check, which XLA cannot fold for floats) keeps LLVM
    from contracting it. The value is product + addend for every input, NaN
    and inf included.
    """
    return jnp.where(product == product, product + addend, jnp.nan)


# --------------------------------------------------------------------------
# Gradient clipping.
# --------------------------------------------------------------------------


# On an accelerator a network's update is bound by kernel launches, and one reduction per parameter tensor is one
# launch per tensor on every gradient step. There the leaves are padded with zeros to the longest one and stacked,
# so that all of their norms take one row reduction: the same per-leaf sums of squares (padding adds zeros; only
# the order of the additions inside a leaf is XLA's either way), PQN's 10 tensors in one launch instead of ten,
# which made its CartPole train 4.1% (one seed) and 2.6% (8 seeds) faster on an H100 (BENCHMARKS.md section 11,
# fifth pass; 7% and 8% with PQN's metrics summed in the scan carry as well). The stack is used while it holds at
# most `_STACK_SLACK` times the gradient's own size plus `_STACK_EXTRA` elements, so a network with one big
# tensor beside small ones (a CNN's dense layer) keeps one reduction per leaf and never pads to many copies of its
# largest tensor. On the CPU the per-leaf reductions are faster (the padding is real arithmetic there), and the
# golden tests against torch run there.
_STACK_SLACK = 4
_STACK_EXTRA = 1 << 16


def _per_leaf_norms(leaves: list[jax.Array]) -> jax.Array:
    """[n] float32: the 2-norm of each float32 leaf, one reduction per leaf."""
    return jnp.stack([jnp.sqrt(jnp.sum(jnp.square(g))) for g in leaves])


def _stacked_norms(leaves: list[jax.Array]) -> jax.Array:
    """`_per_leaf_norms` as one row reduction over the leaves flattened, zero-padded to the longest and stacked."""
    width = max(g.size for g in leaves)
    rows = jnp.stack([jnp.pad(jnp.ravel(g), (0, width - g.size)) for g in leaves])
    return jnp.sqrt(jnp.sum(jnp.square(rows), axis=1))


def _stacks(leaves: list[jax.Array]) -> bool:
    """Whether `_leaf_norms` stacks these leaves off the CPU: two or more, and the stack not much bigger than them."""
    sizes = [g.size for g in leaves]
    return len(sizes) > 1 and len(sizes) * max(sizes) <= _STACK_SLACK * sum(sizes) + _STACK_EXTRA


def _leaf_norms(leaves: list[jax.Array]) -> jax.Array:
    """[n] float32: the 2-norm of each float32 leaf (one stacked reduction off the CPU where `_stacks`)."""
    if not _stacks(leaves):
        return _per_leaf_norms(leaves)
    return jax.lax.platform_dependent(cpu=lambda: _per_leaf_norms(leaves), default=lambda: _stacked_norms(leaves))


def clip_grad_norm(
    grads: optax.Updates, max_norm: float | jax.Array
) -> tuple[optax.Updates, jax.Array]:
    """`torch.nn.utils.clip_grad_norm_` (norm_type 2) as a pure function.

        total = || (||g_1||_2, ..., ||g_n||_2) ||_2
        coef  = min(1, max_norm / (total + 1e-6))
        g_i  <- coef * g_i                     (always, even when coef == 1)

    Unlike `optax.clip_by_global_norm`, the 1e-6 makes coef < 1 slightly
    below the threshold (max_norm - 1e-6 < total < max_norm), and at and just
    above it the coefficient differs by about 1e-6 / max_norm. As in torch,
    max_norm / (total + 1e-6) is computed as (1 / (total + 1e-6)) * max_norm
    (`Tensor.__rtruediv__`). Non-finite gradients propagate as torch's do: a
    NaN gradient gives a NaN coefficient, an inf one a coefficient of 0 (and
    that leaf NaN, inf * 0).
    Off the CPU the per-leaf norms of a small network are taken in one
    stacked reduction (the same sums; one kernel instead of one per leaf).

    Args:
      grads: pytree of gradients (any float dtype; the norm is computed in
        float32 and each leaf keeps its dtype).
      max_norm: clipping threshold, > 0 (inf: no clipping, as torch's); a Python float or a
        traced scalar.

    Returns:
      (clipped_grads, total_norm): the scaled pytree and the [] float32 norm
      before clipping, which `clip_grad_norm_` returns.
    """
    _check_scalar("max_norm", max_norm, positive=True, inf=True)
    leaves = jax.tree.leaves(grads)
    if not leaves:
        return grads, jnp.zeros([], _F32)
    leaf_norms = _leaf_norms([jnp.asarray(g, _F32) for g in leaves])
    total_norm = jnp.sqrt(jnp.sum(jnp.square(leaf_norms)))
    coef = jnp.minimum(jnp.reciprocal(total_norm + _CLIP_EPS) * jnp.asarray(max_norm, _F32), 1.0)
    clipped = jax.tree.map(lambda g: (jnp.asarray(g, _F32) * coef).astype(jnp.result_type(g)), grads)
    return clipped, total_norm


def clip_grad_norm_torch(max_norm: float | jax.Array) -> optax.GradientTransformation:
    """`clip_grad_norm` as an optax transformation, for `optax.chain(clip_grad_norm_torch(0.5), ...)`.

    The state keeps the pre-clip norm of the last update for logging.

    Args:
      max_norm: clipping threshold, > 0 (inf: no clipping, as torch's); a Python float or a
        traced scalar.
    """
    _check_scalar("max_norm", max_norm, positive=True, inf=True)

    def init_fn(params):
        del params
        return ClipGradNormState(total_norm=jnp.zeros([], _F32))

    def update_fn(updates, state, params=None):
        del state, params
        clipped, total_norm = clip_grad_norm(updates, max_norm)
        return clipped, ClipGradNormState(total_norm=total_norm)

    return optax.GradientTransformation(init_fn, update_fn)


# --------------------------------------------------------------------------
# Adam, AdamW.
# --------------------------------------------------------------------------


def _lerp(start: jax.Array, end: jax.Array, weight: np.float32) -> jax.Array:
    """torch.lerp as its kernel evaluates it, whose two branches round differently.

        start + w (end - start)          if |w| < 0.5
        end - (end - start) (1 - w)      otherwise
    """
    if abs(weight) < 0.5:
        return _add_rounded(weight * (end - start), start)
    return _add_rounded(-((end - start) * (np.float32(1.0) - weight)), end)


def _check_state_shapes(name: str, updates, moments) -> None:
    """Each gradient leaf has its moment's shape (checked at trace time): a [3, 2] gradient against a [2]
    state broadcast silently, and the moments grew with it."""
    for (path, g), m in zip(jax.tree_util.tree_leaves_with_path(updates), jax.tree.leaves(moments)):
        if jnp.shape(g) != jnp.shape(m):
            raise ValueError(f"{name}: the gradient{jax.tree_util.keystr(path)} has shape {jnp.shape(g)}, but the "
                             f"optimiser state was made for {jnp.shape(m)}: init the optimiser with params of "
                             "the gradients' shapes.")


def _adam(
    learning_rate: ScalarOrSchedule,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float | jax.Array,
    decoupled: bool,
) -> optax.GradientTransformation:
    """Shared body of `torch_adam` (decoupled=False) and `torch_adamw` (decoupled=True)."""
    _check_learning_rate(learning_rate)
    b1 = _static_float("b1", b1, 0.0, 1.0, high_open=True)
    b2 = _static_float("b2", b2, 0.0, 1.0, high_open=True)
    eps = _static_float("eps", eps, 0.0)
    _check_scalar("weight_decay", weight_decay)
    # Constant zero decay needs no params; a traced one always goes through the formula.
    has_decay = isinstance(weight_decay, jax.core.Tracer) or float(np.asarray(weight_decay)) != 0.0
    log_b1 = _f32(math.log(b1)) if b1 > 0 else np.float32(-np.inf)
    log_b2 = _f32(math.log(b2)) if b2 > 0 else np.float32(-np.inf)
    lerp_weight, beta2, one_minus_b2, eps32 = _f32(1.0 - b1), _f32(b2), _f32(1.0 - b2), _f32(eps)
    name = "torch_adamw" if decoupled else "torch_adam"

    def init_fn(params):
        return TorchAdamState(count=jnp.zeros([], jnp.int32), mu=_zeros_like(params), nu=_zeros_like(params))

    def update_fn(updates, state, params=None):
        if has_decay and params is None:
            raise ValueError(
                f"{name} with weight_decay != 0 needs params: call update(grads, state, params)."
            )
        _check_state_shapes(name, updates, state.mu)
        count = optax.safe_int32_increment(state.count)
        t = count.astype(_F32)
        lr = _learning_rate_at(learning_rate, state.count)
        wd = jnp.asarray(weight_decay, _F32)
        grads = jax.tree.map(lambda g: jnp.asarray(g, _F32), updates)
        if has_decay and not decoupled:
            grads = jax.tree.map(lambda g, p: g + wd * jnp.asarray(p, _F32), grads, params)
        mu = jax.tree.map(lambda m, g: _lerp(m, g, lerp_weight), state.mu, grads)
        nu = jax.tree.map(lambda v, g: _add_rounded(v * beta2, (one_minus_b2 * g) * g), state.nu, grads)
        neg_step_size = -(lr / _one_minus_pow(log_b1, t))
        bc2_sqrt = jnp.sqrt(_one_minus_pow(log_b2, t))
        steps = jax.tree.map(lambda m, v: (neg_step_size * m) / (jnp.sqrt(v) / bc2_sqrt + eps32), mu, nu)
        if has_decay and decoupled:
            if isinstance(learning_rate, (int, float)) and isinstance(weight_decay, (int, float)):
                decay = _f32(1.0 - learning_rate * weight_decay)  # float64 then float32, as torch
            else:
                decay = 1.0 - lr * wd
            # p_t = p * decay + step rounded as torch's mul_ then addcdiv_; the update
            # p_t - p_{t-1} is exact (Sterbenz), so optax.apply_updates gives p_t back.
            def decayed_step(s, p):
                p = jnp.asarray(p, _F32)
                return _add_rounded(p * decay, s) - p

            steps = jax.tree.map(decayed_step, steps, params)
        new_updates = jax.tree.map(lambda s, g: s.astype(jnp.result_type(g)), steps, updates)
        return new_updates, TorchAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def torch_adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float | jax.Array = 0.0,
) -> optax.GradientTransformation:
    """`torch.optim.Adam` (amsgrad=False, maximize=False) as one optax transformation.

        g_t <- g_t + wd * p_{t-1}                       (L2, only when wd != 0)
        m_t  = m_{t-1} + (1 - b1) (g_t - m_{t-1})       (torch.lerp)
        v_t  = b2 v_{t-1} + (1 - b2) g_t^2,             m_0 = v_0 = 0
        p_t  = p_{t-1} - lr / (1 - b1^t) * m_t / (sqrt(v_t) / sqrt(1 - b2^t) + eps)

    eps is outside the square root and after the bias correction, as in
    torch. The references (CleanRL, ARENA, SB3) pass eps=1e-5
    (`REFERENCE_EPS`); the default stays torch's 1e-8. With g ~ 1e-6 the step
    is ~0.09 lr at eps=1e-5 and ~0.99 lr at 1e-8. Torch computes the bias
    corrections in float64; here they are float32 within a few ulps of it.
    One global step count replaces torch's per-parameter counts (the same
    unless some parameters get no gradient at some steps).

    Args:
      learning_rate: lr >= 0; a Python float, a traced scalar, or a schedule
        of the update count (0 for the first update).
      b1: first-moment decay in [0, 1), torch's betas[0].
      b2: second-moment decay in [0, 1), torch's betas[1].
      eps: >= 0, added to sqrt(v_t) / sqrt(1 - b2^t).
      weight_decay: L2 coefficient >= 0 (added to the gradient); a Python float
        or a traced scalar. When it is not a constant 0, `update` needs params.

    Returns:
      An `optax.GradientTransformation` whose updates are p_t - p_{t-1}.
    """
    return _adam(learning_rate, b1, b2, eps, weight_decay, decoupled=False)


def torch_adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float | jax.Array = 0.01,
) -> optax.GradientTransformation:
    """`torch.optim.AdamW` (amsgrad=False, maximize=False) as one optax transformation.

        p'  = p_{t-1} * float32(1 - lr * wd)            (decoupled, multiplicative)
        p_t = p' - lr / (1 - b1^t) * m_t / (sqrt(v_t) / sqrt(1 - b2^t) + eps)

    with m_t, v_t as in `torch_adam` on the raw gradient. The factor
    1 - lr * wd is rounded to float32 before multiplying, as torch does: with
    lr * wd = 1e-5 that rounding alone changes the decay by 0.1%, which is why
    `optax.adamw`'s exact additive lr * wd * p drifts from torch. The default
    wd is torch's 1e-2 (optax's is 1e-4).

    Args:
      learning_rate: lr >= 0; a Python float, a traced scalar, or a schedule
        of the update count.
      b1: first-moment decay in [0, 1).
      b2: second-moment decay in [0, 1).
      eps: >= 0, added to sqrt(v_t) / sqrt(1 - b2^t).
      weight_decay: decoupled decay >= 0; a Python float or a traced scalar.
        When it is not a constant 0, `update` needs params.

    Returns:
      An `optax.GradientTransformation` whose updates are p_t - p_{t-1}.
    """
    return _adam(learning_rate, b1, b2, eps, weight_decay, decoupled=True)


# --------------------------------------------------------------------------
# RMSprop.
# --------------------------------------------------------------------------


def torch_rmsprop(
    learning_rate: ScalarOrSchedule,
    alpha: float = 0.99,
    eps: float = 1e-8,
) -> optax.GradientTransformation:
    """`torch.optim.RMSprop` (centered=False, momentum=0, weight_decay=0) as an optax transformation.

        v_t = alpha v_{t-1} + (1 - alpha) g_t^2,   v_0 = 0
        p_t = p_{t-1} - lr g_t / (sqrt(v_t) + eps)

    eps is outside the square root and there is no bias correction. This is
    `optax.rmsprop(lr, decay=alpha, eps=eps, initial_scale=0, eps_in_sqrt=False)`
    up to float32 rounding; optax's defaults (decay 0.9, eps inside the
    square root) differ. SB3's A2C passes alpha=0.99, eps=1e-5.

    Args:
      learning_rate: lr >= 0; a Python float, a traced scalar, or a schedule
        of the update count.
      alpha: smoothing constant in [0, 1].
      eps: >= 0, added to sqrt(v_t).

    Returns:
      An `optax.GradientTransformation` whose updates are p_t - p_{t-1}.
    """
    _check_learning_rate(learning_rate)
    alpha = _static_float("alpha", alpha, 0.0, 1.0)
    eps = _static_float("eps", eps, 0.0)
    alpha32, one_minus_alpha, eps32 = _f32(alpha), _f32(1.0 - alpha), _f32(eps)

    def init_fn(params):
        return TorchRMSpropState(count=jnp.zeros([], jnp.int32), nu=_zeros_like(params))

    def update_fn(updates, state, params=None):
        del params
        _check_state_shapes("torch_rmsprop", updates, state.nu)
        neg_lr = -_learning_rate_at(learning_rate, state.count)
        grads = jax.tree.map(lambda g: jnp.asarray(g, _F32), updates)
        nu = jax.tree.map(lambda v, g: _add_rounded(v * alpha32, (one_minus_alpha * g) * g), state.nu, grads)
        steps = jax.tree.map(lambda g, v: (neg_lr * g) / (jnp.sqrt(v) + eps32), grads, nu)
        new_updates = jax.tree.map(lambda s, g: s.astype(jnp.result_type(g)), steps, updates)
        return new_updates, TorchRMSpropState(count=optax.safe_int32_increment(state.count), nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


# --------------------------------------------------------------------------
# Schedules.
# --------------------------------------------------------------------------


def linear_annealing(
    learning_rate: float | jax.Array, num_iterations: int, updates_per_iteration: int
) -> optax.Schedule:
    """CleanRL's learning-rate annealing, held constant within each iteration.

        iteration(c) = min(c // updates_per_iteration, num_iterations)
        lr(c)        = learning_rate * (1 - iteration(c) / num_iterations)

    c is optax's update count (0 for the first update), so iteration is
    0-based: CleanRL sets `lr = (1 - (iteration - 1) / num_iterations) * lr0`
    at the start of its 1-based iteration. Past the last iteration the rate
    stays 0 instead of turning negative.

    Args:
      learning_rate: initial rate >= 0; a Python float or a traced scalar.
      num_iterations: positive Python int, CleanRL's `num_iterations`.
      updates_per_iteration: positive Python int, optimizer updates per
        iteration (CleanRL: update_epochs * num_minibatches).

    Returns:
      An `optax.Schedule`: update count -> [] float32 learning rate.
    """
    for name, value in (("num_iterations", num_iterations), ("updates_per_iteration", updates_per_iteration)):
        if not _checks.is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive Python int, got {value!r}.")
    _check_scalar("learning_rate", learning_rate)
    num_iterations, updates_per_iteration = int(num_iterations), int(updates_per_iteration)
    if num_iterations * updates_per_iteration > np.iinfo(np.int32).max:  # the optimiser's count is int32
        raise ValueError(f"num_iterations * updates_per_iteration = {num_iterations * updates_per_iteration:,} is more "
                         f"than the int32 update count holds (2**31 - 1).")

    def schedule(count: chex.Numeric) -> jax.Array:
        iteration = jnp.minimum(jnp.asarray(count) // updates_per_iteration, num_iterations)
        # (N - i) / N rather than 1 - i / N: XLA turns the division into a multiplication
        # by float32(1 / N), and 1 - N * float32(1 / N) is -1.5e-8 at N = 10, not 0.
        frac = (num_iterations - iteration).astype(_F32) / num_iterations
        return frac * jnp.asarray(learning_rate, _F32)

    return schedule
