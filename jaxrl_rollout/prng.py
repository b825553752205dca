"""Threefry keys that hash in one fused kernel on CPU, bit-identical to JAX's.

On CPU, JAX lowers each threefry2x32 hash (every `split`, `fold_in` and draw
of a threefry key) as a rolled five-iteration loop: after XLA's loop
unrolling about 25 small kernels and copies per hash, each launched
separately. In a small-batch rollout step, where a handful of hashes sit next
to a few tiny matmuls, those launches are a large share of the step.

`FUSED_THREEFRY` is a PRNG implementation (`jax.extend.random`) that computes
the same Threefry-2x32 hash (20 rounds, key schedule every 4 rounds) as plain
`jax.numpy` arithmetic, which XLA fuses into one elementwise kernel. It uses
the counters of JAX's partitionable threefry mode (the default since jax 0.5),
so every `jax.random` function gives the same bits, keys and samples for a key
viewed with `fused(key)` as for the key itself (tested in tests/test_prng.py).

    fast = prng.fused(key)                     # same key, fused hashing
    a = jax.random.categorical(fast, logits)   # == jax.random.categorical(key, logits)
    k1, k2 = prng.split(key)                   # == jax.random.split(key), same key type

`fused` leaves a key unchanged (so nothing changes) when it is not a threefry
key, when `jax_threefry_partitionable` is off (the legacy counters differ), or
when the default backend is not CPU (GPU lowers threefry to one kernel already).

`FUSED_THREEFRY` is built from JAX internals (`jax.extend.random`, a primitive
with its own lowering and batching rule). If this JAX lacks one of them,
importing the module does not fail: `FUSED_THREEFRY` is None, `fused` leaves
every key unchanged, so JAX's own threefry hashes it (the same bits), and one
`FusionUnavailableWarning` names what is missing.
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout._fusion import computed_once

__all__ = ["FUSED_THREEFRY", "FusionUnavailableWarning", "can_fuse", "fused", "is_key", "like", "split"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)  # Threefry's key-schedule constant


def _rotate_left(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _hash_rounds(k1, k2, x1, x2, add, xor, rotate_left, constant):
    """Threefry-2x32's 20 rounds, written once for both the jnp and the StableHLO forms."""
    ks = (k1, k2, xor(xor(k1, k2), constant(_PARITY)))
    x1 = add(x1, ks[0])
    x2 = add(x2, ks[1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = add(x1, x2)
            x2 = xor(rotate_left(x2, r), x1)
        x1 = add(x1, ks[(i + 1) % 3])
        x2 = add(add(x2, ks[(i + 2) % 3]), constant(np.uint32(i + 1)))
    return x1, x2


def _hash_jnp(k1, k2, x1, x2):
    """The hash in `jax.numpy` ops: the primitive's eager implementation."""
    return _hash_rounds(k1, k2, x1, x2, jnp.add, jnp.bitwise_xor, _rotate_left, np.uint32)


# The JAX internals that FUSED_THREEFRY is built from, as (module, attribute).
# They are not JAX's stable API. If this JAX lacks any of them, FUSED_THREEFRY
# is None, `fused`, `split` and `like` leave keys as they are (JAX's own
# threefry: the same bits, hashed as JAX lowers it), and one warning at import
# names what is missing. Nothing is checked per call.
_INTERNALS = (
    ("jax.extend.core", "Primitive"),
    ("jax.extend.mlir.dialects.stablehlo", "add"),
    ("jax.extend.mlir.dialects.stablehlo", "xor"),
    ("jax.extend.mlir.dialects.stablehlo", "or_"),
    ("jax.extend.mlir.dialects.stablehlo", "shift_left"),
    ("jax.extend.mlir.dialects.stablehlo", "shift_right_logical"),
    ("jax.extend.random", "define_prng_impl"),
    ("jax.extend.random", "threefry_prng_impl"),
    ("jax.interpreters.mlir", "register_lowering"),
    ("jax.interpreters.mlir", "ir_constant"),
    ("jax.interpreters.batching", "primitive_batchers"),
)


class FusionUnavailableWarning(RuntimeWarning):
    """This JAX lacks an internal that FUSED_THREEFRY needs; JAX's own threefry is used instead."""


def _missing_internal() -> str | None:
    """The dotted name of the first of `_INTERNALS` that this JAX lacks, or None when it has them all."""
    for module, attribute in _INTERNALS:
        try:
            if not hasattr(importlib.import_module(module), attribute):
                return f"{module}.{attribute}"
        except ImportError:
            return module
    return None


_MISSING = _missing_internal()
if _MISSING is None:
    from jax.extend.core import Primitive
    from jax.extend.mlir.dialects import stablehlo as hlo
    from jax.extend.random import define_prng_impl, threefry_prng_impl
    from jax.interpreters import batching, mlir


# The hash as one primitive with a hand-written lowering. JAX lowers a PRNG
# implementation's functions afresh at each call site, so written in jnp ops each
# of the hash's ~130 operations was traced, batched (keys under `vmap`) and lowered
# again for every PRNG operation of a program: 37% of a PPO train's lowering time
# at one seed, 51% at 8 vmapped seeds. The lowering below emits the same StableHLO
# operations directly, so XLA compiles the same program (outputs bit-identical).
# `_define_fused_threefry` (at the end of this section) makes the primitive.
_hash_p = None


def _hash_abstract_eval(*avals):
    shape = avals[0].shape
    if any(a.shape != shape or a.dtype != jnp.uint32 for a in avals):
        raise TypeError(f"fused_threefry2x32 takes four uint32 arrays of one shape, got {avals}.")
    vma = frozenset().union(*(getattr(a, "vma", frozenset()) for a in avals))
    out = avals[0].update(weak_type=False, vma=vma) if hasattr(avals[0], "vma") else avals[0].update(weak_type=False)
    return out, out


def _hash_lowering(ctx, k1, k2, x1, x2):
    shape = ctx.avals_out[0].shape

    def constant(value):
        return mlir.ir_constant(np.broadcast_to(np.uint32(value), shape))

    def rotate_left(x, r):
        return hlo.or_(hlo.shift_left(x, constant(r)), hlo.shift_right_logical(x, constant(32 - r)))

    return list(_hash_rounds(k1, k2, x1, x2, hlo.add, hlo.xor, rotate_left, constant))


def _hash_batch(args, dims):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [
        jnp.broadcast_to(a, (size,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    return _hash_p.bind(*moved), (0, 0)


def _hash(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 of the counter pair (x1, x2) under key (k1, k2), unrolled (keys broadcast to x's shape)."""
    shape = jnp.shape(x1)
    args = [jnp.broadcast_to(jnp.asarray(a, jnp.uint32), shape) for a in (k1, k2, x1, x2)]
    return tuple(_hash_p.bind(*args))


def _counters(shape: Sequence[int]) -> tuple[jax.Array, jax.Array]:
    """The 64-bit row-major index of every element as (high, low) uint32 words; high is 0 here."""
    size = math.prod(shape)
    low = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return jnp.zeros(shape, jnp.uint32), low


def _small(shape: Sequence[int]) -> bool:
    return math.prod(shape) < 2**32


def _split(key: jax.Array, shape: Sequence[int]) -> jax.Array:
    if not _small(shape):
        return threefry_prng_impl.split(key, shape)
    bits1, bits2 = _hash(key[0], key[1], *_counters(shape))
    return computed_once(jnp.stack([bits1, bits2], axis=-1), key)


def _random_bits(key: jax.Array, bit_width: int, shape: Sequence[int]) -> jax.Array:
    if bit_width not in (8, 16, 32) or not _small(shape):
        return threefry_prng_impl.random_bits(key, bit_width, shape)
    bits1, bits2 = _hash(key[0], key[1], *_counters(shape))
    bits = computed_once(bits1 ^ bits2, key)
    return bits if bit_width == 32 else bits.astype(jnp.uint8 if bit_width == 8 else jnp.uint16)


def _fold_in(key: jax.Array, data: jax.Array) -> jax.Array:
    # threefry's fold_in hashes the seed pair (0, data) as one two-word counter.
    bits1, bits2 = _hash(key[0], key[1], jnp.zeros((), jnp.uint32), jnp.asarray(data, jnp.uint32))
    return computed_once(jnp.stack([bits1, bits2]), key)


def _define_fused_threefry():
    """The hash primitive and FUSED_THREEFRY, or (None, None) after one warning saying why not."""
    if _MISSING is not None:
        reason = f"this JAX (jax {jax.__version__}) has no {_MISSING}"
    else:
        try:
            hash_p = Primitive("fused_threefry2x32")
            hash_p.multiple_results = True
            hash_p.def_impl(_hash_jnp)
            hash_p.def_abstract_eval(_hash_abstract_eval)
            mlir.register_lowering(hash_p, _hash_lowering)
            batching.primitive_batchers[hash_p] = _hash_batch
            impl = define_prng_impl(
                key_shape=(2,),
                seed=threefry_prng_impl.seed,
                split=_split,
                random_bits=_random_bits,
                fold_in=_fold_in,
                name="threefry2x32_fused",
                tag="fyf",
            )
            return hash_p, impl
        except Exception as error:  # the internals are there but no longer work as they did
            reason = f"this JAX's (jax {jax.__version__}) internals refused it ({type(error).__name__}: {error})"
    warnings.warn(
        f"jaxrl_rollout.prng: {reason}, which the fused CPU threefry needs; falling back to JAX's own "
        "threefry2x32 (the same random bits, without the one-kernel hash on CPU).",
        FusionUnavailableWarning,
        stacklevel=2,
    )
    return None, None


_hash_p, FUSED_THREEFRY = _define_fused_threefry()


def is_key(x: object) -> bool:
    """Whether `x` is an array of typed PRNG keys (`jax.random.key`), concrete, traced or abstract.

    Raw uint32 keys (`jax.random.PRNGKey`) are plain integer arrays and give
    False; so do objects without a dtype, or with one that is not a NumPy or
    JAX dtype (a torch tensor's).
    """
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    try:
        return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:
        return False


def _is_threefry(key: jax.Array) -> bool:
    if is_key(key):
        return str(jax.random.key_impl(key)) == "threefry2x32"
    return (
        getattr(key, "dtype", None) == jnp.uint32
        and jnp.shape(key)[-1:] == (2,)
        and str(jax.config.jax_default_prng_impl) == "threefry2x32"
    )


def _enabled() -> bool:
    return FUSED_THREEFRY is not None and bool(jax.config.jax_threefry_partitionable) and jax.default_backend() == "cpu"


def fused(key: jax.Array) -> jax.Array:
    """`key` (a raw uint32 [..., 2] or typed threefry key) as a typed `FUSED_THREEFRY` key.

    Every `jax.random` function gives the same result for the returned key as
    for `key`. Any other key (another implementation, or when fusing is off,
    see the module docstring) is returned unchanged.
    """
    if not is_key(key) and getattr(key, "dtype", None) != jnp.uint32:  # an int seed: AttributeError before
        got = f"{key.dtype} array" if hasattr(key, "dtype") else type(key).__name__
        raise TypeError(f"key must be a PRNG key, jax.random.key(seed) or jax.random.PRNGKey(seed), got {got}.")
    if not can_fuse(key):
        return key
    return jax.random.wrap_key_data(jax.random.key_data(key), impl=FUSED_THREEFRY)


def like(key: jax.Array, reference: jax.Array) -> jax.Array:
    """`key` (from `fused(reference)` or a split of it) in `reference`'s representation.

    A raw uint32 reference gives raw key data, a typed one a key of its
    implementation; a key that was not fused is returned unchanged.
    """
    if not (is_key(key) and jax.random.key_impl(key) == FUSED_THREEFRY):
        return key
    data = jax.random.key_data(key)
    if is_key(reference):
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(reference))
    return data


def split(key: jax.Array, num: int | tuple[int, ...] = 2) -> jax.Array:
    """`jax.random.split(key, num)`, same keys and key type, hashed in one fused kernel."""
    return like(jax.random.split(fused(key), num), key)


def can_fuse(key: jax.Array) -> bool:
    """Whether `fused(key)` gives a `FUSED_THREEFRY` key (see the module docstring)."""
    return _enabled() and _is_threefry(key)
