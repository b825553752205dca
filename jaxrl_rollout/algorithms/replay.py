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

import functools
from typing import Any, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks, prng
from jaxrl_rollout.collect import env_time_limit
from jaxrl_rollout.stepping import EnvStep, batch_where

__all__ = ["BOOTSTRAP", "EPISODE_STEPS_SIZED_FOR", "Transition", "ReplayBuffer", "CompactState", "FrameStackState",
           "check_frame_stack", "check_sizes", "discount_mask", "for_config", "make_compact_replay_buffer",
           "make_replay_buffer", "time_limit_of", "transitions"]

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
      ValueError: naming `batch_size` or `num_envs` and `buffer_size`, or
        `buffer_size` past 2**31 - 1 (the buffers' positions are int32).
    """
    if buffer_size > 2**31 - 1:  # (flashbax's indices overflowed: a traceback from inside the first add)
        raise ValueError(f"buffer_size={buffer_size} is more than 2,147,483,647 (2**31 - 1), the most transitions the "
                         "int32 positions of a replay buffer address; lower buffer_size.")
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


class FrameStackState(NamedTuple):
    """The state of the compact buffer with `frame_axis` given: its observation stream held as frames, each once.

    An observation is K = `num_frames` frames along `frame_axis`; frame
    position y of env b is at row y % F of `frames`, and the K frames of a
    stream position's observation are the K positions ending at its
    `frame_pos`. Within an episode each observation shares K - 1 frames
    with the one before and adds one frame; an observation that does not
    (an episode's first) adds all K.

    Attributes:
      frames: [F, B, *frame], the observation's shape without `frame_axis`.
      frame_pos: int32 [S, B], each stream position's newest frame (-1
        before anything was added).
      frame_head: int32 [B], each env's next frame position.
      frame_base: int32 [B], the frame head before the newest stream
        position was written: that observation stands until the next add,
        which writes its own over it where they differ (after a
        termination).
      obs_pos, action, reward, terminated, truncated, head, count, valid:
        as in `CompactState`.
    """

    frames: jax.Array
    frame_pos: jax.Array
    frame_head: jax.Array
    frame_base: jax.Array
    obs_pos: jax.Array
    action: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    head: jax.Array
    count: jax.Array
    valid: jax.Array


EPISODE_STEPS_SIZED_FOR = 32
"""The shortest mean episode length the frame ring of `make_compact_replay_buffer(..., frame_axis=...)` holds
every transition for: each episode's first observation takes K frames rather than one."""


def check_frame_stack(frame_axis: Any, obs_space: Any, *, name: str = "frame_axis") -> int:
    """The number of frames K of `obs_space`'s observations along `frame_axis`, checked.

    Args:
      frame_axis: an int axis of one observation (negative from the end).
      obs_space: the env's observation space (or anything with a `shape`).
      name: the argument to name in an error (a config's `frame_stack_axis`).

    Raises:
      ValueError: naming `name` when the observation is not one array of
        at least 2 axes (a frame and the axis stacking it), the axis is not
        an int or out of range, or the axis holds fewer than 2 frames.
    """
    shape = getattr(obs_space, "shape", None)
    shape = tuple(int(n) for n in shape) if isinstance(shape, (tuple, list)) else None
    if not _checks.is_int(frame_axis, numpy=False):
        raise ValueError(f"{name} must be an int axis of the observation (e.g. -1 for [84, 84, 4] frame stacks), "
                         f"got {frame_axis!r}.")
    if shape is None or len(shape) < 2:
        raise ValueError(f"{name}={frame_axis} needs observations of stacked frames, at least 2-D: the observation "
                         f"space {type(obs_space).__name__} has shape {shape}.")
    if not -len(shape) <= frame_axis < len(shape):
        raise ValueError(f"{name}={frame_axis} is not an axis of the observation of shape {shape}.")
    k = int(shape[frame_axis])
    if k < 2:
        raise ValueError(f"{name}={frame_axis}: the observation of shape {shape} has {k} frame along it; frames are "
                         "shared between consecutive stacks of at least 2.")
    return k


def time_limit_of(env: Any, env_params: Any) -> int | None:
    """The env's time limit as a Python int (`env_params.max_steps_in_episode`, else
    `env.max_steps_in_episode(env_params)`), or None where it has none or it is not a concrete number."""
    try:
        bound = int(env_time_limit(env, env_params))
    except (TypeError, jax.errors.ConcretizationTypeError):
        return None
    return bound if bound > 0 else None


def make_compact_replay_buffer(buffer_size: int, batch_size: int, num_envs: int,
                               max_episode_steps: int | None = None, *, frame_axis: int | None = None,
                               num_frames: int | None = None) -> ReplayBuffer:
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

    Frame stacks (`frame_axis` and `num_frames` given: observations of
    K = num_frames frames along frame_axis, as Atari's [84, 84, 4]): the
    stream is held as frames (`FrameStackState`), and an observation whose
    first K - 1 frames are the last K - 1 of the one before (bit for bit)
    adds only its newest frame, so a transition takes about one frame
    rather than one observation (a quarter for Atari's stacks). An
    observation that does not (an episode's first, however the stack was
    padded at the reset) adds all K. The frame ring holds
    F = S + (K - 1) * (max(E, L // 32, 1) + 1) frames, enough for episodes
    of 32 steps or more on average (shorter ones push the oldest
    transitions out, as above; `size` counts what is left). What is
    sampled is what was added, bit for bit: sharing is decided by
    comparing the frames, never assumed. The samples are the compact
    buffer's without frames (the same draws), as long as no transition is
    pushed out. Frame positions are int32: an env adds at most 2K a step, so
    a run's steps per env must stay under 2**31 / 2K (268 million for K = 4).

    Args:
      buffer_size: the capacity, in transitions (a positive int, at least
        num_envs).
      batch_size: how many transitions `sample` draws.
      num_envs: B, the transitions of one `add` (one vector step).
      max_episode_steps: the env's time limit (`time_limit_of`), or None.
      frame_axis: the axis of an observation (one array) along which it
        stacks frames, or None (no frame sharing).
      num_frames: K, the observation's size along frame_axis (at least 2;
        `check_frame_stack` gives it from the observation space); given with
        frame_axis only.

    Returns:
      The `ReplayBuffer` functions, pure and jittable; `add` takes exactly B
      transitions at a time, one per env, in the same env order each time.

    Raises:
      ValueError: naming the argument that is not a positive int, or when
        batch_size or num_envs is more than buffer_size; naming frame_axis
        or num_frames when one is given without the other or is not an
        int, and `init` when the example's observation does not have K
        frames along frame_axis.
    """
    for name, value in (("buffer_size", buffer_size), ("batch_size", batch_size), ("num_envs", num_envs)):
        if not _checks.is_int(value, numpy=False) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if max_episode_steps is not None and (not _checks.is_int(max_episode_steps, numpy=False) or max_episode_steps <= 0):
        raise ValueError(f"max_episode_steps must be a positive int or None, got {max_episode_steps!r}.")
    if (frame_axis is None) != (num_frames is None):
        raise ValueError(f"frame_axis and num_frames are given together or not at all, got frame_axis={frame_axis!r} "
                         f"and num_frames={num_frames!r}.")
    if frame_axis is not None:
        if not _checks.is_int(frame_axis, numpy=False):
            raise ValueError(f"frame_axis must be an int, got {frame_axis!r}.")
        if not _checks.is_int(num_frames, numpy=False) or num_frames < 2:
            raise ValueError(f"num_frames must be an int >= 2 (the frames along frame_axis), got {num_frames!r}.")
    check_sizes(buffer_size, batch_size, num_envs)
    B = num_envs
    L = buffer_size // B
    extra = L // 16 if max_episode_steps is None else -(-(L - 1) // max_episode_steps)
    S = L + 1 + max(extra, 1)  # one slot for a final observation at least
    if frame_axis is not None:
        return _frame_stack_buffer(L, S, B, batch_size, frame_axis, num_frames,
                                   max(extra, L // EPISODE_STEPS_SIZED_FOR, 1))
    cols = jnp.arange(B)

    def init(example: Transition) -> CompactState:
        zeros = jnp.zeros(B, jnp.int32)
        return CompactState(jax.tree.map(lambda x: _rows(S, B, x), example.obs), *_transition_rows(example, L, B),
                            zeros, jnp.int32(0), zeros)

    def add(state: CompactState, batch: Transition) -> CompactState:
        _check_one_per_env(batch, B)
        q = state.head
        obs = jax.tree.map(lambda s, o: s.at[q % S, cols].set(o), state.obs, batch.obs)
        # the next observation too: the next add overwrites it with the same one (or, after a termination, the
        # next episode's first), except after a truncation, whose final observation stays in the stream
        obs = jax.tree.map(lambda s, o: s.at[(q + 1) % S, cols].set(o), obs, batch.next_obs)
        keep = jnp.asarray(batch.truncated, bool) & ~jnp.asarray(batch.terminated, bool)
        written = _write_row(state, batch, q, L)
        obs_pos, count = written[0], state.count + 1
        top = q + 1  # each env's newest stream position
        valid = jnp.minimum(state.valid + 1, L)
        for _ in range(2):  # the stream moves on by at most 2 a step, so at most 2 transitions leave it
            oldest = obs_pos[(count - valid) % L, cols]
            valid = jnp.where((valid > 0) & (oldest < top - S + 1), valid - 1, valid)
        return CompactState(obs, *written, q + 1 + keep.astype(jnp.int32), count, valid)

    def sample(state: CompactState, key: jax.Array) -> Transition:
        row, env, x = _draw(state, key, batch_size, B, L)
        return Transition(jax.tree.map(lambda s: s[x % S, env], state.obs),
                          jax.tree.map(lambda s: s[row, env], state.action), state.reward[row, env],
                          jax.tree.map(lambda s: s[(x + 1) % S, env], state.obs), state.terminated[row, env],
                          state.truncated[row, env])

    return ReplayBuffer(init, add, sample, _held, B * L, batch_size)


def _rows(n: int, B: int, x: Any) -> jax.Array:
    """Zeros [n, B, *x.shape] of x's dtype."""
    x = jnp.asarray(x)
    return jnp.zeros((n, B, *x.shape), x.dtype)


def _transition_rows(example: Transition, L: int, B: int) -> tuple:
    """The compact states' empty rows of L transitions of B envs: (obs_pos, action, reward, terminated,
    truncated), in their fields' order."""
    return (jnp.zeros((L, B), jnp.int32), jax.tree.map(lambda x: _rows(L, B, x), example.action),
            _rows(L, B, jnp.float32(0)), _rows(L, B, jnp.bool_(False)), _rows(L, B, jnp.bool_(False)))


def _write_row(state: CompactState | FrameStackState, batch: Transition, q: jax.Array, L: int) -> tuple:
    """`_transition_rows` with row `state.count % L` set to `batch`, whose observations are at stream position q."""
    row = state.count % L
    return (state.obs_pos.at[row].set(q), jax.tree.map(lambda s, a: s.at[row].set(a), state.action, batch.action),
            state.reward.at[row].set(batch.reward), state.terminated.at[row].set(batch.terminated),
            state.truncated.at[row].set(batch.truncated))


def _draw(state: CompactState | FrameStackState, key: jax.Array, batch_size: int, B: int, L: int) -> tuple:
    """(row, env, x) [batch_size] of transitions drawn uniformly with replacement over each env's `valid` newest,
    x their observation's stream position."""
    ends = jnp.cumsum(state.valid)
    u = jax.random.randint(prng.fused(key), (batch_size,), 0, jnp.maximum(ends[-1], 1))
    env = jnp.minimum(jnp.searchsorted(ends, u, side="right"), B - 1)
    back = u - (ends - state.valid)[env]  # 0: the env's newest transition
    row = (state.count - 1 - back) % L
    return row, env, state.obs_pos[row, env]


def _held(state: CompactState | FrameStackState) -> jax.Array:
    """The compact buffers' `size`: the transitions that can be sampled."""
    return jnp.sum(state.valid).astype(jnp.int32)


def _check_one_per_env(batch: Transition, B: int) -> None:
    sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(batch)}
    if sizes != {B}:
        raise ValueError(f"a compact replay buffer of num_envs={B} adds one transition per env at a time: "
                         f"expected leaves [{B}, ...], got leading sizes {sorted(sizes, key=str)}.")


def _bits(x: jax.Array) -> jax.Array:
    """`x` as unsigned ints of its width where it is floating point, so that equality is bit equality
    (-0.0 and 0.0 differ, a NaN equals itself)."""
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{8 * x.dtype.itemsize}"))
    return x


def _equal(a: jax.Array, b: jax.Array) -> jax.Array:
    """bool [N]: a[n] and b[n] ([N, ...]) are the same bits."""
    return jnp.all((_bits(a) == _bits(b)).reshape(a.shape[0], -1), axis=1)


def _frame_stack_buffer(L: int, S: int, B: int, batch_size: int, frame_axis: int, K: int,
                        episodes: int) -> ReplayBuffer:
    """`make_compact_replay_buffer` with its stream held as frames (`FrameStackState`)."""
    # the oldest observation's K - 1 earlier frames, and K - 1 more for each episode's first; 2K: an add writes up
    # to two whole stacks
    F = max(S + (K - 1) * (episodes + 1), 2 * K)
    cols = jnp.arange(B)
    offsets = jnp.arange(K)

    def axis_of(ndim: int) -> int:  # frame_axis in an unbatched observation of ndim axes
        return frame_axis % ndim

    def packs(dtype, ndim: int) -> int | None:
        """The width in bits of the unsigned word that holds the K frames' values of one element, where the frames
        are along an observation's last axis and that word is 16 or 32 bits, else None. (Such an observation's K
        values of an element sit side by side in memory: gathering the frames and moving their axis last, a byte
        shuffle, took twice the compact buffer's sample of Atari's stacks on a CPU; shifts and ors of words do not.
        An add's two observations are few bytes: moving their axis was faster there than unpacking words.)"""
        bits = 8 * K * jnp.dtype(dtype).itemsize
        return bits if axis_of(ndim) == ndim - 1 and bits in (16, 32) else None

    def to_frames(obs: jax.Array) -> jax.Array:  # [N, *obs] -> [N, K, *frame]
        return jnp.moveaxis(obs, 1 + axis_of(obs.ndim - 1), 1)

    def from_frames(parts: list, ndim: int) -> jax.Array:  # K of [N, *frame] -> [N, *obs]
        dtype = parts[0].dtype
        bits = packs(dtype, ndim)
        if bits is None:
            return jnp.stack(parts, axis=1 + axis_of(ndim))
        width, word = 8 * dtype.itemsize, jnp.dtype(f"uint{bits}")
        words = [jax.lax.bitcast_convert_type(part, jnp.dtype(f"uint{width}")).astype(word) << (width * k)
                 for k, part in enumerate(parts)]
        return jax.lax.bitcast_convert_type(functools.reduce(jnp.bitwise_or, words), dtype)

    def stack(frames: jax.Array, last: jax.Array, env: jax.Array) -> jax.Array:  # [N, K, *frame]
        return frames[(last[:, None] - (K - 1) + offsets) % F, env[:, None]]

    def init(example: Transition) -> FrameStackState:
        leaves = jax.tree.leaves(example.obs)
        if len(leaves) != 1 or leaves[0] is not example.obs:
            raise ValueError(f"frame_axis={frame_axis}: frames are shared between observations that are one array, "
                             f"got a {type(example.obs).__name__} of {len(leaves)} arrays.")
        obs = jnp.asarray(example.obs)
        check_frame_stack(frame_axis, obs, name="frame_axis")
        if obs.shape[frame_axis] != K:
            raise ValueError(f"num_frames={K}, but the observation of shape {obs.shape} has {obs.shape[frame_axis]} "
                             f"frames along frame_axis={frame_axis}.")
        frame = jnp.moveaxis(obs, axis_of(obs.ndim), 0)[0]
        zeros = jnp.zeros(B, jnp.int32)
        return FrameStackState(_rows(F, B, frame), jnp.full((S, B), -1, jnp.int32), zeros, zeros,
                               *_transition_rows(example, L, B), zeros, jnp.int32(0), zeros)

    def push(frames, frame_pos, position, head, new, n):
        """Writes the stack `new` [B, K, ...] as stream position `position`, its newest frame at head + n - 1
        (n = 0: it is the stack already there, 1: its first K - 1 frames are the K - 1 before head, K: none of
        it is); returns (frames, frame_pos, head + n)."""
        last = head + n - 1
        frames = frames.at[(last[:, None] - (K - 1) + offsets) % F, cols[:, None]].set(new)
        return frames, frame_pos.at[position % S, cols].set(last), head + n

    def add(state: FrameStackState, batch: Transition) -> FrameStackState:
        _check_one_per_env(batch, B)
        obs, following = to_frames(jnp.asarray(batch.obs)), to_frames(jnp.asarray(batch.next_obs))
        if obs.shape[1] != K or following.shape[1] != K:
            raise ValueError(f"num_frames={K}, but the batch's observations have {obs.shape[1]} frames along "
                             f"frame_axis={frame_axis}.")
        q = state.head
        # position q holds the last add's next observation: this add's observation, unless an episode ended there
        there = state.frame_pos[q % S, cols]
        same = (there == state.frame_head - 1) & _equal(stack(state.frames, there, cols), obs)
        head = jnp.where(same, state.frame_head, state.frame_base)
        follows = _equal(stack(state.frames, head - 1, cols)[:, 1:], obs[:, :-1])  # of position q - 1's stack
        frames, frame_pos, head = push(state.frames, state.frame_pos, q, head, obs,
                                       jnp.where(same, 0, jnp.where(follows, 1, K)))
        base = head
        frames, frame_pos, head = push(frames, frame_pos, q + 1, head, following,
                                       jnp.where(_equal(obs[:, 1:], following[:, :-1]), 1, K))
        keep = jnp.asarray(batch.truncated, bool) & ~jnp.asarray(batch.terminated, bool)
        written = _write_row(state, batch, q, L)
        obs_pos, count = written[0], state.count + 1
        top = q + 1
        valid = jnp.minimum(state.valid + 1, L)
        # the oldest transitions leave when their observation left the stream (it moves on by at most 2 a step)
        # or their first frame the ring (at most 2K a step; each transition starts at least a frame after the one
        # before), so at most 2K leave in an add, the oldest ones first
        age = jnp.arange(2 * K)[:, None]
        x = obs_pos[(count - valid + age) % L, cols]
        gone = (x < top - S + 1) | (frame_pos[x % S, cols] - (K - 1) < head - F)
        valid = valid - jnp.sum((age < valid) & gone, axis=0, dtype=jnp.int32)
        return FrameStackState(frames, frame_pos, head, jnp.where(keep, head, base), *written,
                               q + 1 + keep.astype(jnp.int32), count, valid)

    def sample(state: FrameStackState, key: jax.Array) -> Transition:
        row, env, x = _draw(state, key, batch_size, B, L)

        def observation(position):
            last = state.frame_pos[position % S, env]
            return from_frames([state.frames[(last - (K - 1) + k) % F, env] for k in range(K)], state.frames.ndim - 1)

        return Transition(observation(x), jax.tree.map(lambda s: s[row, env], state.action), state.reward[row, env],
                          observation(x + 1), state.terminated[row, env], state.truncated[row, env])

    return ReplayBuffer(init, add, sample, _held, B * L, batch_size)


def for_config(config: Any, env: Any, env_params: Any) -> ReplayBuffer:
    """The buffer of a learner's config: `make_compact_replay_buffer` sized for `env`'s time limit when
    `config.optimize_memory_usage` (sharing frames along `config.frame_stack_axis` where it is given), else
    `make_replay_buffer` (`buffer_size`, `batch_size`, `num_envs`).

    Raises:
      ValueError: naming `frame_stack_axis` when the env's observations have no frames to share along it, or
        when the run's steps per env could outgrow the buffer's int32 frame positions.
    """
    if not config.optimize_memory_usage:
        return make_replay_buffer(config.buffer_size, config.batch_size)
    axis = getattr(config, "frame_stack_axis", None)
    frames = None
    if axis is not None:
        frames = check_frame_stack(axis, env.observation_space(env_params), name="frame_stack_axis")
        if 2 * frames * config.num_iterations > 2**31 - 1:
            raise ValueError(f"frame_stack_axis={axis}: {config.num_iterations:,} steps per env (total_timesteps // "
                             f"num_envs) could outgrow the int32 frame positions (at most 2 * {frames} frames a step, "
                             f"under 2**31); raise num_envs or lower total_timesteps.")
    return make_compact_replay_buffer(config.buffer_size, config.batch_size, config.num_envs,
                                      time_limit_of(env, env_params), frame_axis=axis, num_frames=frames)
