"""jaxrl_rollout: JAX-native, PyTorch-equivalent RL rollouts on gymnax environments."""

from jaxrl_rollout.episodes import episode_metrics
from jaxrl_rollout.policies import categorical_policy, uniform_random_policy
from jaxrl_rollout.rollout import evaluate, reset_carry, rollout, rollout_init
from jaxrl_rollout.types import (
    EpisodeMetrics,
    EvalResult,
    PolicyOutput,
    RolloutState,
    Trajectory,
)

__version__ = "0.1.0"

__all__ = [
    "EpisodeMetrics",
    "EvalResult",
    "PolicyOutput",
    "RolloutState",
    "Trajectory",
    "categorical_policy",
    "episode_metrics",
    "evaluate",
    "reset_carry",
    "rollout",
    "rollout_init",
    "uniform_random_policy",
]
