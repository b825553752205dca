"""prng.FUSED_THREEFRY: every jax.random function gives the same bits as JAX's own threefry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import prng

KEYS = {"raw": jax.random.PRNGKey(30), "typed": jax.random.key(7)}


def _data(keys):
    return np.asarray(jax.random.key_data(keys))


@pytest.mark.parametrize("kind", KEYS)
def test_fused_draws_equal_jax_threefry(kind):
    key = KEYS[kind]
    fast = prng.fused(key)
    assert jax.random.key_impl(fast) == prng.FUSED_THREEFRY
    for shape in [(), (5,), (2, 3)]:
        if shape:
            np.testing.assert_array_equal(_data(jax.random.split(key, shape)), _data(jax.random.split(fast, shape)))
        for dtype in (jnp.uint8, jnp.uint16, jnp.uint32):
            np.testing.assert_array_equal(jax.random.bits(key, shape, dtype), jax.random.bits(fast, shape, dtype))
        np.testing.assert_array_equal(jax.random.uniform(key, shape), jax.random.uniform(fast, shape))
        np.testing.assert_array_equal(jax.random.normal(key, shape), jax.random.normal(fast, shape))
    np.testing.assert_array_equal(_data(jax.random.split(key)), _data(jax.random.split(fast)))
    for data in (0, 1, 3, 2**31 + 5):
        np.testing.assert_array_equal(_data(jax.random.fold_in(key, data)), _data(jax.random.fold_in(fast, data)))
    logits = jnp.linspace(-2.0, 2.0, 24).reshape(4, 6)
    np.testing.assert_array_equal(jax.random.categorical(key, logits), jax.random.categorical(fast, logits))
    np.testing.assert_array_equal(jax.random.permutation(key, 300), jax.random.permutation(fast, 300))
    np.testing.assert_array_equal(jax.random.randint(key, (7,), -5, 9), jax.random.randint(fast, (7,), -5, 9))
    np.testing.assert_array_equal(jax.random.bernoulli(key, 0.3, (9,)), jax.random.bernoulli(fast, 0.3, (9,)))


def test_fused_under_jit_and_vmap():
    keys = jax.random.split(jax.random.PRNGKey(3), 5)

    def draws(k, to_fast):
        k = prng.fused(k) if to_fast else k
        a, b = jax.random.split(k)
        return jax.random.key_data(jax.random.fold_in(a, 4)), jax.random.uniform(b, (3,)), jax.random.bits(k, (2, 2))

    plain = jax.jit(jax.vmap(lambda k: draws(k, False)))(keys)
    fast = jax.jit(jax.vmap(lambda k: draws(k, True)))(keys)
    for x, y in zip(plain, fast):
        np.testing.assert_array_equal(x, y)


def test_fused_hash_under_shard_map_and_grad():
    """The hash is one primitive with its own lowering: it must work wherever jax.random does."""
    mesh = jax.make_mesh((1,), ("runs",))
    keys = jax.random.split(jax.random.PRNGKey(5), 3)

    def draws(k, view):
        return jax.vmap(lambda kk: jax.random.uniform(view(kk), (3,)))(k)

    placed = jax.device_put(keys, jax.sharding.NamedSharding(mesh, jax.P("runs")))
    sharded = jax.jit(jax.shard_map(lambda k: draws(k, prng.fused), mesh=mesh, in_specs=jax.P("runs"),
                                    out_specs=jax.P("runs")))(placed)
    np.testing.assert_array_equal(sharded, draws(keys, lambda k: k))
    noise = lambda k: jax.random.normal(k, (4,))  # noqa: E731
    grad = jax.grad(lambda x, k: jnp.sum(x * noise(prng.fused(k))))(jnp.ones(4), keys[0])
    np.testing.assert_array_equal(grad, noise(keys[0]))


@pytest.mark.parametrize("kind", KEYS)
def test_split_keeps_the_key_type(kind):
    key = KEYS[kind]
    got, want = prng.split(key, 4), jax.random.split(key, 4)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_data(got), _data(want))
    assert prng.like(prng.fused(key), key).dtype == key.dtype


def test_other_keys_are_left_alone():
    rbg = jax.random.key(0, impl="rbg")
    assert prng.fused(rbg) is rbg
    assert prng.like(rbg, rbg) is rbg
    assert not prng.can_fuse(rbg)
    np.testing.assert_array_equal(_data(prng.split(rbg, 3)), _data(jax.random.split(rbg, 3)))


def test_is_key_tells_typed_keys_from_everything_else():
    typed = [jax.random.key(0), jax.random.key(0, impl="rbg"), prng.fused(jax.random.key(0)),
             jax.ShapeDtypeStruct((3,), jax.random.key(0).dtype)]
    class ForeignDtype:  # e.g. a torch tensor: its dtype is not one NumPy can read
        dtype = object()

    others = [jax.random.PRNGKey(0), np.zeros(2, np.uint32), 1.0, None, "key", jnp.float32(1), ForeignDtype()]
    assert all(prng.is_key(x) for x in typed)
    assert not any(prng.is_key(x) for x in others)
    traced = jax.jit(lambda k, raw: (jnp.bool_(prng.is_key(k)), jnp.bool_(prng.is_key(raw))))
    assert [bool(b) for b in traced(jax.random.key(1), jax.random.PRNGKey(1))] == [True, False]


def test_fusing_is_off_with_the_legacy_threefry_counters():
    key = jax.random.PRNGKey(1)
    with jax.threefry_partitionable(False):
        assert not prng.can_fuse(key)
        assert prng.fused(key) is key
        np.testing.assert_array_equal(prng.split(key, 3), jax.random.split(key, 3))


def test_fused_hash_is_one_kernel():
    """What the module is for: no loop of kernels per hash in the compiled program."""
    fast = jax.jit(lambda k: jax.random.uniform(prng.fused(k), (4,))).lower(jax.random.PRNGKey(0)).compile()
    text = fast.as_text()
    assert "while" not in text
    assert text.count(" fusion(") + text.count(" fusion.") <= 3, text


def test_a_draw_read_by_several_kernels_is_hashed_once():
    """XLA copies cheap elementwise producers into every kernel that reads them; the hash is kept out of that."""

    def draws(key, fuse):
        view = prng.fused if fuse else (lambda k: k)
        x = jax.random.normal(view(key), (16, 1))
        k1, k2 = jax.random.split(view(key))
        return x, jax.random.bits(k1, (3,)), jax.random.key_data(k2) if fuse else k2

    def f(key, y, fuse=True):
        x, bits, k2 = draws(key, fuse)
        return x * y, x + y, jnp.sin(x) @ y.T, jnp.cumsum(x), bits, k2 + 1

    key, y = jax.random.PRNGKey(0), jnp.ones((16, 1))
    text = jax.jit(f).lower(key, y).compile().as_text()
    rotations_per_hash = 20  # 5 x 4 rounds, one shift-left each
    assert text.count("shift-left(") == 3 * rotations_per_hash, text  # the normal draw, the split, the bits
    for a, b in zip(jax.jit(f)(key, y), jax.jit(f, static_argnums=2)(key, y, False)):
        np.testing.assert_array_equal(a, b)
