"""Training algorithms as pure `make_train(config) -> train(key, hparams=None)` functions, and their registry.

    from jaxrl_rollout.algorithms import ppo, stack_hparams
    grid = stack_hparams([ppo.PPOHParams(lr=lr) for lr in (1e-3, 3e-4)])
    jax.jit(jax.vmap(ppo.make_train(ppo.PPOConfig()), in_axes=(None, 0)))(key, grid)

The registry names every algorithm the runner and the command line know:
`NAMES` lists them, `get(name)` gives one's `Entry` (config class,
hyperparameter class, factory) and `REGISTRY` is the dict of all of them.
An algorithm's module is imported only when its entry is asked for, so
importing this package (or `_common`) imports no algorithm.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from jaxrl_rollout._warnings import PartialRunWarning

__all__ = ["Entry", "NAMES", "PartialRunWarning", "REGISTRY", "check_hparams", "get", "hparam_ranges", "stack_hparams"]

H = TypeVar("H")

# name -> (module under jaxrl_rollout.algorithms, config class, hyperparameter class, factory)
_PLACES = {
    "ppo": ("ppo", "PPOConfig", "PPOHParams", "make_ppo"),
    "a2c": ("a2c", "A2CConfig", "A2CHParams", "make_a2c"),
    "dqn": ("dqn", "DQNConfig", "DQNHParams", "make_dqn"),
    "pqn": ("pqn", "PQNConfig", "PQNHParams", "make_pqn"),
    "sac": ("sac", "SACConfig", "SACHParams", "make_sac"),
    "td3": ("td3", "TD3Config", "TD3HParams", "make_td3"),
}

NAMES = tuple(_PLACES)
"""The registered algorithm names, in the order the command line lists them."""


class Entry(NamedTuple):
    """One registered algorithm (unpacks as `config_cls, hparams_cls, make`).

    Attributes:
      config: its static config class (`PPOConfig`, ...).
      hparams: its traced hyperparameter class (`PPOHParams`, ...).
      make: its factory, `make(config, *, env=None, env_params=None,
        network=None) -> Algorithm` (`make_ppo`, ...).
    """

    config: type
    hparams: type
    make: Callable


def get(name: str) -> Entry:
    """The registered algorithm `name`, its module imported on first use.

    Args:
      name: one of `NAMES` ("ppo", "a2c", "dqn", "pqn", "sac", "td3").

    Returns:
      Its `Entry`.

    Raises:
      ValueError: naming `algo`, for a name that is not registered.
    """
    if not isinstance(name, str) or name not in _PLACES:
        raise ValueError(f"algo must be one of {', '.join(NAMES)}, got {name!r}.")
    module_name, config, hparams, make = _PLACES[name]
    module = importlib.import_module(f"jaxrl_rollout.algorithms.{module_name}")
    return Entry(getattr(module, config), getattr(module, hparams), getattr(module, make))


def hparam_ranges(name_or_record: Any) -> dict:
    """The valid ranges of an algorithm's hyperparameters, by its name or by a record of its HParams class.

    Each algorithm's module may define `HPARAM_RANGES` (name -> (low, low
    included, high or None, high included)); PPO's and A2C's are
    `_common.HPARAM_RANGES`, which is also the answer for a record of a class
    that is not registered.
    """
    from jaxrl_rollout.algorithms import _common

    if isinstance(name_or_record, str):
        get(name_or_record)  # a ValueError names an unknown algo
        module_name = _PLACES[name_or_record][0]
    else:
        cls = type(name_or_record)
        module_name = next((m for m, _, h, _ in _PLACES.values()
                            if cls.__module__ == f"jaxrl_rollout.algorithms.{m}" and cls.__name__ == h), None)
        if module_name is None:
            return _common.HPARAM_RANGES
    module = importlib.import_module(f"jaxrl_rollout.algorithms.{module_name}")
    return getattr(module, "HPARAM_RANGES", _common.HPARAM_RANGES)


def __getattr__(name: str) -> Any:
    """`REGISTRY`, {name: Entry} for every registered algorithm, built (and its modules imported) on first use."""
    if name == "REGISTRY":
        registry = {n: get(n) for n in NAMES}
        globals()["REGISTRY"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_hparams(hparams: H) -> H:
    """Checks one hyperparameter record against its algorithm's ranges and returns it; a ValueError names a field
    out of its range (an inf where only a clip takes one, a gamma of 1.5, a negative rate).

    `train(key, hparams)` checks the record itself only when its values are known as it traces: a record passed
    into `jax.jit` is traced and trains as given (a gamma of 1.5 diverges, a negative rate ascends). Check it
    first: `jax.jit(train)(key, check_hparams(record))`. `stack_hparams` checks every record of a grid.
    """
    from jaxrl_rollout.algorithms._common import check_hparams as check

    check(hparams, hparam_ranges(hparams))
    return hparams


def stack_hparams(hparams: Sequence[H]) -> H:
    """Stacks hyperparameter records field by field into one record of [G] float32 arrays, for vmap.

    Every record is checked first against its algorithm's ranges (`hparam_ranges`, `_common.check_hparams`):
    a ValueError names a field out of its range.
    """
    hparams = list(hparams)
    if not hparams:
        raise ValueError("stack_hparams needs at least one hyperparameter record.")
    kinds = {type(h) for h in hparams}
    if len(kinds) != 1:
        raise TypeError(f"stack_hparams needs records of one type, got {sorted(k.__name__ for k in kinds)}.")
    from jaxrl_rollout.algorithms._common import check_hparams

    ranges = hparam_ranges(hparams[0])
    for h in hparams:
        check_hparams(h, ranges)
    return jax.tree.map(lambda *xs: jnp.asarray(xs, jnp.float32), *hparams)
