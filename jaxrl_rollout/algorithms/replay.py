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
from jaxrl_rollout.collect import env_time_limit
from jaxrl_rollout.stepping import EnvStep, batch_where

__all__ = ["BOOTSTRAP", "Transition", "ReplayBuffer", "CompactState", "check_sizes", "discount_mask",
           "for_config", "make_compact_replay_buffer", "make_replay_buffer", "time_limit_of", "transitions"]

BOOTSTRAP = ("time_limits", "done")
"""The values of an algorithm's `bootstrap` option (see the module docstring)."""


class Transition(NamedTuple):
    """One stored transition (leaves [N, ...] for a batch of N).

    Attributes:
      obs: the observation acted on.
      action: the action taken.
      reward: float32 reward.
      next_obs: the next observation; the true final observation where the
        episode ended (never the reset observation; except, from the compact
        buffer, at a termination, where no target reads it).
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


class CompactState(NamedTuple):
    """The state of `make_compact_replay_buffer`'s buffer, L = buffer_size // num_envs rows of B envs.

    Attributes:
      obs: the observation stream, leaves [S, B, ...]: for each env, the
        observations in the order it met them, with a truncated episode's
        final observation after its last one; position x of env b is at
        row x % S.
      obs_pos: int32 [L, B], the stream position of each transition's
        observation (its next observation is at obs_pos + 1).
      action, reward, terminated, truncated: [L, B, ...], as in `Transition`.
      head: int32 [B], each env's next stream position.
      count: int32, the vector steps added so far (row `count % L` is next).
      valid: int32 [B], how many of each env's latest transitions can be
        sampled (both their observations still in the stream).
    """

    obs: Any
    obs_pos: jax.Array
    action: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    head: jax.Array
    count: jax.Array
    valid: jax.Array


def time_limit_of(env: Any, env_params: Any) -> int | None:
    """The env's time limit as a Python int (`env_params.max_steps_in_episode`, else
    `env.max_steps_in_episode(env_params)`), or None where it has none or it is not a concrete number."""
    try:
        bound = int(env_time_limit(env, env_params))
    except (TypeError, jax.errors.ConcretizationTypeError):
        return None
    return bound if bound > 0 else None


def make_compact_replay_buffer(buffer_size: int, batch_size: int, num_envs: int,
                               max_episode_steps: int | None = None) -> ReplayBuffer:
    """A replay buffer that stores each observation once (SB3's `optimize_memory_usage`, with time limits kept).

    The full buffer (`make_replay_buffer`) stores `obs` and `next_obs` of
    every transition. This one keeps, for each of the B envs, the stream of
    observations it met: a transition's next observation is the following
    one, which is what its env acted on next, except where an episode
    ended. Where a time limit cut the episode (`truncated` and not
    `terminated`), the true final observation is put in the stream after
    the transition's own, so a target bootstraps from it as with the full
    buffer. SB3's `optimize_memory_usage` has no such slot, and refuses
    `handle_timeout_termination` with it.

    What it gives up:
      - at a termination, a sampled `next_obs` is the next episode's first
        observation, not the final one. Every target stops there (under
        either `bootstrap`), so no loss reads it; read `next_obs` yourself
        only where `terminated` is False.
      - the capacity is L = buffer_size // num_envs transitions per env
        (SB3's rounding), B * L in all.
      - the stream holds S = L + 1 + E observations per env, E for the
        final observations of truncated episodes: E = ceil((L - 1) /
        max_episode_steps) when the env's time limit is given, which is
        every truncation such an env can make within L steps, else
        max(1, L // 16). When more episodes are truncated than that within
        the last L steps, the oldest transitions, whose observations the
        stream no longer holds, are not sampled (`size` counts the ones that
        can be).
      - sampling is uniform with replacement over those transitions, as the
        full buffer's, but not the same draws: runs with and without it
        differ.

    Memory, leaves [B] per env and step: about (1 + 1/max_episode_steps)
    observations and an int32 position per transition, against 2
    observations.

    Args:
      buffer_size: the capacity, in transitions (a positive int, at least
        num_envs).
      batch_size: how many transitions `sample` draws.
      num_envs: B, the transitions of one `add` (one vector step).
      max_episode_steps: the env's time limit (`time_limit_of`), or None.

    Returns:
      The `ReplayBuffer` functions, pure and jittable; `add` takes exactly B
      transitions at a time, one per env, in the same env order each time.

    Raises:
      ValueError: naming the argument that is not a positive int, or when
        batch_size or num_envs is more than buffer_size.
    """
    for name, value in (("buffer_size", buffer_size), ("batch_size", batch_size), ("num_envs", num_envs)):
        if not _checks.is_int(value, numpy=False) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if max_episode_steps is not None and (not _checks.is_int(max_episode_steps, numpy=False) or max_episode_steps <= 0):
        raise ValueError(f"max_episode_steps must be a positive int or None, got {max_episode_steps!r}.")
    check_sizes(buffer_size, batch_size, num_envs)
    B = num_envs
    L = buffer_size // B
    extra = L // 16 if max_episode_steps is None else -(-(L - 1) // max_episode_steps)
    S = L + 1 + max(extra, 1)  # one slot for a final observation at least
    cols = jnp.arange(B)

    def init(example: Transition) -> CompactState:
        def rows(n, x):
            x = jnp.asarray(x)
            return jnp.zeros((n, B, *x.shape), x.dtype)

        zeros = jnp.zeros(B, jnp.int32)
        return CompactState(jax.tree.map(lambda x: rows(S, x), example.obs), jnp.zeros((L, B), jnp.int32),
                            jax.tree.map(lambda x: rows(L, x), example.action), rows(L, jnp.float32(0)),
                            rows(L, jnp.bool_(False)), rows(L, jnp.bool_(False)), zeros, jnp.int32(0), zeros)

    def add(state: CompactState, batch: Transition) -> CompactState:
        sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(batch)}
        if sizes != {B}:
            raise ValueError(f"a compact replay buffer of num_envs={B} adds one transition per env at a time: "
                             f"expected leaves [{B}, ...], got leading sizes {sorted(sizes, key=str)}.")
        q = state.head
        obs = jax.tree.map(lambda s, o: s.at[q % S, cols].set(o), state.obs, batch.obs)
        # the next observation too: the next add overwrites it with the same one (or, after a termination, the
        # next episode's first), except after a truncation, whose final observation stays in the stream
        obs = jax.tree.map(lambda s, o: s.at[(q + 1) % S, cols].set(o), obs, batch.next_obs)
        keep = jnp.asarray(batch.truncated, bool) & ~jnp.asarray(batch.terminated, bool)
        row = state.count % L
        count = state.count + 1
        obs_pos = state.obs_pos.at[row].set(q)
        top = q + 1  # each env's newest stream position
        valid = jnp.minimum(state.valid + 1, L)
        for _ in range(2):  # the stream moves on by at most 2 a step, so at most 2 transitions leave it
            oldest = obs_pos[(count - valid) % L, cols]
            valid = jnp.where((valid > 0) & (oldest < top - S + 1), valid - 1, valid)
        return CompactState(
            obs, obs_pos, jax.tree.map(lambda s, a: s.at[row].set(a), state.action, batch.action),
            state.reward.at[row].set(batch.reward), state.terminated.at[row].set(batch.terminated),
            state.truncated.at[row].set(batch.truncated), q + 1 + keep.astype(jnp.int32), count, valid)

    def sample(state: CompactState, key: jax.Array) -> Transition:
        ends = jnp.cumsum(state.valid)
        u = jax.random.randint(prng.fused(key), (batch_size,), 0, jnp.maximum(ends[-1], 1))
        env = jnp.minimum(jnp.searchsorted(ends, u, side="right"), B - 1)
        back = u - (ends - state.valid)[env]  # 0: the env's newest transition
        row = (state.count - 1 - back) % L
        x = state.obs_pos[row, env]
        return Transition(jax.tree.map(lambda s: s[x % S, env], state.obs),
                          jax.tree.map(lambda s: s[row, env], state.action), state.reward[row, env],
                          jax.tree.map(lambda s: s[(x + 1) % S, env], state.obs), state.terminated[row, env],
                          state.truncated[row, env])

    def size(state: CompactState) -> jax.Array:
        return jnp.sum(state.valid).astype(jnp.int32)

    return ReplayBuffer(init, add, sample, size, B * L, batch_size)


def for_config(config: Any, env: Any, env_params: Any) -> ReplayBuffer:
    """The buffer of a learner's config: `make_compact_replay_buffer` sized for `env`'s time limit when
    `config.optimize_memory_usage`, else `make_replay_buffer` (`buffer_size`, `batch_size`, `num_envs`)."""
    if config.optimize_memory_usage:
        return make_compact_replay_buffer(config.buffer_size, config.batch_size, config.num_envs,
                                          time_limit_of(env, env_params))
    return make_replay_buffer(config.buffer_size, config.batch_size)
