"""jaxrl_rollout: JAX-native, PyTorch-equivalent RL rollouts on gymnax environments.

The names below are imported on first use (PEP 562), so `import jaxrl_rollout`
touches neither gymnax nor an XLA backend: the command line can call
`jax.distributed.initialize()` first, which must precede any backend use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "EpisodeMetrics": "types",
    "EvalResult": "types",
    "PolicyOutput": "types",
    "RolloutState": "types",
    "Trajectory": "types",
    "categorical_policy": "policies",
    "episode_metrics": "episodes",
    "evaluate": "collect",
    "reset_carry": "stepping",
    "rollout": "collect",
    "rollout_init": "collect",
    "uniform_random_policy": "policies",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from jaxrl_rollout.collect import evaluate, rollout, rollout_init  # noqa: F401
    from jaxrl_rollout.episodes import episode_metrics  # noqa: F401
    from jaxrl_rollout.policies import categorical_policy, uniform_random_policy  # noqa: F401
    from jaxrl_rollout.stepping import reset_carry  # noqa: F401
    from jaxrl_rollout.types import EpisodeMetrics, EvalResult, PolicyOutput, RolloutState, Trajectory  # noqa: F401


def __getattr__(name: str) -> Any:
    """The public names and the submodules (`jaxrl_rollout.policies`, ...), imported when first used."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"jaxrl_rollout.{_EXPORTS[name]}"), name)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"jaxrl_rollout.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"jaxrl_rollout.{name}":
                raise
            raise AttributeError(f"module 'jaxrl_rollout' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'jaxrl_rollout' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
