"""Records that flow through the rollout: policy outputs, rollout state, trajectories.

Every record is a NamedTuple, so it is a pytree that `jax.lax.scan`, `jax.vmap`
and `jax.jit` carry without registration. Shapes use the house letters: T time,
B environments, and `...` for the trailing shape of an observation or action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

PyTree = Any


class PolicyOutput(NamedTuple):
    """What a policy returns for a batch of observations.

    Attributes:
      action: [B, ...] pytree of actions to send to the environment (the raw
        sample: for continuous control, clip only when sending to the env).
      log_prob: [B] float, log-probability of `action` under the policy.
      value: [B] float, the critic's estimate V(obs).
    """

    action: PyTree
    log_prob: jax.Array
    value: jax.Array


FeedForwardPolicy = Callable[[PyTree, PyTree, jax.Array], PolicyOutput]
"""`policy_fn(params, obs, key) -> PolicyOutput`, obs batched [B, ...]."""

RecurrentPolicy = Callable[
    [PyTree, PyTree, jax.Array, PyTree], tuple[PolicyOutput, PyTree]
]
"""`policy_fn(params, obs, key, carry) -> (PolicyOutput, new_carry)`.

`carry` is a pytree whose leaves are [B, ...]. The rollout resets it to zeros
where an episode starts before the call, so the policy never sees a carry from
a previous episode.
"""


class RolloutState(NamedTuple):
    """Everything a rollout needs to resume where the previous one stopped.

    Attributes:
      env_state: gymnax environment state, leaves batched [B, ...].
      obs: [B, ...] pytree, the observation the policy acts on next.
      first: [B] bool, `obs` is the first observation of an episode.
      episode_return: [B] float32, undiscounted return of the running episode.
      episode_length: [B] int32, steps taken in the running episode.
      carry: recurrent policy state (leaves [B, ...]) as left by the last step,
        not yet reset for `first`; None for feedforward policies.
      key: PRNG key for the next steps.
      obs_rms: running observation statistics (`normalization.RunningMeanStd`)
        when the rollout normalises observations, else None. `obs` stays raw;
        the policy sees it normalised with these statistics.
    """

    env_state: PyTree
    obs: PyTree
    first: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    carry: PyTree | None
    key: jax.Array
    obs_rms: Any | None = None


class Trajectory(NamedTuple):
    """A time-major rollout, every leaf [T, B, ...].

    Transition t takes `obs[t]` with `action[t]` to the next state.

    Attributes:
      obs: [T, B, ...] the observation the policy acted on (normalised when
        the rollout normalises observations).
      action: [T, B, ...] the action taken.
      reward: [T, B] float32 reward of transition t.
      terminated: [T, B] bool, transition t reached a true terminal state.
      truncated: [T, B] bool, transition t hit a time limit without terminating.
      done: [T, B] bool, terminated or truncated (an end flag).
      first: [T, B] bool, obs[t] is the first observation of an episode (a
        start flag).
      log_prob: [T, B] log-probability of action[t].
      value: [T, B] V(obs[t]).
      next_value: [T, B] value of the true next state: V(final observation)
        where truncated, otherwise V(obs[t + 1]) (V of the observation left in
        the rollout state at t = T - 1). Where terminated it is V of the reset
        observation, which estimators multiply by zero. From
        `rollout(..., bootstrap_truncated=False)` it is V(obs[t + 1])
        everywhere, where truncated too: V of the next episode's first
        observation, which only an estimator that ends episodes at `done`
        (a time limit as termination) leaves unread.
      completed_return: [T, B] float32, undiscounted return of the episode that
        ended at transition t; 0 where `done` is False.
      completed_length: [T, B] int32, length of that episode; 0 where `done`
        is False.
      carry: recurrent state handed to the policy at step t (each leaf
        [T, B, ...]), before the reset for `first[t]` (torch-ac stores
        memories this way); `jax.tree.map(lambda c: c[0], carry)` is the
        carry at the start of the rollout. None for feedforward policies.
    """

    obs: PyTree
    action: PyTree
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    done: jax.Array
    first: jax.Array
    log_prob: jax.Array
    value: jax.Array
    next_value: jax.Array
    completed_return: jax.Array
    completed_length: jax.Array
    carry: PyTree | None


class EpisodeMetrics(NamedTuple):
    """Statistics of the episodes that completed inside a trajectory.

    Attributes:
      mean_return: float32 mean undiscounted return; NaN when no episode
        completed (never an ambiguous 0).
      mean_length: float32 mean episode length; NaN when no episode completed.
      num_episodes: int32 count of completed episodes.
    """

    mean_return: jax.Array
    mean_length: jax.Array
    num_episodes: jax.Array


class EvalResult(NamedTuple):
    """Per-episode outcome of `evaluate`.

    Attributes:
      returns: [N] float32 undiscounted return of each episode.
      lengths: [N] int32 steps taken in each episode.
      completed: [N] bool, the episode ended (terminated or truncated) within
        `max_steps`; where False, returns and lengths cover `max_steps` only.
    """

    returns: jax.Array
    lengths: jax.Array
    completed: jax.Array
