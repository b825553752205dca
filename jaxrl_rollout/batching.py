"""Flatten orders and minibatch permutations for the learner.

Two flatten orders appear in the PyTorch references (docs/semantics.md §7):
time-major k = t * B + b (CleanRL, ARENA, ilpyt: `reshape(-1)` /
`flatten(0, 1)` of [T, B]) and env-major k = b * T + t (torch-ac, SB3, A2C:
transpose to [B, T] first). Minibatch indices are data, so a PyTorch run's
permutations can be passed in and replayed exactly.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, prng

__all__ = [
    "flatten_env_major",
    "flatten_time_major",
    "minibatch_indices",
    "permutation",
    "permutations",
    "sequence_minibatch_indices",
    "take",
    "take_sequences",
]


def _leading(tree: Any, name: str, rank: int) -> tuple[int, ...]:
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"{name} must hold at least one array.")
    lead = tuple(jnp.shape(leaves[0])[:rank])
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if tuple(jnp.shape(leaf)[:rank]) != lead or len(lead) < rank:
            raise ValueError(
                f"every leaf of {name} must share the leading [T, B] axes {lead}; "
                f"{name}{jax.tree_util.keystr(path)} has shape {tuple(jnp.shape(leaf))}."
            )
    return lead


def flatten_time_major(tree: Any) -> Any:
    """[T, B, ...] -> [T * B, ...] with row k = t * B + b (CleanRL, ARENA, ilpyt)."""
    _leading(tree, "tree", 2)
    return jax.tree.map(lambda x: jnp.reshape(x, (-1, *jnp.shape(x)[2:])), tree)


def flatten_env_major(tree: Any) -> Any:
    """[T, B, ...] -> [B * T, ...] with row k = b * T + t (torch-ac, SB3, A2C)."""
    _leading(tree, "tree", 2)
    return jax.tree.map(lambda x: jnp.reshape(jnp.swapaxes(x, 0, 1), (-1, *jnp.shape(x)[2:])), tree)


def _positive_int(name: str, value: Any) -> int:
    """`value` as a Python int (a NumPy int too: `np.prod(shape)` gives one), or a ValueError naming `name`."""
    if not _checks.is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive Python int (static under jit), got {value!r}.")
    return int(value)


def _check_split(total: int, total_name: str, num_minibatches: int) -> int:
    total, num_minibatches = _positive_int(total_name, total), _positive_int("num_minibatches", num_minibatches)
    if total % num_minibatches:
        raise ValueError(
            f"{total_name}={total} does not divide into num_minibatches={num_minibatches} "
            "equal minibatches."
        )
    return total // num_minibatches


def minibatch_indices(key: jax.Array, batch_size: int, num_minibatches: int, num_epochs: int = 1) -> jax.Array:
    """Shuffled minibatch indices: one permutation of the batch per epoch.

    Each epoch permutes `arange(batch_size)` and cuts it into contiguous
    minibatches (CleanRL's `np.random.shuffle` + slices, ARENA's
    `permutation(B).reshape(M, mb)`, SB3's `permutation`). The epochs'
    permutations are independent; their random bits come from one draw (see
    `permutations`).

    Returns:
      int32 [num_epochs, num_minibatches, batch_size // num_minibatches].
    """
    _checks.check_function_key(key, "minibatch_indices", "draws")
    size = _check_split(batch_size, "batch_size", num_minibatches)
    num_epochs = _positive_int("num_epochs", num_epochs)
    return _permutations(key, num_epochs, batch_size).reshape(num_epochs, -1, size)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of `arange(n)` (int32 [n]); `permutations(key, 1, n)[0]`."""
    _checks.check_function_key(key, "permutation", "draws")
    return _permutations(key, 1, n)[0]


def permutations(key: jax.Array, num: int, n: int) -> jax.Array:
    """`num` independent uniformly random permutations of `arange(n)` (int32 [num, n]).

    `jax.random.permutation` sorts random keys and the indices as two operands;
    XLA's CPU sort runs a comparator call per comparison for that, which made the
    shuffle the most expensive single op of a PPO update at 64 vmapped seeds
    (BENCHMARKS.md, section 9). Here each round packs random bits above the
    index bits of one uint32 and sorts that alone (about 2.5x faster on CPU),
    then reads the order from the low bits. Elements whose random bits tie keep
    their previous order, as in `jax.random.permutation`; the rounds give at
    least 32 random bits per element in all (two rounds up to n = 2**16), so a
    tie between two elements in every round has probability at most 2**-32
    (jax.random.permutation's one round of 32 bits: 2**-32 too).

    The bits of every round and permutation are one `jax.random.bits` draw of
    shape [rounds, num, n]: one hash for the whole shuffle of a PPO update,
    where a key split per permutation and per round gave four (each hash is a
    kernel of ~170 operations that XLA compiles separately; BENCHMARKS.md,
    section 9).
    """
    _checks.check_function_key(key, "permutations", "draws")
    return _permutations(key, num, n)


def _permutations(key: jax.Array, num: int, n: int) -> jax.Array:
    num, n = _positive_int("num", num), _positive_int("n", n)
    index_bits = (n - 1).bit_length()
    if index_bits > 24:  # too few bits left for a random key: the two-operand sort
        keys = jax.random.split(prng.fused(key), num)
        return jax.vmap(lambda k: jax.random.permutation(k, n))(keys).astype(jnp.int32)
    free = 32 - index_bits
    mask = jnp.uint32((1 << index_bits) - 1)
    index = jnp.arange(n, dtype=jnp.uint32)
    bits = jax.random.bits(prng.fused(key), (-(-32 // free), num, n), jnp.uint32) & ~mask
    perm = None  # the identity: the first round's order is the permutation itself
    for round_bits in bits:
        order = jnp.sort(round_bits | index, axis=-1) & mask
        perm = order if perm is None else jnp.take_along_axis(perm, order, axis=-1)
    return perm.astype(jnp.int32)


def sequence_minibatch_indices(
    key: jax.Array, num_envs: int, num_minibatches: int, num_epochs: int = 1
) -> jax.Array:
    """Env indices for recurrent minibatches that keep each env's sequence whole.

    Returns:
      int32 [num_epochs, num_minibatches, num_envs // num_minibatches]; use with
      `take_sequences`.
    """
    _checks.check_function_key(key, "sequence_minibatch_indices", "draws")
    _check_split(num_envs, "num_envs", num_minibatches)
    return minibatch_indices(key, num_envs, num_minibatches, num_epochs)


def _check_indices(name: str, indices: Any, size: int, of: str) -> None:
    """Integer indices in [0, size), checked where concrete (a permutation replayed from a PyTorch run of
    another batch size would otherwise gather NaN rows, jnp.take's fill, silently); traced ones are not."""
    dtype = jnp.result_type(indices)
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name} must be integer indices, got {dtype}.")
    values = _checks.concrete(indices)
    if values is None:
        return
    bad = values[(values < 0) | (values >= size)]
    if bad.size:
        raise ValueError(f"{name} must lie in [0, {size}), the {of}, got {int(bad.ravel()[0])}.")


def take(flat: Any, indices: jax.Array) -> Any:
    """Gathers rows of a flattened batch: leaves [N, ...] -> [*indices.shape, ...].

    Raises:
      TypeError, ValueError: `indices` are not integers, or (where concrete)
        not in [0, N).
    """
    (n,) = _leading(flat, "flat", 1)
    _check_indices("indices", indices, n, "rows of flat")
    return jax.tree.map(lambda x: jnp.take(x, indices, axis=0), flat)


def take_sequences(tree: Any, env_indices: jax.Array) -> Any:
    """Gathers whole env sequences: leaves [T, B, ...] -> [*env_indices.shape[:-1], T, b, ...].

    For `env_indices` of shape [M, b] the result is M time-major minibatches
    [T, b, ...], so a recurrent learner can replay each env from its first step.
    """
    _, num_envs = _leading(tree, "tree", 2)
    _check_indices("env_indices", env_indices, num_envs, "envs (B) of tree")
    env_indices = jnp.asarray(env_indices)

    def gather(x):
        picked = jnp.take(x, env_indices, axis=1)  # [T, *idx_shape, ...]
        return jnp.moveaxis(picked, 0, env_indices.ndim - 1)

    return jax.tree.map(gather, tree)
