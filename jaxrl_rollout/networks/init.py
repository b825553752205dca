"""Initialisation with PyTorch's numbers: the orthogonal initializer, the Dense layer that uses it, `batched_init`.

- `orthogonal(gain)`: torch's `orthogonal_(W, gain)` on the (out, in) weight,
  mirrored on a flax (in, out) kernel, built on `householder_q`, a
  Householder QR in plain jnp ops (no LAPACK call, see its docstring).
- `OrthogonalDense` / `orthogonal_dense`: `nn.Dense` with an `orthogonal(gain)` kernel and zero
  bias (CleanRL's `layer_init(nn.Linear(...), std=gain)`), which does not
  re-run its initializer on every `apply`. On jax >= 0.11 its narrow layers
  (at most `NARROW_FEATURES` outputs: the heads) multiply with
  `narrow_product`, the same dot with derivatives in the forms a CPU runs
  fast there.
- `batched_init(module, key, obs)`: an `ActorCriticMLP`'s parameters with
  the same recipe as `module.init` (orthogonal kernels with each layer's
  gain, zero biases and `log_std`), drawn in one batch: one normal draw and
  one Householder loop over all kernels, padded to a common square.
- `fused_init(module, key, *args)`: `module.init(key, *args)`, the same
  values, with each of its key derivations and draws hashed in one fused
  kernel (`prng.fused`).
- `_SHAPES_ONLY`: set while `batched_init` asks flax for parameter shapes;
  `orthogonal` then returns zeros instead of tracing a draw, and each
  `OrthogonalDense` records its gain there for `batched_init`.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, prng
from jaxrl_rollout.types import PyTree

__all__ = ["THIN_Q_ROWS", "OrthogonalDense", "batched_init", "fused_init", "householder_q", "orthogonal", "orthogonal_dense"]


THIN_Q_ROWS = 2048
"""Above this many rows `householder_q` accumulates the thin Q [m, n] (the reflections applied to the first n
columns of the identity, last to first) instead of the whole [m, m] one: a conv torso flattened into a Dense
layer makes a tall kernel (an 84 x 84 Atari frame: 107,584 inputs, whose [m, m] Q is 46 GB)."""


@jax.jit
def householder_q(a: jax.Array) -> jax.Array:
    """Q [..., m, n] of the QR decompositions of a [..., m, n] (m >= n) whose R has a non-negative diagonal.

    Householder reflections in plain jnp ops (a `fori_loop` over columns), so
    no LAPACK custom call is emitted. jaxlib's CPU `geqrf` kernel splits a
    batched QR (what `vmap` over seeds makes of an init) into tasks on XLA's
    intra-op thread pool and blocks a pool thread until they finish; with two
    such kernels running at once on a 2-thread pool the process deadlocks
    (seen on this project's 2-core CI machine). The Q of a full-rank matrix
    with R's diagonal made non-negative is unique, so this equals
    `jnp.linalg.qr` followed by the sign fix up to float rounding.

    Up to `THIN_Q_ROWS` rows Q is accumulated whole ([m, m], then its first n
    columns); past it only its n columns are (memory m x n rather than m x m;
    the same Q up to float rounding).

    Leading axes are a batch, handled by the ops themselves: the operations
    `vmap` would produce, without `vmap` batching the loop body again at each
    trace (py-spy put `batched_init`'s vmapped QR at 12% of the trace and
    lowering samples of a PPO train over 8 vmapped seeds). Jitted so that it
    is traced once per shape.
    """
    *batch, m, n = a.shape
    if m < n:  # silently gave [..., m, m]
        raise ValueError(f"householder_q needs a tall or square matrix [..., m, n] with m >= n, got {a.shape}.")
    rows = jnp.arange(m)
    hi = jax.lax.Precision.HIGHEST
    nb = len(batch)
    batch_dims = tuple(range(nb))
    # v [..., m] . r [..., m, n] -> [..., n], and q [..., m, m] . v [..., m] -> [..., m]
    vr_dims = (((nb,), (nb,)), (batch_dims, batch_dims))
    qv_dims = (((nb + 1,), (nb,)), (batch_dims, batch_dims))

    def vector(k, r):
        """The unit Householder vector [..., m] that zeroes column k of r below its diagonal."""
        x = jnp.where(rows >= k, jax.lax.dynamic_index_in_dim(r, k, axis=nb + 1, keepdims=False), 0.0)
        norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
        x_k = jax.lax.dynamic_index_in_dim(x, k, axis=nb, keepdims=True)
        alpha = jnp.where(x_k >= 0, -norm, norm)  # the sign that avoids cancellation
        v = x - alpha * (rows == k)
        v_norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
        return jnp.where(v_norm > 0, v / jnp.where(v_norm > 0, v_norm, 1.0), 0.0)

    def reflected(v, x):
        """(I - 2 v v^T) x for x [..., m, c]."""
        vx = jax.lax.dot_general(v, x, vr_dims, precision=hi)
        return x - 2.0 * (v[..., :, None] * vx[..., None, :])

    if m <= THIN_Q_ROWS:
        def reflect(k, carry):
            r, q = carry
            v = vector(k, r)
            r = reflected(v, r)
            qv = jax.lax.dot_general(q, v, qv_dims, precision=hi)
            q = q - 2.0 * (qv[..., :, None] * v[..., None, :])
            return r, q

        eye = jnp.broadcast_to(jnp.eye(m, dtype=a.dtype), (*batch, m, m))
        r, q = jax.lax.fori_loop(0, n, reflect, (a, eye))
        q = q[..., :, :n]
    else:
        def reflect_and_keep(k, carry):
            r, vs = carry
            v = vector(k, r)
            return reflected(v, r), jax.lax.dynamic_update_index_in_dim(vs, v, k, axis=nb)

        r, vs = jax.lax.fori_loop(0, n, reflect_and_keep, (a, jnp.zeros((*batch, n, m), a.dtype)))
        # Q E = H_0 (H_1 (... (H_{n-1} E))): E, the identity's first n columns
        eye = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), (*batch, m, n))
        q = jax.lax.fori_loop(0, n, lambda i, q: reflected(
            jax.lax.dynamic_index_in_dim(vs, n - 1 - i, axis=nb, keepdims=False), q), eye)
    diag = jnp.diagonal(r, axis1=-2, axis2=-1)[..., :n]
    return q * jnp.where(diag < 0, -1.0, 1.0).astype(a.dtype)[..., None, :]


# Set only while `batched_init` asks flax for the parameter shapes (under `eval_shape`), to a
# dict in which each `OrthogonalDense` records its kernel's gain by module path; None otherwise. While
# it is set `orthogonal` returns zeros: the draws would be traced for nothing there.
_SHAPES_ONLY: contextvars.ContextVar[dict[tuple[str, ...], float] | None] = contextvars.ContextVar(
    "jaxrl_rollout_shapes_only", default=None
)


def orthogonal(scale: float = 1.0, column_axis: int = -1) -> Callable:
    """Orthogonal kernel initializer (torch's `orthogonal_`), with no LAPACK call.

    The same construction as `jax.nn.initializers.orthogonal`: a standard
    normal matrix shaped (rows, cols), transposed when wide, its QR's Q with
    sign(diag R) applied, transposed back and scaled. Only the QR differs
    (`householder_q`), which keeps vmapped inits off the CPU LAPACK kernel.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) or not math.isfinite(
            scale):  # NaN gave all-NaN kernels; a string failed inside float()
        raise ValueError(f"orthogonal's scale (a layer's gain) must be a finite number, got {scale!r}.")
    scale, column_axis = float(scale), int(column_axis)

    def init(key, shape, dtype=jnp.float32):
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs a kernel of rank >= 2, got shape {tuple(shape)}.")
        if any(int(d) <= 0 for d in shape):  # a ZeroDivisionError or a slice TypeError from the draw
            raise ValueError(f"orthogonal init needs a kernel of positive sizes, got shape {tuple(shape)} (a layer "
                             "of 0 features, or an input of size 0).")
        if _SHAPES_ONLY.get() is not None:
            return jnp.zeros(shape, dtype)
        return _orthogonal_draw(key, tuple(int(d) for d in shape), jnp.dtype(dtype), scale, column_axis)

    return init


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _orthogonal_draw(key, shape, dtype, scale, column_axis):
    """`orthogonal(scale, column_axis)(key, shape, dtype)`.

    Jitted, so it is traced once per shape: flax's own layers (the conv of
    `ActorCriticCNN`, the GRU cell's recurrent kernel) evaluate their
    initializer again on every `apply` to check the stored parameter's shape.
    """
    cols = shape[column_axis]
    rows = math.prod(shape) // cols
    wide = rows < cols
    a = jax.random.normal(key, (cols, rows) if wide else (rows, cols), jnp.float32)
    q = householder_q(a)
    if wide:
        q = q.T
    other = tuple(d for i, d in enumerate(shape) if i != column_axis % len(shape))
    q = jnp.moveaxis(q.reshape(other + (cols,)), -1, column_axis)
    return (scale * q).astype(dtype)


class OrthogonalDense(nn.Module):
    """`nn.Dense(features)` with an `orthogonal(gain)` kernel and zero bias, the same parameters and numbers.

    The one difference is in `apply`: flax's `Module.param` evaluates the
    initializer again on every call to check the stored parameter's shape,
    which for an orthogonal kernel means tracing a normal draw and a QR loop
    per layer per `apply` (py-spy: a fifth of the trace and lowering samples
    of a one-seed PPO train). Here a stored parameter's shape is checked
    directly, and the initializer runs only when the parameter is created.
    While `batched_init` computes the shapes, the layer records its gain
    there (`_SHAPES_ONLY`).
    """

    features: int
    gain: float

    def __post_init__(self) -> None:
        if not _checks.is_int(self.features) or self.features <= 0:
            raise ValueError(f"features must be a positive int, got {self.features!r}.")
        super().__post_init__()

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel = self._param("kernel", orthogonal(self.gain), (jnp.shape(inputs)[-1], self.features))
        bias = self._param("bias", nn.initializers.zeros, (self.features,))
        gains = _SHAPES_ONLY.get()
        if gains is not None:
            gains[tuple(self.path)] = float(self.gain)  # for `batched_init`, as `orthogonal` takes it
        dtype = jnp.result_type(inputs, kernel, bias)
        inputs, kernel, bias = (jnp.asarray(x, dtype) for x in (inputs, kernel, bias))
        y = narrow_product(inputs, kernel) if self.features <= NARROW_FEATURES else _product(inputs, kernel)
        return y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))

    def _param(self, name: str, init: Callable, shape: tuple[int, ...]) -> jax.Array:
        if self.has_variable("params", name):
            value = self.get_variable("params", name)
            if tuple(jnp.shape(value)) != shape:
                raise ValueError(
                    f"parameter {'/'.join(self.path)}/{name} has shape {tuple(jnp.shape(value))}, "
                    f"but this layer needs {shape} (input features {shape[0]}, features {self.features}); "
                    "were the params initialised for another observation shape or module config?"
                )
            return value
        return self.param(name, init, shape, jnp.float32)


# Layers with at most this many output features (the actor and critic heads) use `narrow_product`, on
# jax >= 0.11 only: there its CPU forms made PPO's 8-seed train 5% faster (0.814 against 0.858 of the time
# before them, with the critic after the scan in both), while on jax 0.10.2, whose CPU backend runs the
# reduce over the batch far slower, the same forms made it 1.22x slower (BENCHMARKS.md section 9).
NARROW_FEATURES = 4 if jax.__version_info__ >= (0, 11) else 0


def _product(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., K] @ w [K, N]."""
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


@jax.custom_jvp
def narrow_product(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., K] @ w [K, N] for a small N, with derivatives that transpose to a CPU's fast forms.

    The product itself is the usual dot. On the CPU its derivatives are
    written so that reverse mode gets, for w's gradient, a broadcast product
    reduced over the batch (sum_b x[b, :, None] * g[b, None, :]) instead of
    a dot contracting the batch into a [K, N] result, and for x's gradient a
    sum of N scaled columns (sum_j g[..., j, None] * w[:, j]) instead of a
    dot with contraction N. XLA's CPU dots run such narrow shapes far below
    their speed on square ones: in PPO's gradient step (a 64 x 2 actor head,
    8 seeds vmapped, 128-row minibatches, 2 cores) the head's two dots took
    62 and 51 us of a 1,119 us step; these forms fuse into one reduce and one
    elementwise kernel. They are the same sums in another order, so the
    gradients agree with the dot's to float32 rounding. Other platforms
    (`lax.platform_dependent`'s default) keep the dots: only the CPU was
    measured. `OrthogonalDense` uses it on jax >= 0.11 only
    (`NARROW_FEATURES`).
    """
    return _product(x, w)


def _narrow_tangent(x, w, dx, dw, narrow: bool) -> jax.Array:
    """The product's tangent, dx @ w + x @ dw, skipping symbolic zeros; `narrow`: in the CPU's forms."""
    terms = []
    if type(dx) is not jax.custom_derivatives.SymbolicZero:
        if narrow:  # transposes to sum_j g[..., j, None] * w[:, j]
            terms.append(jnp.stack([jnp.sum(dx * w[:, j], -1) for j in range(w.shape[1])], -1))
        else:
            terms.append(_product(dx, w))
    if type(dw) is not jax.custom_derivatives.SymbolicZero:
        # transposes to a reduce over the batch of x[..., :, None] * g[..., None, :]
        terms.append(jnp.sum(x[..., :, None] * dw, -2) if narrow else _product(x, dw))
    return functools.reduce(jnp.add, terms)


def _narrow_product_jvp(primals, tangents):
    x, w = primals
    dx, dw = tangents
    out = _product(x, w)
    if all(type(t) is jax.custom_derivatives.SymbolicZero for t in tangents):
        return out, jnp.zeros_like(out)
    return out, jax.lax.platform_dependent(
        cpu=lambda: _narrow_tangent(x, w, dx, dw, True), default=lambda: _narrow_tangent(x, w, dx, dw, False)
    )


narrow_product.defjvp(_narrow_product_jvp, symbolic_zeros=True)


def torch_kernel_init() -> Callable:
    """torch's default kernel distribution for `nn.Linear` and `nn.Conv2d` (kaiming_uniform with a = sqrt(5)):
    uniform in +-1/sqrt(fan_in), fan_in the inputs of one output (a convolution's kh * kw * in channels, as flax
    counts them too). The off-policy learners' layers draw their kernels so."""
    return nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def orthogonal_dense(features: int, gain: float, name: str) -> nn.Module:
    """torch `layer_init(nn.Linear(in, features), std=gain)`: orthogonal kernel, zero bias."""
    return OrthogonalDense(features, gain, name=name)


# The largest padded kernel `batched_init` handles; larger MLPs use module.init (the
# batched QR costs P^3 per kernel).
_BATCHED_INIT_MAX_SIZE = 256


def fused_init(module: nn.Module, key: jax.Array, *args) -> PyTree:
    """`module.init(key, *args)`, the same variables, with every threefry hash fused (`prng.fused`).

    flax derives a key per parameter (`fold_in`) and each initializer draws
    from it: two threefry hashes per parameter, each of which JAX lowers on
    CPU as a loop that XLA compiles into its own kernels. Initialised with
    `prng.fused(key)` (the same bits), each hash is one elementwise kernel:
    with the learners' other draws fused too, SAC's compiled train program
    went from 350 to 261 kernels and its LLVM code from 4.9 to 2.7 MB
    (BENCHMARKS.md section 11). A module that cannot take such a key (one
    that needs a raw uint32 key) is initialised with `key` as given, and so
    is a dict of keys per RNG stream (`{"params": key, "dropout": key2}`).
    """
    if isinstance(key, Mapping):
        return module.init(key, *args)
    _checks.check_function_key(key, "fused_init", "initialisations")
    if prng.can_fuse(key):
        try:
            return module.init(prng.fused(key), *args)
        except Exception:  # noqa: BLE001 -- initialised below with the key as given; its errors surface there
            pass
    return module.init(key, *args)


def batched_init(module: nn.Module, key: jax.Array, obs: jax.Array) -> PyTree:
    """Initial parameters of `module`, drawn in one batch for an `ActorCriticMLP`.

    `module.init(key, obs)` draws and orthogonalises each kernel on its own:
    a key derivation, a normal draw and a QR loop per layer, which XLA
    compiles separately (about 200 kernels for the 64x64 actor-critic, over
    a second of a PPO train's compile time on 2 CPU cores). For an
    `ActorCriticMLP` this function gives the same initialisation (orthogonal
    kernels with the layer's gain, zero biases and `log_std`) from one normal
    draw and one batched Householder loop over all kernels, each zero-padded
    to a common square size. The padding changes only rounding: no reflection
    touches a zero row and a zero column reflects nothing, so the top-left
    block of each padded Q is the Q of the kernel's own normal matrix.

    Each kernel's gain is the one its `OrthogonalDense` layer was built with, which the
    layer records in `_SHAPES_ONLY` while flax computes the shapes (so no gain
    is inferred from a layer's name). A kernel that no `OrthogonalDense` made, or any
    parameter other than a kernel, a `bias` or a `log_std`, sends the module
    to `module.init`.

    The distribution is module.init's, the values are not: the key is used
    differently. Any other module, or an MLP wider than 256 units, gets
    `module.init(key, obs)`.

    Args:
      module: a flax module.
      key: one PRNG key (a dict of keys per RNG stream goes to `module.init` as it is).
      obs: a sample observation batch, as for `module.init`.

    Returns:
      The variables dict `module.init` would return.
    """
    # Imported here, not at the top: modules.py imports this file.
    from jaxrl_rollout.networks.modules import ActorCriticMLP

    if isinstance(key, Mapping):  # keys per RNG stream: module.init's own business
        return module.init(key, obs)
    _checks.check_function_key(key, "batched_init", "initialisations")
    if not isinstance(module, ActorCriticMLP):
        return fused_init(module, key, obs)
    gains: dict[tuple[str, ...], float] = {}
    token = _SHAPES_ONLY.set(gains)
    try:
        shapes = jax.eval_shape(module.init, key, obs)
    finally:
        _SHAPES_ONLY.reset(token)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    kernels = []  # (leaf index, tall shape (m, n), wide, gain)
    for i, (path, leaf) in enumerate(leaves):
        names = [getattr(entry, "key", None) for entry in path]
        if names[-1] == "kernel" and len(names) == 3:
            gain = gains.get(tuple(names[1:-1]))  # None: not a `OrthogonalDense` kernel
            if gain is None or len(leaf.shape) != 2:
                return fused_init(module, key, obs)
            rows, cols = leaf.shape
            kernels.append((i, (max(rows, cols), min(rows, cols)), rows < cols, gain))
        elif names[-1] not in ("bias", "log_std"):
            return fused_init(module, key, obs)
    size = 1 << max(max(m for _, (m, _), _, _ in kernels) - 1, 1).bit_length()
    if size > _BATCHED_INIT_MAX_SIZE:
        return fused_init(module, key, obs)
    mask = np.zeros((len(kernels), size, size), np.float32)
    for j, (_, (m, n), _, _) in enumerate(kernels):
        mask[j, :m, :n] = 1.0
    # One 1-D draw: rank-1 random draws compile faster on CPU than rank-3 ones.
    normal = jax.random.normal(prng.fused(key), (mask.size,), jnp.float32).reshape(mask.shape) * mask
    q = householder_q(normal)
    values = [jnp.zeros(leaf.shape, leaf.dtype) for _, leaf in leaves]
    for j, (i, (m, n), wide, gain) in enumerate(kernels):
        kernel = q[j, :m, :n]
        values[i] = (gain * (kernel.T if wide else kernel)).astype(leaves[i][1].dtype)
    return jax.tree_util.tree_unflatten(treedef, values)
