"""Training algorithms as pure `make_train(config) -> train(key, hparams=None)` functions.

    from jaxrl_rollout.algorithms import ppo, stack_hparams
    grid = stack_hparams([ppo.PPOHParams(lr=lr) for lr in (1e-3, 3e-4)])
    jax.jit(jax.vmap(ppo.make_train(ppo.PPOConfig()), in_axes=(None, 0)))(key, grid)
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import jax
import jax.numpy as jnp

__all__ = ["stack_hparams"]

H = TypeVar("H")


def stack_hparams(hparams: Sequence[H]) -> H:
    """Stacks hyperparameter records field by field into one record of [G] float32 arrays, for vmap.

    Every record is checked first (`_common.check_hparams`): a ValueError names a field out of its range.
    """
    hparams = list(hparams)
    if not hparams:
        raise ValueError("stack_hparams needs at least one hyperparameter record.")
    kinds = {type(h) for h in hparams}
    if len(kinds) != 1:
        raise TypeError(f"stack_hparams needs records of one type, got {sorted(k.__name__ for k in kinds)}.")
    from jaxrl_rollout.algorithms._common import check_hparams

    for h in hparams:
        check_hparams(h)
    return jax.tree.map(lambda *xs: jnp.asarray(xs, jnp.float32), *hparams)
