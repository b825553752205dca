"""One compiled single-run program per config, for a test module whose tests train the same small config."""

import functools

import jax

from jaxrl_rollout.algorithms import stack_hparams


def grid_point(hp):
    """`hp` as one point of a stacked grid (`stack_hparams`): each field a float32 array.

    A single run given grid points and one given a grid's own slices trace the same program, so they share the
    compile that `shared_train` keeps.
    """
    return jax.tree.map(lambda x: x[0], stack_hparams([hp]))


@functools.cache
def shared_train(make_train, config):
    """`(train, jax.jit(train))` for `make_train(config)`, built on first use (not as tests are collected) and kept
    for the process, so every test that calls the jitted train with the same argument types reuses its program."""
    train = make_train(config)
    return train, jax.jit(train)
