"""An on-device replay buffer of transitions, part of an off-policy algorithm's train state.

The buffer is flashbax's item buffer (https://github.com/instadeepai/flashbax,
`flashbax.make_item_buffer`): a ring of `buffer_size` transitions held in
arrays, filled by `add` and read by `sample` (uniform, with replacement, over
the transitions stored so far, as SB3's `ReplayBuffer.sample` that CleanRL
uses). Its state is a pytree of arrays, so it jits, vmaps over seeds and
hyperparameters, and scans with the rest of the train state.

Flashbax rather than a hand-written ring: `benchmarks/replay_ab.py` (5,000
add + sample of CleanRL's sizes, capacity 10,000, batch 128, one jitted scan,
2 shared CPU cores, jax 0.10.2) measured 8.8 us per add + sample for
flashbax against 6.7 us for a `.at[].set` ring with `randint` indices
(8.4 against 6.3 us with 8 envs), about 2 us of a DQN iteration's tens;
results in benchmarks/results/replay_ab.json.

Each `Transition` keeps `terminated` apart from `truncated` and, where the
episode ended and the env auto-reset, `next_obs` is the true final
observation (`info["final_observation"]`, `stepping.EnvStep.final_obs`), not
the reset observation (docs/semantics.md §4). `discount_mask` then decides
where a target bootstraps:

- `"time_limits"` (the default): bootstrap through a truncation and stop only
  at a termination, as SB3's `handle_timeout_termination=True`
  (https://github.com/DLR-RM/stable-baselines3, `ReplayBuffer`) and CleanRL's
  `dqn.py` since its gymnasium port, which stores `terminations` and the final
  observation (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/dqn.py);
- `"done"`: stop at `terminated | truncated`, as most JAX ports do, and SB3's
  `ReplayBuffer` with `handle_timeout_termination=False`. (CleanRL's older gym
  scripts are not among them: their targets used `dones`, but from SB3's
  buffer with `handle_timeout_termination=True`, which clears a timeout's
  done, so they bootstrapped through time limits too.)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, prng
from jaxrl_rollout.stepping import EnvStep, batch_where

__all__ = ["BOOTSTRAP", "Transition", "ReplayBuffer", "check_sizes", "discount_mask", "make_replay_buffer", "transitions"]

BOOTSTRAP = ("time_limits", "done")
"""The values of an algorithm's `bootstrap` option (see the module docstring)."""


class Transition(NamedTuple):
    """One stored transition (leaves [N, ...] for a batch of N).

    Attributes:
      obs: the observation acted on.
      action: the action taken.
      reward: float32 reward.
      next_obs: the next observation; the true final observation where the
        episode ended (never the reset observation).
      terminated: bool, the env reached a terminal state.
      truncated: bool, the env hit a time limit (it may also be set where
        `terminated` is).
    """

    obs: Any
    action: Any
    reward: jax.Array
    next_obs: Any
    terminated: jax.Array
    truncated: jax.Array


class ReplayBuffer(NamedTuple):
    """The pure functions of a replay buffer (`make_replay_buffer`).

    Attributes:
      init: `init(example: Transition) -> state`, from one transition
        (unbatched leaves) giving the stored shapes and dtypes.
      add: `add(state, batch: Transition) -> state`, a batch [N, ...] of
        transitions added in order, the oldest overwritten once full.
      sample: `sample(state, key) -> Transition` [batch_size, ...], drawn
        uniformly with replacement from the stored transitions.
      size: `size(state) -> int32`, the number of transitions stored.
      buffer_size, batch_size: the capacity and the sample size.
    """

    init: Any
    add: Any
    sample: Any
    size: Any
    buffer_size: int
    batch_size: int


def check_sizes(buffer_size: int, batch_size: int, num_envs: int | None = None) -> None:
    """Checks that a sample of `batch_size` and a vector step of `num_envs` fit a buffer of `buffer_size`.

    flashbax samples at most its capacity, and one vector step adds `num_envs`
    transitions at once, which must fit in it; the learners' configs call this
    so that a config that cannot run fails when it is made, naming its fields.

    Raises:
      ValueError: naming `batch_size` or `num_envs` and `buffer_size`.
    """
    if batch_size > buffer_size:
        raise ValueError(f"batch_size={batch_size} is more than buffer_size={buffer_size}: a replay sample is at most "
                         "the buffer's capacity; raise buffer_size or lower batch_size.")
    if num_envs is not None and num_envs > buffer_size:
        raise ValueError(f"num_envs={num_envs} is more than buffer_size={buffer_size}: one vector step adds num_envs "
                         "transitions, which must fit in the buffer; raise buffer_size or lower num_envs.")


def make_replay_buffer(buffer_size: int, batch_size: int) -> ReplayBuffer:
    """A flashbax item buffer of `buffer_size` transitions that samples `batch_size` of them.

    Args:
      buffer_size: the capacity, in transitions (a positive int).
      batch_size: how many transitions `sample` draws (a positive int).

    Returns:
      The `ReplayBuffer` functions, pure and jittable.

    Raises:
      ValueError: naming `buffer_size` or `batch_size` when it is not a
        positive int, or when batch_size > buffer_size.
    """
    for name, value in (("buffer_size", buffer_size), ("batch_size", batch_size)):
        if not _checks.is_int(value, numpy=False) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    check_sizes(buffer_size, batch_size)
    fb = fbx.make_item_buffer(max_length=buffer_size, min_length=1, sample_batch_size=batch_size, add_batches=True)

    def init(example: Transition):
        return fb.init(example)

    def add(state, batch: Transition):
        return fb.add(state, batch)

    def sample(state, key: jax.Array) -> Transition:
        # prng.fused: flashbax's draw from `key`, bit for bit, hashed in one kernel on CPU
        return fb.sample(state, prng.fused(key)).experience

    def size(state) -> jax.Array:
        return jnp.where(state.is_full, buffer_size, state.current_index).astype(jnp.int32)

    return ReplayBuffer(init, add, sample, size, buffer_size, batch_size)


def transitions(obs: Any, action: Any, step: EnvStep) -> Transition:
    """The transitions of one step of B envs, with the true final observation where an episode ended.

    Args:
      obs: the observations acted on, leaves [B, ...].
      action: the actions taken [B, ...].
      step: what `stepping.env_step` returned for them.

    Returns:
      A `Transition` [B, ...] whose `next_obs` is `step.final_obs` where
      `terminated | truncated` (the observation before the auto-reset) and
      `step.obs` elsewhere.
    """
    done = step.terminated | step.truncated
    next_obs = batch_where(done, step.final_obs, step.obs)
    return Transition(obs, action, step.reward, next_obs, step.terminated, step.truncated)


def discount_mask(terminated: jax.Array, truncated: jax.Array, bootstrap: str) -> jax.Array:
    """float32 1 where a target bootstraps from the next observation, 0 where it stops.

    Args:
      terminated, truncated: bool [N].
      bootstrap: "time_limits" (stop only at `terminated`; SB3's
        `handle_timeout_termination` and CleanRL) or "done" (stop at
        `terminated | truncated`; most JAX ports, SB3 with
        `handle_timeout_termination=False`; see the module docstring).

    Returns:
      float32 [N], the `(1 - done)` factor of `r + gamma * (1 - done) * max_a Q'(s', a)`.

    Raises:
      ValueError: naming `bootstrap` for any other value.
    """
    if bootstrap == "time_limits":
        stop = terminated
    elif bootstrap == "done":
        stop = terminated | truncated
    else:
        raise ValueError(f"bootstrap must be one of {', '.join(map(repr, BOOTSTRAP))}, got {bootstrap!r}.")
    return 1.0 - jnp.asarray(stop, jnp.float32)
