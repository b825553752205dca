"""Observation normalisation and reward scaling with running statistics.

Both follow the gym / gymnasium wrappers that CleanRL's continuous-control
PPO stacks on its envs (`NormalizeObservation`, `TransformObservation(clip)`,
`NormalizeReward`, `TransformReward(clip)`), with one statistic shared by the
whole env batch, as gymnasium's vector wrappers keep it. The statistics are
plain arrays in a NamedTuple, so they live in the training state, move through
`jit`, `vmap` and `lax.scan`, and are saved with a checkpoint.

Observations (`rollout_init(..., normalize_observations=True)`): the
statistics are updated with every batch of observations as it arrives (the
reset observations, then each step's, which include auto-reset ones), and the
policy acts on `clip((obs - mean) / sqrt(var + eps), -clip, clip)` computed
with the statistics that already include that batch. Final observations of
truncated episodes are normalised with the same statistics but not added to
them, as in gym's same-step auto-reset.

Rewards (`scale_rewards`, after a rollout: the scaled rewards do not affect
the actions, so doing it afterwards is exact): a per-env discounted return
`R = gamma R + r` is accumulated, its running variance is updated with the
batch of `R` every step, the reward is divided by `sqrt(var + eps)` and
clipped, and `R` is zeroed where the episode ended (terminated or truncated).
This is gym 0.23's `NormalizeReward`, the version CleanRL pins.

Statistics are float32; `count` starts at 1e-4, as gymnasium's
`RunningMeanStd` (which keeps float64). Two limits follow from float32: the
count stops growing exactly once one batch is under its rounding step (from
2**24 samples for batches of 1, 2**27 for batches of 8), where a new batch
moves the statistics by about 1/count anyway; and observations whose squares
overflow float32 (|x| above about 1e19) make the variance inf or NaN. Scale
such observations before they reach the statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks

__all__ = [
    "RewardScaleState", "RunningMeanStd", "normalize", "normalized_policy", "reward_scale_init", "rms_init",
    "rms_update", "scale_rewards",
]

INITIAL_COUNT = 1e-4
"""gymnasium's `RunningMeanStd(epsilon=1e-4)`: the prior count of the initial mean 0, variance 1."""


class RunningMeanStd(NamedTuple):
    """Running mean and (population) variance of a stream of batches.

    Attributes:
      mean: [...] float32, the per-coordinate mean.
      var: [...] float32, the per-coordinate variance.
      count: float32 scalar, samples seen (plus the 1e-4 prior).
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def rms_init(shape=()) -> RunningMeanStd:
    """Mean 0, variance 1, count 1e-4 (gymnasium's initial statistics)."""
    return RunningMeanStd(
        mean=jnp.zeros(shape, jnp.float32), var=jnp.ones(shape, jnp.float32), count=jnp.float32(INITIAL_COUNT)
    )


def rms_update(rms: RunningMeanStd, batch: jax.Array) -> RunningMeanStd:
    """Adds a batch [N, *shape] to the statistics (the parallel mean/variance merge).

    Raises:
      ValueError: if the batch has no rows (its mean would be NaN, and the statistics NaN from then on) or its
        trailing shape is not the statistics' shape.
    """
    batch = jnp.asarray(batch, jnp.float32)
    if batch.ndim < 1 or batch.shape[0] == 0:
        raise ValueError(f"batch must be [N, *{tuple(rms.mean.shape)}] with N >= 1 rows, got shape {batch.shape}.")
    if batch.shape[1:] != rms.mean.shape:
        raise ValueError(
            f"batch must be [N, *{tuple(rms.mean.shape)}] to update running statistics of shape "
            f"{tuple(rms.mean.shape)}, got {batch.shape}."
        )
    batch_count = jnp.float32(batch.shape[0])
    batch_mean = jnp.mean(batch, axis=0)
    batch_var = jnp.var(batch, axis=0)
    delta = batch_mean - rms.mean
    total = rms.count + batch_count
    mean = rms.mean + delta * batch_count / total
    m2 = rms.var * rms.count + batch_var * batch_count + jnp.square(delta) * rms.count * batch_count / total
    return RunningMeanStd(mean=mean, var=m2 / total, count=total)


def normalize(rms: RunningMeanStd, x: jax.Array, clip: float = 10.0, epsilon: float = 1e-8) -> jax.Array:
    """`clip((x - mean) / sqrt(var + epsilon), -clip, clip)`, float32; `clip=None` skips the clip."""
    out = (jnp.asarray(x, jnp.float32) - rms.mean) / jnp.sqrt(rms.var + epsilon)
    return out if clip is None else jnp.clip(out, -clip, clip)


def normalized_policy(policy_fn: Callable, clip: float = 10.0, epsilon: float = 1e-8) -> Callable:
    """Wraps a policy so that it acts on raw observations with frozen statistics.

    The wrapped policy takes `params = (obs_rms, policy_params)` and normalises
    the observation before calling `policy_fn`, so `evaluate` and plain
    `rollout` calls see what training saw, without updating the statistics.
    Works for feedforward and recurrent policies.
    """

    def policy(params, obs, key, *carry):
        obs_rms, inner = params
        return policy_fn(inner, normalize(obs_rms, obs, clip, epsilon), key, *carry)

    return policy


class RewardScaleState(NamedTuple):
    """The reward scaler's state, carried in the training state.

    Attributes:
      returns: [B] float32, each env's discounted return of its running episode.
      rms: `RunningMeanStd` of those returns (scalar statistics).
    """

    returns: jax.Array
    rms: RunningMeanStd


def reward_scale_init(num_envs: int) -> RewardScaleState:
    """Zero returns for `num_envs` envs and gymnasium's initial statistics."""
    return RewardScaleState(returns=jnp.zeros((num_envs,), jnp.float32), rms=rms_init(()))


def scale_rewards(
    state: RewardScaleState,
    reward: jax.Array,
    done: jax.Array,
    gamma: Any,
    clip: float = 10.0,
    epsilon: float = 1e-8,
) -> tuple[RewardScaleState, jax.Array]:
    """Scales a rollout's rewards [T, B] step by step; returns `(state, scaled [T, B])`.

    Args:
      state: from `reward_scale_init` or the previous call.
      reward: [T, B] raw rewards.
      done: [T, B] bool, the episode ended at step t (terminated or truncated).
      gamma: the discount of the running return (traced is fine).
      clip: the scaled reward is clipped to [-clip, clip]; None skips it.
      epsilon: added to the variance.

    Raises:
      ValueError: if reward and done are not both [T, B] with B the state's env count.
    """
    num_envs = state.returns.shape[0]
    if jnp.ndim(reward) != 2 or jnp.shape(reward)[1] != num_envs or jnp.shape(done) != jnp.shape(reward):
        raise ValueError(
            f"reward and done must both be [T, B] with B={num_envs} (the scaler's envs), "
            f"got reward {jnp.shape(reward)} and done {jnp.shape(done)}."
        )
    _checks.check_flags(done=done)  # where concrete: a 0.5 was cast to True
    _checks.check_coefficient(gamma, "gamma")

    def step(state: RewardScaleState, x):
        r, d = x
        returns = state.returns * gamma + r
        rms = rms_update(state.rms, returns)
        scaled = r / jnp.sqrt(rms.var + epsilon)
        if clip is not None:
            scaled = jnp.clip(scaled, -clip, clip)
        return RewardScaleState(jnp.where(d, 0.0, returns), rms), scaled

    return jax.lax.scan(step, state, (jnp.asarray(reward, jnp.float32), jnp.asarray(done, bool)))
