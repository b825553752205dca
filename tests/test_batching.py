"""Flatten orders and minibatch permutations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_rollout import batching

T, B = 3, 4
GRID = jnp.arange(T * B).reshape(T, B)  # value = t * B + b


def test_flatten_orders_match_torch_reshape_and_transpose():
    x = np.random.default_rng(0).normal(size=(T, B, 2)).astype(np.float32)
    tree = {"x": x, "t": np.broadcast_to(np.arange(T)[:, None], (T, B))}
    tm = batching.flatten_time_major(tree)
    em = batching.flatten_env_major(tree)
    np.testing.assert_array_equal(tm["x"], x.reshape(-1, 2))                       # torch flatten(0, 1)
    np.testing.assert_array_equal(em["x"], x.transpose(1, 0, 2).reshape(-1, 2))    # transpose(0, 1).reshape
    np.testing.assert_array_equal(tm["t"], np.repeat(np.arange(T), B))
    np.testing.assert_array_equal(em["t"], np.tile(np.arange(T), B))


def test_minibatch_indices_are_permutations_per_epoch():
    idx = batching.minibatch_indices(jax.random.key(0), 12, 3, num_epochs=4)
    assert idx.shape == (4, 3, 4) and idx.dtype == jnp.int32
    for e in range(4):
        assert sorted(np.asarray(idx[e]).ravel()) == list(range(12))
    assert not np.array_equal(idx[0], idx[1])
    np.testing.assert_array_equal(idx, batching.minibatch_indices(jax.random.key(0), 12, 3, num_epochs=4))


def test_permutation_is_a_uniform_permutation():
    for n in (1, 2, 12, 512, 70_000):  # one, two and three sort rounds
        perm = np.asarray(batching.permutation(jax.random.key(n), n))
        assert perm.dtype == np.int32 and sorted(perm.tolist()) == list(range(n))
    # All 24 orders of 4 elements, equally often (chi-square, 23 dof: 99.9% quantile 49.7).
    perms = np.asarray(jax.vmap(lambda k: batching.permutation(k, 4))(jax.random.split(jax.random.key(0), 24_000)))
    _, counts = np.unique(perms, axis=0, return_counts=True)
    assert len(counts) == 24 and ((counts - 1000) ** 2 / 1000).sum() < 49.7, counts
    # Every element at every position equally often, for a size with 23 random bits per round.
    perms = np.asarray(jax.vmap(lambda k: batching.permutation(k, 512))(jax.random.split(jax.random.key(1), 2048)))
    first = np.bincount(perms[:, 0], minlength=512)
    assert ((first - 4) ** 2 / 4).sum() < 650  # chi-square, 511 dof: 99.9% quantile about 620 + margin
    with pytest.raises(ValueError, match="n must be a positive Python int"):
        batching.permutation(jax.random.key(0), 0)


def test_permutations_are_independent_and_hashed_once():
    key = jax.random.key(3)
    perms = np.asarray(batching.permutations(key, 6, 12))
    assert perms.shape == (6, 12) and perms.dtype == np.int32
    assert all(sorted(row.tolist()) == list(range(12)) for row in perms)
    assert len({tuple(row) for row in perms}) == 6
    np.testing.assert_array_equal(batching.permutation(key, 12), batching.permutations(key, 1, 12)[0])
    np.testing.assert_array_equal(
        batching.minibatch_indices(key, 12, 3, num_epochs=6), perms.reshape(6, 3, 4)
    )
    # The point of drawing every round and epoch at once: one threefry hash for a
    # PPO update's whole shuffle (4 epochs x 2 rounds of 512), 20 rotations each.
    text = jax.jit(lambda k: batching.minibatch_indices(k, 512, 4, 4)).lower(jax.random.PRNGKey(0)).compile().as_text()
    assert text.count("shift-left(") == 20, text
    with pytest.raises(ValueError, match="num must be a positive Python int"):
        batching.permutations(key, 0, 12)


def test_take_replays_given_permutations():
    flat = batching.flatten_time_major({"g": GRID})
    perm = np.array([[5, 0, 11], [3, 2, 1]])
    np.testing.assert_array_equal(batching.take(flat, perm)["g"], perm)


def test_sequences_stay_whole():
    idx = batching.sequence_minibatch_indices(jax.random.key(1), B, 2, num_epochs=2)
    assert idx.shape == (2, 2, 2)
    mb = batching.take_sequences({"g": GRID}, idx[0])
    assert mb["g"].shape == (2, T, 2)
    for m in range(2):
        for j in range(2):
            env = int(idx[0, m, j])
            np.testing.assert_array_equal(mb["g"][m, :, j], np.arange(T) * B + env)


def test_indivisible_batches_are_rejected():
    with pytest.raises(ValueError, match=r"batch_size=10 does not divide into num_minibatches=4"):
        batching.minibatch_indices(jax.random.key(0), 10, 4)
    with pytest.raises(ValueError, match=r"num_envs=3 does not divide into num_minibatches=2"):
        batching.sequence_minibatch_indices(jax.random.key(0), 3, 2)
    with pytest.raises(ValueError, match="num_epochs must be a positive"):
        batching.minibatch_indices(jax.random.key(0), 8, 4, num_epochs=0)
    with pytest.raises(ValueError, match=r"leading \[T, B\] axes"):
        batching.flatten_time_major({"a": jnp.zeros((3, 4)), "b": jnp.zeros((3, 5))})


def test_indices_outside_the_batch_are_refused_where_known():
    """A permutation replayed from a run of another batch size gathered jnp.take's fill (NaN rows, INT_MIN
    actions) silently; float indices were accepted too. Traced indices (inside jit) cannot be checked."""
    flat = {"x": jnp.arange(6.0), "a": jnp.arange(6)}
    with pytest.raises(ValueError, match=r"^indices must lie in \[0, 6\), the rows of flat, got 6\.$"):
        batching.take(flat, jnp.array([[0, 5], [6, -1]]))
    with pytest.raises(ValueError, match=r"got -1\.$"):
        batching.take(flat, np.array([[0, 5], [2, -1]]))
    with pytest.raises(TypeError, match=r"^indices must be integer indices, got float32\.$"):
        batching.take(flat, jnp.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"^env_indices must lie in \[0, 4\), the envs \(B\) of tree, got 4\.$"):
        batching.take_sequences({"x": jnp.zeros((3, 4))}, jnp.array([[0, 4]]))
    np.testing.assert_array_equal(jax.jit(lambda i: batching.take(flat, i)["a"])(jnp.array([1, 5])), [1, 5])
