"""`computed_once`: an identity that keeps XLA's CPU fusion from recomputing a value in every reader.

XLA's CPU fusion copies a producer made of cheap elementwise operations
(integer and bit arithmetic, multiply-adds, selects) into every fused kernel
that reads it. For a long chain such as a threefry hash or the polynomial of
`erf_inv` behind `jax.random.normal`, read by the several kernels of a
rollout step (the action is stepped, stored and scored), that means the chain
is compiled and run once per reader, and each copy may round differently
(FMA contraction). On PPO's Pendulum-v1 program such copies were 30% of the
optimised HLO (15.2k lines, 10.7k without them), and compile time grew with
them.

XLA never copies an integer division whose dividend is not a constant, so
`computed_once(x)` divides the bits of `x` by a one that XLA cannot fold (it
is computed at run time, from an element of `x` or of `source`). The chain
then ends in one kernel that writes `x` out, and its readers load it; with a
single reader it still fuses into that reader. Values and gradients are
unchanged (the tangent passes straight through). The cost is one integer
division per element, about 4% of a million-number `jax.random.uniform`.

It is built from public JAX only (`jax.custom_jvp`, `jax.lax.div`,
`jax.lax.bitcast_convert_type`), so unlike `prng.FUSED_THREEFRY` it needs no
guard against JAX moving an internal (tests/test_fallback.py runs it with those
internals deleted).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["computed_once"]

_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def _as_unsigned(x: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(x, _UNSIGNED[x.dtype.itemsize])


def _run_time_one(source: jax.Array, dtype) -> jax.Array:
    """A scalar 1 of `dtype` that XLA does not fold: (top bit of an element of `source`) >> 1, plus 1."""
    word = _as_unsigned(jnp.ravel(source)[0])
    top = np.array(word.dtype.itemsize * 8 - 1, word.dtype)
    return ((word >> top >> np.array(1, word.dtype)) + np.array(1, word.dtype)).astype(dtype)


@jax.custom_jvp
def _once(x: jax.Array, source: jax.Array) -> jax.Array:
    bits = _as_unsigned(x)
    bits = jax.lax.div(bits, jnp.broadcast_to(_run_time_one(source, bits.dtype), bits.shape))
    return jax.lax.bitcast_convert_type(bits, x.dtype)


@_once.defjvp
def _once_jvp(primals, tangents):
    x, source = primals
    return _once(x, source), tangents[0]


def computed_once(x: jax.Array, source: jax.Array | None = None) -> jax.Array:
    """`x`, unchanged, computed by one kernel however many kernels read it (see the module docstring).

    Args:
      x: an array of a numeric dtype (bool, complex and empty arrays are
        returned as they are).
      source: a non-empty array whose first element makes the run-time one
        (default `x`); pass one computed earlier, such as the key of a draw,
        so the one does not wait for `x`.
    """
    x = jnp.asarray(x)
    source = x if source is None else jnp.asarray(source)
    if x.size == 0 or source.size == 0 or x.dtype == jnp.bool_ or jnp.iscomplexobj(x) or jnp.iscomplexobj(source):
        return x
    if x.dtype.itemsize not in _UNSIGNED or source.dtype.itemsize not in _UNSIGNED:
        return x
    return _once(x, jax.lax.stop_gradient(source))
