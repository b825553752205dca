"""Pytrees as host data, for tests that compare whole states (typed PRNG keys as their raw key data)."""

import jax
import numpy as np

from jaxrl_rollout import prng


def as_data(x):
    """x, or its raw key data if x is a typed PRNG key (which NumPy cannot compare)."""
    return jax.random.key_data(x) if prng.is_key(x) else x


def host_leaves(tree) -> list[np.ndarray]:
    """The leaves of `tree` as NumPy arrays, typed keys as their data."""
    return [np.asarray(as_data(x)) for x in jax.tree.leaves(tree)]
