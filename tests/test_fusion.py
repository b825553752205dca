"""_fusion.computed_once: an identity (values, gradients, vmap) that XLA's CPU fusion does not copy into readers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout._fusion import computed_once


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16, jnp.int32, jnp.uint8, jnp.int8])
def test_values_are_unchanged_bit_for_bit(dtype):
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3)) * 100
    x = x.at[0, 0].set(-3.0).at[1, 1].set(0.0).astype(dtype)  # negative first element: top bit set
    if jnp.issubdtype(dtype, jnp.floating):
        x = x.at[2, 2].set(jnp.nan).at[3, 0].set(-jnp.inf).at[4, 1].set(jnp.finfo(dtype).smallest_subnormal)
    bits = lambda a: np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))  # noqa: E731
    for source in (None, jnp.float32(-2.0), jnp.uint32(7)):
        got = jax.jit(computed_once)(x, source)
        assert got.dtype == x.dtype and got.shape == x.shape
        np.testing.assert_array_equal(bits(got), bits(x))


def test_gradient_passes_through_and_vmap_works():
    f = lambda x: jnp.sum(computed_once(jnp.sin(x)) * 3.0)  # noqa: E731
    x = jnp.linspace(-1.0, 1.0, 7)
    np.testing.assert_allclose(jax.grad(f)(x), 3.0 * jnp.cos(x), rtol=1e-6)
    np.testing.assert_array_equal(jax.vmap(computed_once)(jnp.stack([x, -x])), jnp.stack([x, -x]))


def test_passthrough_for_bool_complex_and_empty():
    for x in (jnp.array([True, False]), jnp.array([1 + 2j]), jnp.zeros((0, 3))):
        assert computed_once(x) is x or np.array_equal(computed_once(x), x)


def test_a_chain_read_by_several_kernels_is_compiled_once():
    marker = 0.375  # a constant only the chain has

    def f(x, once):
        y = x
        for _ in range(6):  # a long chain of cheap elementwise operations
            y = y * marker + jnp.float32(0.5)
        if once:
            y = computed_once(y)
        return y + 1.0, y * 2.0, jnp.cumsum(y), jnp.sort(y)

    x = jnp.linspace(0.0, 1.0, 16)
    texts = {once: jax.jit(f, static_argnums=1).lower(x, once).compile().as_text() for once in (False, True)}
    count = {once: text.count("constant(0.375)") for once, text in texts.items()}
    assert count[False] > 1, "XLA no longer copies the chain into each reader: this test checks nothing"
    assert count[True] == 1, texts[True]
    # Equal up to rounding: each copy of the chain may be contracted into FMAs differently.
    for a, b in zip(jax.jit(f, static_argnums=1)(x, True), jax.jit(f, static_argnums=1)(x, False)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
