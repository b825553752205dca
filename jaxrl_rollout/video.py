"""Videos of evaluation episodes: record the env states in jit, draw them on the host, encode them as mp4 or GIF.

Three steps, each usable on its own:

1. `record_episodes(env, env_params, policy_fn, params, key, num_episodes)`
   runs whole episodes as `jaxrl_rollout.evaluate` does (the same keys, so
   the same episodes and returns) and also keeps every step's env state, in
   an `EpisodeRecording` with leaves [T, N, ...]. It is pure and jittable;
   nothing is drawn inside jit.
2. `render_frames(env, env_params, states)` draws one episode's states
   [T, ...] (`episode_states(recording, i)`) as uint8 frames [T, H, W, 3]
   with the env's render hook (below).
3. `write_video(path, frames, fps)` encodes them as mp4 with imageio-ffmpeg's
   ffmpeg, or as a gif (Pillow) for a ".gif" name or where ffmpeg is
   unavailable; other extensions are refused. It writes a temporary file
   next to `path` and renames it into place when complete, so a failure or a
   Ctrl-C leaves no partial video, and a symlink at `path` is replaced, not
   followed. `gif_bytes(frames)` gives a gif's bytes (TensorBoard's Images
   tab plays them). A gif keeps each frame's colours exactly when it has at
   most 256.

`write_episode_videos(folder, env, env_params, policy_fn, params_per_run,
keys, runs)` does all three for the runs a selector such as "best,worst,0,3"
picks (`select_runs`), one video per run, the episode's return in the file
name (`seed3_return-154.2.mp4`, after an optional `prefix`) and, with the
step, on the frames.
`html(paths, captions)` plays videos inline, side by side, in a notebook.
`TrainingVideos` is a `runner.train` hook (`on_state`) that does the same
for the current policies every N updates of a training run (`train
--video-every`), handing each clip to the loggers' `log_video`.

Render hooks. A hook is `render_fn(env, env_params, states) -> uint8
[T, H, W, 3]` (`RenderFn`), with `states` an episode's states, leaves
[T, ...]. `find_renderer(env)` picks one, first match wins:

1. a hook registered for the env's class or a base class
   (`register_renderer(env_type, render_fn)`);
2. the env's own `render(state, params) -> uint8 [H, W, 3]` method, called
   for one state at a time: a user's env plugs in by providing it (a
   matplotlib figure, or gymnax's `(fig, ax)`, is drawn on an Agg canvas:
   gymnax's Catch, Pong, Rooms, PointRobot and MetaMaze render so);
3. the built-in hook of its suite: gymnax classic control (CartPole-v1,
   Pendulum-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0, drawn
   by gymnasium's classic-control renderer) and MinAtar, brax (MuJoCo's
   renderer on a headless EGL; `render_mujoco` for any MuJoCo model),
   jumanji, pgx (SVG rasterised by cairosvg), craftax, xminigrid and navix
   (see `jaxrl_rollout._render_suites`);
4. otherwise, for a wrapper, the same search on the env it wraps.

Wrappers. A wrapper is an env with the wrapped env in its `env` (or `_env`)
attribute, as `jaxrl_rollout.envs.ClipAction`, gymnax's wrappers and
PureJaxRL's `LogWrapper` have. Its state is either the wrapped env's own
(ClipAction) or a record holding it in an `env_state` field (LogWrapper's
`LogEnvState`); which one is told by tracing the wrapped env's `reset`
(`jax.eval_shape`, nothing runs). The suite adapters in
`jaxrl_rollout.envs` are matched before this, so their own `env`/`_env` (the
raw suite env, whose state the adapter's state holds: `BraxState.brax_state`,
`JumanjiState.env_state`, `PgxState.game`; craftax, xminigrid and navix
states are the suite's own) is reached by each suite's hook.

A suite that cannot render, and any other env without a hook, gets a
one-line ValueError naming it. Host envs keep their state in the host
process, so there are no recorded states to draw: a gymnasium env draws
itself instead, while its episode is played from Python with `evaluate`'s
own step (`collect.evaluation_step`), one jitted call at a time, in an env
made with `render_mode="rgb_array"` (`GymnasiumEnv.drawing`);
`write_episode_videos` and `TrainingVideos` do this for a host env (the
same episodes and returns as `evaluate`), while
`record_episodes`/`render_frames` cannot. envpool
cannot draw at all. A machine without OpenGL gets a one-line RuntimeError
from the brax/MuJoCo hook saying what is needed.

The `video` extra (`pip install 'jaxrl-rollout[video]'`) installs imageio,
imageio-ffmpeg, pygame (gymnax classic control) and cairosvg (pgx); a
missing one gives an ImportError naming the extra, from `check_recordable`
(and `write_episode_videos`, `TrainingVideos`) before anything runs.
Importing this module imports neither them nor any suite.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, _extras, _render_suites, checkpoint, collect, prng, stepping
from jaxrl_rollout._warnings import user_stacklevel
from jaxrl_rollout.types import PyTree

__all__ = [
    "EpisodeRecording",
    "EpisodeVideo",
    "RenderFn",
    "TrainingVideos",
    "episode_states",
    "find_renderer",
    "gif_bytes",
    "html",
    "record_episodes",
    "register_renderer",
    "render_frames",
    "render_mujoco",
    "select_runs",
    "video_name",
    "write_episode_videos",
    "write_video",
]

RenderFn = Callable[[Any, Any, PyTree], np.ndarray]
"""`render_fn(env, env_params, states [T, ...]) -> uint8 [T, H, W, 3]`, run on the host."""

render_mujoco = _render_suites.render_mujoco

_EXTRA_HINT = "pip install 'jaxrl-rollout[video]'"
VIDEO_KEY_TAG = 0x76696465  # "vide": `train --video-every` keys are fold_in(run key, VIDEO_KEY_TAG), apart from training's
_REGISTERED: dict[type, RenderFn] = {}
# Wrappers nest rarely more than a few deep; a cycle of `.env` attributes must not loop forever.
_MAX_WRAPPER_DEPTH = 32


class EpisodeRecording(NamedTuple):
    """The episodes of `record_episodes`, every step's env state kept.

    Attributes:
      states: the env states, leaves [T, N, ...]: `states[t, i]` is the state
        episode i's policy acted on at step t, for t < lengths[i] (later rows
        are not part of the episode). T is `max_steps`.
      rewards: [T, N] float32, the reward of step t (0 after the episode).
      returns: [N] float32 undiscounted returns, as `evaluate` gives them.
      lengths: [N] int32 steps of each episode.
      completed: [N] bool, the episode ended within `max_steps`.
    """

    states: PyTree
    rewards: jax.Array
    returns: jax.Array
    lengths: jax.Array
    completed: jax.Array


class EpisodeVideo(NamedTuple):
    """One video `write_episode_videos` wrote.

    Attributes:
      run: the run's index in `params_per_run`.
      path: the file written (.mp4, or .gif without ffmpeg).
      episode_return: the episode's undiscounted return.
      length: the episode's steps (the video's frames).
    """

    run: int
    path: Path
    episode_return: float
    length: int


def _episode_bound(env: Any, env_params: Any, max_steps: int | None) -> int:
    """`max_steps`, or the env's own time limit as `evaluate` finds it (`collect.episode_limit`), as an int."""
    return int(collect.episode_limit(env, env_params, max_steps, "the recording"))


def record_episodes(
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params: PyTree,
    key: jax.Array,
    num_episodes: int = 1,
    max_steps: int | None = None,
    *,
    initial_carry: PyTree | None = None,
) -> EpisodeRecording:
    """Runs `num_episodes` whole episodes and keeps every step's env state, for drawing outside jit.

    The episodes are `evaluate`'s for the same arguments: the same resets,
    keys and steps, so `returns`, `lengths` and `completed` equal
    `evaluate(env, env_params, policy_fn, params, key, num_episodes,
    max_steps, initial_carry=...)`'s. A `lax.while_loop` stops once every
    episode is done; the states go into a buffer of `max_steps` rows, so
    memory is max_steps x N x one env state (bound `max_steps` for envs with
    large states or long time limits, craftax for one: full Craftax's
    100,000 steps of 273 kB are 27 GB an episode). `write_episode_videos`
    records its episodes 256 steps at a time instead, the same steps.

    The states are the ones the policy acted on, s_0 ... s_{L-1}: the state
    an episode ended in is not among them (an env with a `step` of its own
    replaces it by the next episode's first state within the step; for the
    others, `write_episode_videos` draws it last, from the loop's state).

    For deterministic evaluation pass a policy that acts with the mode of its
    action distribution (`categorical_policy(apply_fn, deterministic=True)`,
    an algorithm's `eval_policy_fn`).

    Args:
      env: gymnax>=1.0.1 environment (static).
      env_params: env params, or None for `env.default_params`.
      policy_fn: feedforward or recurrent policy, as in `rollout` (static).
      params: policy parameters.
      key: PRNG key for resets, actions and env transitions.
      num_episodes: N, a positive Python int (one env per episode).
      max_steps: T, the most steps to run and record; None uses the env's
        time limit, as `evaluate` does.
      initial_carry: recurrent carry with leaves [N, ...], None otherwise.

    Returns:
      An `EpisodeRecording` with states [T, N, ...], rewards [T, N] and
      per-episode returns, lengths and completed flags [N].

    Raises:
      ValueError, TypeError: as `evaluate` (bad sizes, no time limit, an env
        or policy that breaks its protocol).
    """
    _checks.check_key(key, "record_episodes' key", "it splits the one key over the num_episodes episodes itself")
    num_episodes = _checks.check_positive_int("num_episodes", num_episodes)
    env_params = stepping.resolve_params(env, env_params)
    max_steps = _episode_bound(env, env_params, max_steps)
    state = collect.rollout_init(key, env, env_params, num_episodes, initial_carry)
    step = collect.evaluation_step(env, env_params, policy_fn, params, num_episodes)
    active = jnp.ones((num_episodes,), dtype=bool)
    state, active, _, states, rewards = _recorded_steps(step, state, active, jnp.int32(0), max_steps, max_steps)
    return EpisodeRecording(
        states=states,
        rewards=rewards,
        returns=state.episode_return,
        lengths=state.episode_length,
        completed=~active,
    )


def episode_states(recording: EpisodeRecording, episode: int = 0) -> PyTree:
    """Episode `episode`'s states [L, ...] (L its length) as numpy arrays on the host.

    Args:
      recording: from `record_episodes` (jax or numpy leaves).
      episode: the episode's index i in [0, N).

    Returns:
      The pytree `recording.states[:lengths[i], i]`.
    """
    length = int(np.asarray(recording.lengths)[episode])
    return _to_host(jax.tree.map(lambda x: x[:length, episode], recording.states))


def _to_host(tree: PyTree) -> PyTree:
    """Leaves as numpy arrays, except PRNG keys (numpy has no key dtype), which stay jax arrays."""
    return jax.tree.map(lambda x: x if prng.is_key(x) else np.asarray(x), tree)


# ---- render hooks ----


def register_renderer(env_type: type, render_fn: RenderFn | None) -> RenderFn | None:
    """Makes `render_fn` draw the envs of class `env_type` (and of its subclasses).

    A registered hook comes before the env's own `render` method and the
    built-in suite hooks, so it also overrides those.

    Args:
      env_type: the env class.
      render_fn: `render_fn(env, env_params, states [T, ...]) -> uint8
        [T, H, W, 3]`, called on the host with one episode's states; None
        removes the class's hook.

    Returns:
      The hook registered for `env_type` before, or None.
    """
    if not isinstance(env_type, type):
        raise TypeError(f"env_type must be a class, got {env_type!r}.")
    if render_fn is not None and not callable(render_fn):
        raise TypeError(f"render_fn must be callable (env, env_params, states) -> frames, got {render_fn!r}.")
    previous = _REGISTERED.pop(env_type, None)
    if render_fn is not None:
        _REGISTERED[env_type] = render_fn
    return previous


def _render_method(env: Any, env_params: Any, states: PyTree) -> np.ndarray:
    """The env's own `render(state, params)`, one state at a time: an array [H, W, 3], or a matplotlib figure."""
    length = int(np.shape(jax.tree.leaves(states)[0])[0])
    return np.stack([_as_frame(env.render(jax.tree.map(lambda x: x[t], states), env_params)) for t in range(length)])


def _as_frame(drawn: Any) -> np.ndarray:
    """A frame from what a `render` method returned: an array, or a matplotlib figure (gymnax's `(fig, ax)`,
    an artist of one), drawn on an Agg canvas and closed."""
    first = drawn[0] if isinstance(drawn, tuple) and drawn else drawn
    if not type(first).__module__.startswith("matplotlib"):
        return np.asarray(drawn)
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = first if hasattr(first, "savefig") else first.figure
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    frame = np.array(canvas.buffer_rgba())[..., :3]
    plt.close(figure)
    return frame


def _own_hook(env: Any) -> RenderFn | None:
    """The hook for `env` itself, wrappers not looked through: registered, `render` method or built-in."""
    for cls in type(env).__mro__:
        if cls in _REGISTERED:
            return _REGISTERED[cls]
    if callable(getattr(env, "render", None)):
        return _render_method
    return _render_suites.builtin_for(type(env))


def _wrapped(env: Any) -> Any:
    """The env a wrapper wraps (its `env` or `_env` attribute, if that is an env), else None."""
    for attr in ("env", "_env"):
        inner = getattr(env, attr, None)
        if inner is not None and callable(getattr(inner, "step", None)) and callable(getattr(inner, "reset", None)):
            return inner
    return None


def _inner_states(inner: Any, env_params: Any, states: PyTree) -> PyTree:
    """The wrapped env's states [T, ...] inside a wrapper's: the states themselves, or their `env_state` field."""
    if not hasattr(states, "env_state"):
        return states
    try:
        inner_state = jax.eval_shape(inner.reset, jax.random.key(0), env_params)[1]
    except Exception:  # noqa: BLE001 -- a reset that cannot be traced here: trust the field name
        return states.env_state
    if jax.tree.structure(inner_state) == jax.tree.structure(states):
        return states
    return states.env_state


def _name(env: Any) -> str:
    name = getattr(env, "name", None)
    return name if isinstance(name, str) else type(env).__name__


def find_renderer(env: Any) -> Callable[[Any, PyTree], np.ndarray]:
    """The function that draws `env`'s states, wrappers looked through (see the module docstring).

    Args:
      env: the env that produced the states (static), wrapped or not.

    Returns:
      `draw(env_params, states [T, ...]) -> uint8 [T, H, W, 3]`.

    Raises:
      ValueError: no hook is found for the env or anything it wraps (the
        message names the env), or it is a host env (whose recorded states
        hold nothing to draw; `write_episode_videos` draws a gymnasium env
        while playing it).
    """
    chain = [env]
    hook = _own_hook(env)
    while hook is None and len(chain) < _MAX_WRAPPER_DEPTH:
        inner = _wrapped(chain[-1])
        if inner is None:
            break
        chain.append(inner)
        hook = _own_hook(inner)
    if hook is None:
        wrapped = f" (wrapping {', '.join(_name(e) for e in chain[1:])})" if len(chain) > 1 else ""
        raise ValueError(
            f"cannot render {_name(env)}{wrapped}: no video renderer for {type(chain[-1]).__name__}; built-in ones "
            "cover gymnax classic control and MinAtar, brax, jumanji, pgx, craftax, xminigrid and navix. Give the env "
            "a render(state, params) -> uint8 [H, W, 3] method or register one with jaxrl_rollout.video.register_renderer."
        )
    if hook is _render_suites.refuse_host:
        hook(chain[-1], None, None)

    def draw(env_params: Any, states: PyTree) -> np.ndarray:
        params = env_params
        for inner in chain[1:]:
            states = _inner_states(inner, params, states)
        target = chain[-1]
        if params is None:
            params = getattr(target, "default_params", None)
        return _check_frames(hook(target, params, states), _name(env), int(np.shape(jax.tree.leaves(states)[0])[0]))

    # the built-in hooks and `render` methods (stacked here) give a new array at every call, which a video may draw
    # its label on; a registered hook's array might be one its owner keeps
    draw.new_frames = not any(hook is registered for registered in _REGISTERED.values())
    # they also draw each state on its own, so an episode may be drawn a block of states at a time; a registered
    # hook is given the whole episode (it may draw one state with another in view)
    draw.per_state = draw.new_frames
    draw.hook, draw.target = hook, chain[-1]
    return draw


def render_frames(env: Any, env_params: Any, states: PyTree) -> np.ndarray:
    """Draws one episode's env states as RGB frames, on the host.

    Args:
      env: the env that produced the states, wrapped or not (static).
      env_params: its params (None for its default params).
      states: the states, leaves [T, ...] (e.g. `episode_states(recording, i)`).

    Returns:
      uint8 [T, H, W, 3].

    Raises:
      ValueError: `env` has no render hook (one line naming it; see
        `find_renderer`), or the hook's frames are not [T, H, W, 3].
      RuntimeError: brax/MuJoCo without an OpenGL context (says what is
        needed).
      ImportError: a package the suite's drawing needs is missing (names the
        `video` extra).
    """
    return find_renderer(env)(env_params, _to_host(states))


def _check_frames(frames: Any, name: str, length: int | None = None, contiguous: bool = True) -> np.ndarray:
    """Frames as uint8 [T, H, W, 3] (RGBA loses its alpha), or a ValueError naming what is wrong.

    With `contiguous=False` a strided view of uint8 frames (e.g. every other
    pixel) is returned as it is, not copied whole.
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] not in (3, 4) or (length is not None and frames.shape[0] != length):
        want = f"[{length if length is not None else 'T'}, H, W, 3]"
        raise ValueError(f"the frames of {name} must be uint8 {want} (RGB), got shape {frames.shape}.")
    if frames.dtype != np.uint8:
        if np.issubdtype(frames.dtype, np.floating) and frames.size and frames.max() <= 1.0:
            frames = frames * 255.0
        frames = np.clip(np.rint(frames), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(frames[..., :3]) if contiguous else frames[..., :3]


# ---- encoding ----


def _imageio() -> Any:
    """imageio's v3 API, or an ImportError naming the `video` extra."""
    try:
        import imageio.v3 as iio
    except ImportError as err:
        raise _extras.missing("writing videos", "video", f"imageio could not be imported: {err}") from err
    return iio


def check_recordable(env: Any) -> None:
    """Checks, without running anything, that episodes of `env` can be drawn and written to video files.

    Besides the render hook and imageio, the packages a built-in hook draws
    with are imported: pygame for gymnax classic control, cairosvg (and the
    cairo library) for pgx. So a missing one fails here, before a training
    run or an evaluation, not at the first video. (An OpenGL context for
    brax/MuJoCo is only made when drawing.)

    Raises:
      ValueError: `env` has no render hook (see `find_renderer`).
      ImportError: the `video` extra (imageio, pygame, cairosvg) is missing, naming the install command.
    """
    if _drawing_host(env) is not None:
        _imageio()
        return
    _recordable(env)


def _drawing_host(env: Any) -> Any:
    """The host env that `env` is or wraps, checked to draw itself (`GymnasiumEnv.check_drawable`), or an
    `_ObservationFrames` for one that cannot draw but sees images (envpool's Atari), or None for a JAX env; a host
    env with neither (envpool's CartPole) is a one-line ValueError."""
    from jaxrl_rollout.envs._host import host_env

    host = host_env(env)
    if host is None:
        return None
    if not hasattr(host, "check_drawable"):
        space = host.observation_space(host.default_params)
        if not _ObservationFrames.fits(space):
            _render_suites.refuse_host(host, None, None)
        return _ObservationFrames(host.name, space)
    host.check_drawable()
    return host


class _ObservationFrames:
    """Frames of a host env that cannot draw (envpool renders nothing) but whose observation is an image: each frame
    is the observation the policy acts on, as the agent sees it: its newest plane (the last channel of a frame stack
    such as Atari's [84, 84, 4], envpool's oldest-to-newest order) in grey, or its RGB, enlarged by a whole factor
    to at least `MIN_SIDE` pixels a side (Atari's 84 x 84 to 336 x 336). The `_HostEpisodeWriter` passes it the
    observation (`frame(obs)`); there is no env to open for drawing."""

    MIN_SIDE = 256

    def __init__(self, name: str, space: Any):
        self.name = name
        self._scale = -(-self.MIN_SIDE // min(space.shape[:2]))

    @staticmethod
    def fits(space: Any) -> bool:
        """Whether `space` is a pixel image [H, W, C] (uint8, bounds 0 and 255; `is_pixel_space`) to draw from."""
        from jaxrl_rollout.algorithms._common import is_pixel_space

        return is_pixel_space(space) and len(space.shape) == 3

    def drawing(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def frame(self, obs: np.ndarray) -> np.ndarray:
        """[H * k, W * k, 3] uint8 of one observation [H, W, C]."""
        image = obs if obs.shape[-1] == 3 else np.repeat(obs[..., -1:], 3, axis=-1)
        return np.repeat(np.repeat(image, self._scale, axis=0), self._scale, axis=1)


def _recordable(env: Any) -> Callable[[Any, PyTree], np.ndarray]:
    """`find_renderer(env)` once the packages it draws with and imageio are checked (`check_recordable`)."""
    draw = find_renderer(env)
    for hook, needs in _HOOK_NEEDS:  # by identity: a registered hook need not be hashable
        if draw.hook is hook:
            needs(draw.target)
    _imageio()
    return draw


# The packages of the `video` extra that a built-in hook imports when it draws, checked before anything runs.
_HOOK_NEEDS = ((_render_suites.render_gymnax_classic, lambda env: _render_suites.import_pygame(_name(env))),
               (_render_suites.render_pgx, lambda env: _render_suites.import_cairosvg()))


def _ffmpeg() -> str | None:
    """Why mp4 cannot be written (imageio-ffmpeg or its ffmpeg binary missing), or None when it can."""
    try:
        import imageio_ffmpeg
    except ImportError as err:
        return f"imageio-ffmpeg could not be imported ({err})"
    try:
        imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError as err:
        return f"no ffmpeg binary ({err})"
    return None


def _padded(frames: Iterable[np.ndarray], multiple: int, size: tuple[int, int] | None = None) -> Iterator[np.ndarray]:
    """Each frame extended at the bottom and right (edge pixels repeated) to sizes divisible by `multiple`, for H.264.

    One frame at a time, in one buffer reused for every frame (each is consumed
    before the next is made): a padded copy of a whole episode, hundreds of
    megabytes, would cost more in fresh memory than the encoder does.
    `frames` is an array [T, H, W, 3], or frames [H, W, 3] of one `size` (H, W).
    """
    height, width = frames.shape[1:3] if size is None else size
    pad_h, pad_w = -height % multiple, -width % multiple
    if not (pad_h or pad_w):
        yield from frames
        return
    buffer = np.empty((height + pad_h, width + pad_w, 3), np.uint8)
    for frame in frames:
        buffer[:height, :width] = frame
        buffer[:height, width:] = frame[:, -1:]
        buffer[height:] = buffer[height - 1 : height]
        yield buffer


# The kinds of file `write_video` writes, by the name's extension (matched without case).
_SUFFIXES = (".mp4", ".gif")
# H.264's quality: libx264's own default, CRF 23, which the videos had when this module wrote through imageio (it
# passed ffmpeg no quality).
_CRF = 23


def write_video(path: str | Path, frames: Any, fps: float = 30) -> Path:
    """Encodes frames as an mp4 (H.264, with imageio-ffmpeg's ffmpeg) or a gif, atomically, as the name's extension says.

    `frames` is one array [T, H, W, 3], or an iterable of such arrays (blocks
    of consecutive frames, all of one H and W), which an mp4 is encoded from
    as they come: an episode drawn a block at a time never has all its frames
    in memory at once (`write_episode_videos` writes so). A gif needs them
    all, and joins the blocks first.

    The extension picks the format: ".mp4" or ".gif" (any case); another
    one, or none, is refused (a ValueError), since ffmpeg would write an mp4
    under a name that says otherwise, or nothing. Without ffmpeg an ".mp4"
    name becomes the same name with ".gif" (a warning says why). Frames are
    extended (edge pixels repeated) to sizes divisible by 16 for the mp4
    encoder.

    The video is written to a temporary file in the same folder
    (".<name>.<random>.tmp") and renamed onto `path` once it is complete
    (`checkpoint.write_atomic`, as the run's other files), so `path` holds
    the previous file or the whole new video, never part of one: an error or
    a Ctrl-C midway removes the temporary file. (A process killed outright,
    by SIGKILL or an unhandled SIGTERM, cannot clean up: it may leave the
    hidden ".tmp" file, never a partial `path`.)
    A symlink at `path` is replaced by the video, never followed.

    Args:
      path: the file to write (its folder must exist).
      frames: uint8 [T, H, W, 3] (see `render_frames`), or an iterable of
        such blocks.
      fps: frames per second.

    Returns:
      The path written.

    Raises:
      ImportError: imageio is missing (names `pip install 'jaxrl-rollout[video]'`).
      ValueError: frames that are not [T, H, W, 3], no frames, a bad fps, or
        a name that does not end in .mp4 or .gif.
      OSError: the file cannot be written (`path` is a folder, its folder is
        missing or not writable, ffmpeg failed, a full disk): one line naming
        `path` and why; nothing is left under `path` or the temporary name.
    """
    _imageio()
    blocks = _blocks_of(frames)
    frames = next(blocks, None)  # the first non-empty block: the video's size, and its format's checks
    if frames is None:
        raise ValueError("write_video needs at least one frame, got none.")
    if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}.")
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        has = f"ends in {path.suffix!r}" if path.suffix else "has no extension"
        raise ValueError(f"cannot write the video {path}: its name {has}; write_video writes .mp4 (H.264) and .gif "
                         "files, chosen by the extension.")
    if suffix == ".mp4":
        missing = _ffmpeg()
        if missing is not None:
            warnings.warn(f"writing a gif instead of {path.name}: {missing}; {_EXTRA_HINT} installs ffmpeg.",
                          stacklevel=user_stacklevel())
            path, suffix = path.with_suffix(".gif"), ".gif"
    _refuse_folder(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write the video {path}: its folder {path.parent} "
                                f"{'is not a folder' if path.parent.exists() else 'does not exist'}.")
    try:
        if suffix == ".mp4":
            checkpoint.write_atomic(path.parent, path.name, lambda temporary: _encode_mp4(
                temporary, _frames_of(frames, blocks), frames.shape[1:3], fps, path), to_path=True)
        else:
            rest = list(blocks)
            whole = np.concatenate([frames, *rest]) if rest else frames
            checkpoint.write_atomic(path.parent, path.name, lambda file: _write_gif(file, whole, fps))
    except OSError as error:
        if error.errno is None:  # ffmpeg's failure: one line naming `path` already
            raise
        # a full disk, a folder that appeared at `path`, a folder not writable: one line naming `path`
        raise OSError(f"cannot write the video {path}: {error.strerror or error}.") from error
    return path


def _blocks_of(frames: Any) -> Iterator[np.ndarray]:
    """`write_video`'s frames as checked uint8 blocks [t, H, W, 3] (t >= 1), all of the first's H and W.

    One array (or a list of frames [H, W, 3]) is one block; another iterable
    is read lazily, each block checked as it comes (a block of another size
    is a ValueError then).
    """
    if hasattr(frames, "shape") or (isinstance(frames, (list, tuple)) and frames and np.ndim(frames[0]) == 3):
        frames = _check_frames(frames, "write_video")
        return iter([frames] if frames.shape[0] else [])
    if not isinstance(frames, Iterable):
        raise ValueError(f"frames must be uint8 [T, H, W, 3] or an iterable of such blocks, got {type(frames).__name__}.")

    def checked():
        size = None
        for block in frames:
            block = _check_frames(block, "write_video")
            if size is not None and block.shape[1:] != size:
                raise ValueError(f"write_video's blocks of frames must all be [t, H, W, 3] of one H and W, got "
                                 f"{block.shape} after {size}.")
            size = block.shape[1:]
            if block.shape[0]:
                yield block

    return checked()


def _frames_of(first: np.ndarray, rest: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """The frames [H, W, 3] of `first` and then of every block in `rest`, one at a time."""
    yield from first
    for block in rest:
        yield from block


def _encode_mp4(target: Path, frames: Iterable[np.ndarray], size: tuple[int, int], fps: float, shown: Path) -> None:
    """Frames [H, W, 3] uint8 of one `size` (H, W) as an H.264 mp4 at `target`, by ffmpeg; an OSError naming
    `shown` if ffmpeg fails.

    ffmpeg (imageio-ffmpeg's binary) reads the padded frames on its stdin, as
    imageio's ffmpeg writer runs it, but its exit status is checked (imageio
    returned success when ffmpeg had failed) and its messages are kept to
    report the first error in one line. It runs in a session of its own, so
    a Ctrl-C reaches this process only, which then kills it.
    """
    import subprocess
    import tempfile
    from fractions import Fraction

    import imageio_ffmpeg

    height, width = (-(-n // 16) * 16 for n in size)
    command = [
        imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-v", "error", "-f", "rawvideo", "-vcodec", "rawvideo",
        "-s", f"{width}x{height}", "-pix_fmt", "rgb24", "-r", str(Fraction(fps).limit_denominator()), "-i", "-",
        "-an", "-vcodec", "libx264", "-pix_fmt", "yuv420p", "-crf", str(_CRF), "-f", "mp4", str(target),
    ]
    with tempfile.TemporaryFile() as log, warnings.catch_warnings():
        # JAX warns at every fork; ffmpeg's is a fork-exec, with no JAX code in the child
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        try:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
                                       start_new_session=True)
        except OSError as error:
            raise OSError(f"cannot write the video {shown}: ffmpeg could not start ({error.strerror or error}).") \
                from error
        try:
            try:
                for frame in _padded(frames, 16, size):
                    process.stdin.write(np.ascontiguousarray(frame).data)
                process.stdin.close()
            except BrokenPipeError:  # ffmpeg stopped reading: its status and messages say why
                pass
            status = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            try:
                process.stdin.close()
            except OSError:
                pass
        if status != 0:
            log.seek(0)
            reason = _ffmpeg_reason(log.read(), status).replace(str(target), str(shown))
            raise OSError(f"cannot write the video {shown}: ffmpeg failed ({reason}).")


def _ffmpeg_reason(messages: bytes, status: int) -> str:
    """ffmpeg's first error line, without its "[muxer @ 0x...]" prefix, or its exit status."""
    import re

    for line in messages.decode("utf-8", "replace").splitlines():
        line = re.sub(r"^\[[^\]]*\]\s*", "", line.strip())
        if line:
            return line[:300]
    return f"exit status {status}"


def gif_bytes(frames: Any, fps: float = 30) -> bytes:
    """Frames [T, H, W, 3] uint8 as the bytes of an animated GIF that loops (see `_write_gif`).

    The frames may be a strided view (e.g. `frames[:, ::2, ::2]`); they are
    read one at a time, without a copy of the whole.
    """
    frames = _check_frames(frames, "frames", contiguous=False)
    if frames.shape[0] == 0:
        raise ValueError("gif_bytes needs at least one frame, got none.")
    buffer = io.BytesIO()
    _write_gif(buffer, frames, fps)
    return buffer.getvalue()


def _paletted(frame: np.ndarray, lut: np.ndarray) -> Any:
    """One RGB frame [H, W, 3] of at most 256 colours as a Pillow "P" image with exactly those colours; else None.

    The frame's colours become its palette (GIF's local colour table), its
    pixels mapped through `lut`, a scratch table indexed by 24-bit colour
    (2**24 uint8, reused across frames). The exact mapping is several times
    cheaper than Pillow's median cut (BENCHMARKS.md section 10).
    """
    from PIL import Image

    image = Image.fromarray(frame)
    colours = image.getcolors(256)
    if colours is None:
        return None
    palette = np.asarray([colour for _, colour in colours], np.uint8).reshape(-1, 3)
    lut[_colour_codes(palette)] = np.arange(len(palette), dtype=np.uint8)
    paletted = Image.fromarray(lut[_colour_codes(frame)])  # mode "L", made "P" by its palette
    paletted.putpalette(palette.tobytes())
    return paletted


class _EpisodePalette:
    """256 colours for the frames of an episode that have more, and each pixel's nearest of them.

    The palette is Pillow's median cut, run once on a mosaic of up to
    `SAMPLED` frames spread over the episode (every other pixel of each),
    instead of once per frame. Each frame's pixels then take their nearest
    palette colour (squared RGB distance, no dithering), computed once per
    distinct colour of the episode and kept in a table indexed by 24-bit
    colour, so that a later frame looks its pixels up. Shaded 3-D frames
    (MuJoCo's) repeat most of their colours from frame to frame.
    """

    SAMPLED = 16
    CHUNK = 4096  # distinct colours per distance computation ([CHUNK, 256] int32)

    def __init__(self, frames: np.ndarray):
        from PIL import Image

        count = frames.shape[0]
        picks = np.unique(np.linspace(0, count - 1, min(count, self.SAMPLED)).round().astype(int))
        mosaic = np.concatenate([np.asarray(frames[i, ::2, ::2]) for i in picks])
        quantised = Image.fromarray(np.ascontiguousarray(mosaic)).quantize(256)
        used = max(index for _, index in quantised.getcolors(256)) + 1
        self.palette = np.asarray(quantised.getpalette()[:3 * used], np.uint8).reshape(-1, 3)
        self._colours = self.palette.astype(np.int32)
        self._index = np.zeros(1 << 24, np.uint8)
        self._known = np.zeros(1 << 24, bool)

    def image(self, frame: np.ndarray) -> Any:
        """The frame [H, W, 3] as a Pillow "P" image on the episode's palette."""
        from PIL import Image

        codes = _colour_codes(frame)
        new = codes[~self._known[codes]]
        if new.size:
            new = np.unique(new)
            for start in range(0, new.size, self.CHUNK):
                chunk = new[start:start + self.CHUNK]
                rgb = np.stack([chunk >> 16, (chunk >> 8) & 255, chunk & 255], axis=-1)
                distance = ((rgb[:, None, :] - self._colours[None, :, :]) ** 2).sum(-1)
                self._index[chunk] = np.argmin(distance, axis=1).astype(np.uint8)
            self._known[new] = True
        paletted = Image.fromarray(self._index[codes])
        paletted.putpalette(self.palette.tobytes())
        return paletted


def _colour_codes(rgb: np.ndarray) -> np.ndarray:
    """24-bit codes r * 65536 + g * 256 + b of uint8 [..., 3] colours."""
    rgb = rgb.astype(np.int32)
    return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


def _write_gif(file: Any, frames: np.ndarray, fps: float) -> None:
    """Frames [T, H, W, 3] uint8 (T >= 1) as a looping animated GIF written to an open binary file.

    A frame of at most 256 colours keeps them exactly (`_paletted`); the
    episode's frames of more share one palette (`_EpisodePalette`).
    """
    lut = np.zeros(1 << 24, np.uint8)  # pages are touched only where a frame's colours fall
    shared = None
    images = []
    for frame in frames:
        image = _paletted(frame, lut)
        if image is None:
            shared = _EpisodePalette(frames) if shared is None else shared
            image = shared.image(frame)
        images.append(image)
    images[0].save(file, format="GIF", save_all=True, append_images=images[1:], duration=1000.0 / fps, loop=0)


def html(paths: str | Path | Sequence[str | Path], captions: Sequence[str] | None = None, width: int = 320) -> str:
    """HTML that plays videos inline, side by side, each with its caption: for notebooks.

    The files are embedded (base64), so the page needs no file next to it:
    `IPython.display.display(IPython.display.HTML(video.html(paths)))` plays
    them in Jupyter and Colab. An mp4 (or webm) becomes a looping `<video>`, a gif an `<img>`.

    Args:
      paths: one video file or a sequence of them (.mp4, .webm or .gif).
      captions: one caption per video (default: the file names).
      width: each video's width in pixels.

    Raises:
      ValueError: a file of another kind, or captions of another count.
      FileNotFoundError: a missing file.
    """
    import base64
    import html as html_text

    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    captions = [p.name for p in paths] if captions is None else [str(c) for c in captions]
    if len(captions) != len(paths):
        raise ValueError(f"captions must give one caption per video ({len(paths)}), got {len(captions)}.")
    kinds = {".mp4": "video/mp4", ".webm": "video/webm", ".gif": "image/gif"}
    cells = []
    for path, caption in zip(paths, captions):
        kind = kinds.get(path.suffix.lower())
        if kind is None:
            raise ValueError(f"{path.name}: html() plays .mp4, .webm and .gif files, not {path.suffix or 'this'}.")
        data = f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
        player = (f'<img src="{data}" width="{int(width)}">' if kind == "image/gif" else
                  f'<video width="{int(width)}" controls autoplay loop muted playsinline src="{data}"></video>')
        cells.append(f'<figure style="display:inline-block;margin:4px;text-align:center">{player}'
                     f'<figcaption>{html_text.escape(caption)}</figcaption></figure>')
    return "<div>" + "".join(cells) + "</div>"


def video_name(name: str, episode_return: float, suffix: str = ".mp4") -> str:
    """The file name of a video: "<name>_return<return>.mp4", e.g. "seed3_return-154.2.mp4"."""
    return f"{name}_return{float(episode_return):.1f}{suffix}"


def _label(frames: np.ndarray, texts: Sequence[str], *, in_place: bool = False, widest: str | None = None) -> np.ndarray:
    """Frames with one label each, white on a black band at the top left.

    The font's size is a twentieth of the frame's height (at least 10
    pixels). A label wider than the frame is broken into lines at its double
    spaces ("run0  update 40" / "t=12  return=3.0"), as few as fit, and a part
    still too wide alone is drawn smaller (down to 8 pixels), so the label is
    not cut at the frame's right edge. `widest`: a label as wide as any of an
    episode's (`_widest_label`), with as many parts as each of `texts`; the
    lines and the font are then chosen for it and every label is broken at
    the same places, so that a label does not move between frames as its
    step and return gain digits. With `in_place`, `frames` itself is
    drawn on and returned: a copy of a whole episode's frames costs more in
    fresh memory than the text does.
    """
    from PIL import Image, ImageDraw

    out = frames if in_place else frames.copy()
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    size = max(10, frames.shape[1] // 20)
    layout = None if widest is None else _layout(measure, widest, size, frames.shape[2])
    for t, text in enumerate(texts):
        lines, font = _broken(text, *(layout or _layout(measure, text, size, frames.shape[2])))
        left, top, right, bottom = measure.multiline_textbbox((2, 2), lines, font=font)
        if layout is not None and right + 2 > frames.shape[2]:  # wider than `widest` after all: its own lines
            lines, font = _fitted(measure, text, size, frames.shape[2])
            left, top, right, bottom = measure.multiline_textbbox((2, 2), lines, font=font)
        # only the rows the band covers are drawn on (a strip of the frame, not the whole of it)
        rows = min(frames.shape[1], int(math.ceil(bottom)) + 3)
        image = Image.fromarray(out[t, :rows])
        draw = ImageDraw.Draw(image)
        draw.rectangle((0, 0, right + 2, bottom + 2), fill=(0, 0, 0))
        draw.multiline_text((2, 2), lines, fill=(255, 255, 255), font=font)
        out[t, :rows] = np.asarray(image)
    return out


def _frame_label(label: str, t: int, episode_return: Any) -> str:
    """A video frame's label: "<label>  t=<step>  return=<return so far, one decimal>"."""
    return f"{label}  t={t}  return={float(episode_return):.1f}"


@functools.lru_cache(maxsize=8)
def _font(size: int) -> Any:
    """Pillow's default font at `size` pixels (Pillow < 10.1 has one bitmap size)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:
        return ImageFont.load_default()


def _fitted(measure: Any, text: str, size: int, width: int) -> tuple[str, Any]:
    """(`text`, with line breaks where it is wider than `width` pixels, and the font to draw it with) for `_label`
    (`_layout`'s lines)."""
    return _broken(text, *_layout(measure, text, size, width))


def _layout(measure: Any, text: str, size: int, width: int) -> tuple[tuple[int, ...], Any]:
    """(the number of `text`'s parts, between double spaces, on each of its lines; the font) for `_label`: the parts
    are put on as few lines as fit in `width` pixels at `size`, and a part that does not fit alone shrinks the font
    for the whole label, down to 8 pixels (then it is cut at the edge)."""
    font = _font(size)

    def fits(line: str, font: Any) -> bool:
        return measure.textbbox((2, 2), line, font=font)[2] + 2 <= width

    parts = text.split("  ")
    if fits(text, font):
        return (len(parts),), font
    while size > 8 and not all(fits(part, font) for part in parts):
        size = max(8, int(size * 0.85))
        font = _font(size)
    lines = [[parts[0]]]
    for part in parts[1:]:
        if fits("  ".join([*lines[-1], part]), font):
            lines[-1].append(part)
        else:
            lines.append([part])
    return tuple(len(line) for line in lines), font


def _broken(text: str, counts: tuple[int, ...], font: Any) -> tuple[str, Any]:
    """(`text` with its parts, between double spaces, put `counts[i]` on line i (the last line takes any parts left
    over), `font`)."""
    parts, lines, start = text.split("  "), [], 0
    for i, count in enumerate(counts):
        stop = len(parts) if i == len(counts) - 1 else start + count
        lines.append("  ".join(parts[start:stop]))
        start = stop
    return "\n".join(line for line in lines if line), font


WIDEST_RETURN = -8_888.8
"""The return `_widest_label` lays out an episode's labels for: as wide as any return of up to 4 digits before the
point (a wider one, such as a long brax episode's, gets lines of its own where its label no longer fits)."""


def _widest_label(label: str, max_steps: int) -> str:
    """A label as wide as any of an episode of at most `max_steps` steps (its step and a return of up to 4 digits,
    `WIDEST_RETURN`), for `_label`'s `widest`."""
    return _frame_label(label, int("8" * len(str(max_steps))), WIDEST_RETURN)


# ---- runs ----


def select_runs(selector: str | Sequence[str | int], num_runs: int, returns: Any = None) -> list[int]:
    """Parses a run selector such as "best,worst,0,3" into run indices.

    Tokens: "all" (every run), "best" / "worst" (the run with the highest /
    lowest `returns`, the first on a tie) and run indices in [0, num_runs).
    The indices come in the order given, each once.

    Args:
      selector: a comma-separated string, a sequence of tokens and ints, or one int.
      num_runs: R, the number of runs.
      returns: [R] one return per run; needed only for "best" and "worst".

    Returns:
      The selected run indices.

    Raises:
      ValueError: an empty selector, an unknown token, an index out of
        range, or "best"/"worst" without returns (one line naming it).
    """
    num_runs = _checks.check_positive_int("num_runs", num_runs)
    if isinstance(selector, (int, np.integer)) and not isinstance(selector, (bool, np.bool_)):
        selector = [int(selector)]  # one run index (it was "'int' object is not iterable")
    if isinstance(selector, (bool, np.bool_)) or not isinstance(selector, (str, Iterable)):
        raise TypeError(f"a run selector is a string such as 'best,worst,0,3', a run index or a sequence of them, "
                        f"got {selector!r}.")
    tokens = selector.split(",") if isinstance(selector, str) else list(selector)
    tokens = [t.strip().lower() if isinstance(t, str) else t for t in tokens]
    if not tokens or all(t == "" for t in tokens):
        raise ValueError(f"empty run selector {selector!r}: it takes 'all', 'best', 'worst' or run indices "
                         f"0..{num_runs - 1}, comma-separated (e.g. 'best,worst,0,3').")
    if any(t == "" for t in tokens):
        raise ValueError(f"empty run in selector {selector!r}; use e.g. 'best,worst,0,3' or 'all'.")
    chosen: list[int] = []
    for token in tokens:
        if token == "all":
            picks = list(range(num_runs))
        elif token in ("best", "worst"):
            if returns is None:
                raise ValueError(f"selector {selector!r}: {token!r} needs the runs' returns.")
            values = np.asarray(returns, dtype=float).reshape(-1)
            if values.shape != (num_runs,):
                raise ValueError(f"returns must hold one value per run ({num_runs}), got shape {np.shape(returns)}.")
            picks = [int(np.argmax(values) if token == "best" else np.argmin(values))]
        else:
            try:
                index = int(token)
            except (TypeError, ValueError):
                raise ValueError(
                    f"unknown run {token!r} in selector {selector!r}; use 'all', 'best', 'worst' or run indices "
                    f"0..{num_runs - 1}, comma-separated."
                ) from None
            if isinstance(token, bool) or not 0 <= index < num_runs or (isinstance(token, float) and token != index):
                raise ValueError(f"run {token!r} in selector {selector!r} is not a run index in 0..{num_runs - 1}.")
            picks = [index]
        chosen.extend(p for p in picks if p not in chosen)
    return chosen


def write_episode_videos(
    folder: str | Path,
    env: Any,
    env_params: Any,
    policy_fn: Any,
    params_per_run: PyTree,
    keys: jax.Array,
    runs: str | int | Sequence[str | int] = "all",
    *,
    names: Sequence[str] | None = None,
    prefix: str = "",
    caption: str = "",
    max_steps: int | None = None,
    fps: float = 30,
    initial_carry: PyTree | None = None,
    label: bool = True,
    progress: Callable[[str], Any] | None = None,
) -> list[EpisodeVideo]:
    """Writes one video of one evaluation episode for each selected run.

    Run r's episode is `record_episodes(env, env_params, policy_fn,
    params_per_run[r], keys[r], 1, max_steps)`; "best" and "worst" in `runs`
    pick by that episode's return (computed first, for every run, with
    `evaluate`, which gives the same episodes). The renderer is found before
    anything runs, so an env that cannot render fails at once. An episode is
    recorded on the device `_EpisodeWriter.RECORD_BLOCK` (256) steps at a time
    (the same steps, not a buffer of its time limit's states), then drawn and
    encoded 64 states at a time (a registered hook is given it whole), so a
    long one never has all its frames in memory. A gymnasium
    env (a host env) is played from Python with `evaluate`'s steps instead,
    drawing itself before every step and after the last (see the module
    docstring): the same episode, frames encoded as they are drawn.

    Args:
      folder: where the videos go (created if missing).
      env: the env (static); env_params: its params, or None.
      policy_fn: the policy (static); pass a deterministic one for
        deterministic evaluation (an algorithm's `eval_policy_fn`).
      params_per_run: policy params with a leading runs axis R on every leaf.
      keys: [R] PRNG keys, one per run.
      runs: a selector, see `select_runs` ("all", "best,worst,0,3", a run
        index, a sequence of them, ...).
      names: R names for the files ("run<r>" by default, e.g. "seed3");
        the return is appended: "<prefix><name>_return<return>.mp4".
      prefix: put before each file name, to tell apart the videos of
        different calls in one folder (the command line's `evaluate --video`
        gives "update<U>_evalseed<S>_": the checkpoint's update and its
        --seed). A file of the same name is replaced (atomically, see
        `write_video`).
      caption: put after the run's name on the frames (e.g. "  update 976").
      max_steps: the most steps per episode (None: the env's time limit).
      fps: the videos' frames per second.
      initial_carry: a recurrent policy's carry for one episode, leaves
        [1, ...]; None for a feedforward policy.
      label: write the run's name, the step and the return so far on the
        frames.
      progress: called with one line (e.g. `print`) when a video has taken
        `PROGRESS_AFTER_S` (10) seconds to draw and encode, then every
        `PROGRESS_EVERY_S` (30): its frames done so far and the episode's
        most steps. None (the default) says nothing.

    Returns:
      One `EpisodeVideo` (run, path, episode_return, length) per selected
      run, in the selector's order.

    Raises:
      ValueError: the env cannot be rendered, a bad selector or names, or
        params and keys of different run counts.
      TypeError: `progress` neither None nor callable.
      ImportError: the `video` extra is missing (checked before anything runs).
      OSError: a video cannot be written (see `write_video`).
    """
    writer = _episode_writer(env, env_params, policy_fn, max_steps=max_steps, fps=fps,
                             initial_carry=initial_carry, label=label)
    return [v for v, _ in writer.write(folder, params_per_run, keys, runs, names=names, prefix=prefix, caption=caption,
                                       keep_frames=False, progress=progress)]


def _episode_writer(env: Any, env_params: Any, policy_fn: Any, **options: Any) -> _EpisodeWriter:
    """The writer of `env`'s episode videos: drawn from recorded states, or, for a host env, while played."""
    from jaxrl_rollout.envs._host import host_env

    writer = _EpisodeWriter if host_env(env) is None else _HostEpisodeWriter
    return writer(env, env_params, policy_fn, **options)


def _episode_returns(env: Any, env_params: Any, policy_fn: Any, max_steps: int | None,
                     initial_carry: PyTree | None) -> Callable:
    """`(params [R, ...], keys [R]) -> [R]` returns of each run's one evaluation episode (for "best"/"worst")."""
    return jax.jit(jax.vmap(lambda p, k: collect.evaluate(
        env, env_params, policy_fn, p, k, 1, max_steps, initial_carry=initial_carry
    ).returns[0]))


def _refuse_folder(path: Path) -> None:
    """The one-line error for a folder where a video is to be written (a symlink there is replaced, not followed)."""
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"cannot write the video {path}: a folder of that name is there.")


def _moved(path: Path, final: Path) -> Path:
    """A video written under a hidden name (`path`, its episode's return unknown until it ended) moved to its name
    `final`, replacing a file or a symlink there; a folder there is `write_video`'s one-line error, and the hidden
    file is removed."""
    try:
        _refuse_folder(final)
    except IsADirectoryError:
        path.unlink(missing_ok=True)
        raise
    path.replace(final)
    return final


def _recorded_steps(step: Callable, state: Any, active: jax.Array, t: jax.Array, block: int,
                    max_steps: int) -> tuple:
    """Up to `block` more steps of N episodes that have taken `t` steps, each step's env state kept: `(state,
    active, taken, states [block, N, ...], rewards [block, N])`, stopping once every episode is done or at
    `max_steps` steps in all. `step` is `collect.evaluation_step`'s; `record_episodes` takes one block of
    `max_steps`, the video writer blocks of `RECORD_BLOCK` from where the last one stopped (the same steps)."""
    # Filled with copies of the first state (not zeros): PRNG-key leaves have no zeros.
    states = jax.tree.map(lambda x: jnp.repeat(x[None], block, axis=0), state.env_state)
    rewards = jnp.zeros((block, active.shape[0]), jnp.float32)

    def cond(loop):
        _, active, i, _, _ = loop
        return jnp.any(active) & (i < block) & (t + i < max_steps)

    def body(loop):
        state, active, i, states, rewards = loop
        states = jax.tree.map(lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x, i, 0), states, state.env_state)
        state, active, reward = step(state, active)
        rewards = jax.lax.dynamic_update_index_in_dim(rewards, reward, i, 0)
        return state, active, i + 1, states, rewards

    return jax.lax.while_loop(cond, body, (state, active, jnp.int32(0), states, rewards))


PROGRESS_AFTER_S = 10.0
"""Seconds a video may take to draw and encode before `write`'s `progress` is told how far it is."""

PROGRESS_EVERY_S = 30.0
"""Seconds between `progress` lines after the first, while the same video is still being drawn."""


def _check_progress(progress: Any) -> Callable[[str], Any] | None:
    """`progress` itself, checked to be None or a callable (it is first called only 10 s into a video)."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking one line of text (e.g. print), got "
                        f"{type(progress).__name__}.")
    return progress


def _reported(blocks: Iterator[np.ndarray], progress: Callable[[str], Any], what: str,
              max_steps: int) -> Iterator[np.ndarray]:
    """`blocks` as they come; once they have taken `PROGRESS_AFTER_S` seconds (drawn, and encoded as the encoder
    takes them), then every `PROGRESS_EVERY_S`, `progress` is called with one line saying how many frames are done.

    Drawing is the slow part of a long episode's video: jumanji's viewer draws about 40 frames a second, so the
    4,000 steps an untrained Snake policy plays took 105 s per video, and `train --video-every` printed nothing
    meanwhile (2026-12-07).
    """
    start = time.monotonic()
    due, frames = start + PROGRESS_AFTER_S, 0
    for block in blocks:
        yield block
        frames += len(block)
        now = time.monotonic()
        if now >= due:
            progress(f"  {what}: {frames:,} frames drawn and encoded in {now - start:.0f} s, of an episode of at "
                     f"most {max_steps:,} steps")
            due = now + PROGRESS_EVERY_S


class _EpisodeWriter:
    """`write_episode_videos`' work, its jitted functions kept for repeated calls (`TrainingVideos`).

    The renderer is found and the extra checked when it is made, so an env
    that cannot render, or a missing extra, fails before anything runs.
    """

    def __init__(self, env: Any, env_params: Any, policy_fn: Any, *, max_steps: int | None = None, fps: float = 30,
                 initial_carry: PyTree | None = None, label: bool = True):
        self._draw = _recordable(env)  # a missing extra is reported before any episode runs
        self._env_params, self._fps, self._label = env_params, fps, label
        # the state an episode ended in, drawn last, where the env keeps it through the evaluation step
        self._final_frame = stepping.keeps_final_state(env)
        self._returns = _episode_returns(env, env_params, policy_fn, max_steps, initial_carry)
        env_params = stepping.resolve_params(env, env_params)
        self._start = jax.jit(lambda k: collect.rollout_init(k, env, env_params, 1, initial_carry))
        max_steps = self._max_steps = _episode_bound(env, env_params, max_steps)
        block = min(self.RECORD_BLOCK, max_steps)
        self._steps = jax.jit(lambda params, state, active, t: _recorded_steps(
            collect.evaluation_step(env, env_params, policy_fn, params, 1), state, active, t, block, max_steps))

    def write(self, folder: str | Path, params_per_run: PyTree, keys: jax.Array, runs: Any = "all", *,
              names: Sequence[str] | None = None, prefix: str = "", caption: str = "",
              keep_frames: bool = True, progress: Callable[[str], Any] | None = None,
              ) -> list[tuple[EpisodeVideo, np.ndarray | None]]:
        """(video, its first frames [min(frames, KEPT_FRAMES), H, W, 3], or None without `keep_frames`) for each
        selected run.

        The files are "<prefix><name>_return<R>.mp4", with every frame: the
        states the episode's actions saw and, for an env that keeps it
        (`stepping.keeps_final_state`: gymnax envs, the suite adapters; a host
        env's writer draws it too, `_HostEpisodeWriter`), the state it ended
        in; the frames' label is "<name><caption>  t=<step>
        return=<so far>". An
        episode whose hook draws state by state is drawn and encoded
        `FRAMES_PER_BLOCK` states at a time, so without `keep_frames` its
        frames are never all in memory (4,000 steps of jumanji's Snake, 500 x
        500 pixels, are 3 GB), and with it the first `KEPT_FRAMES` are held
        once, in the array returned. `progress`, if given, is called with a
        line on a video that takes long (`_reported`).
        """
        _check_progress(progress)
        if not (prng.is_key(keys) or getattr(keys, "dtype", None) == np.uint32):
            got = f"{keys.dtype} array" if hasattr(keys, "dtype") else type(keys).__name__
            raise TypeError(f"keys must be PRNG keys [R], one per run (jax.random.split(key, R)), got {got}.")
        keys = jnp.asarray(keys)
        num_runs = int(keys.shape[0]) if keys.ndim else 0
        leaves = jax.tree.leaves(params_per_run)
        if num_runs == 0 or any(np.shape(x)[:1] != (num_runs,) for x in leaves):
            raise ValueError(
                f"keys must be [R] and every leaf of params_per_run [R, ...] with the same R; got keys of shape "
                f"{keys.shape} and params leading axes {sorted({np.shape(x)[:1] for x in leaves})}."
            )
        names = [f"run{r}" for r in range(num_runs)] if names is None else [str(n) for n in names]
        if len(names) != num_runs:
            raise ValueError(f"names must give one name per run ({num_runs}), got {len(names)}.")
        tokens = runs.split(",") if isinstance(runs, str) else [runs] if _checks.is_int(runs) else list(runs)
        returns = None
        if any(isinstance(t, str) and t.strip().lower() in ("best", "worst") for t in tokens):
            returns = np.asarray(self._returns(params_per_run, keys))
        selected = select_runs(runs, num_runs, returns)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        return [self._video(folder, jax.tree.map(lambda x: x[r], params_per_run), keys[r], r, names[r], prefix,
                            caption, keep_frames, progress) for r in selected]

    def _video(self, folder: Path, params: PyTree, key: jax.Array, run: int, name: str, prefix: str, caption: str,
               keep_frames: bool, progress: Callable[[str], Any] | None = None,
               ) -> tuple[EpisodeVideo, np.ndarray | None]:
        """One run's episode recorded, drawn and encoded into `folder` (see `write`)."""
        played, kept = {}, []
        with self._drawing():
            blocks = self._frames(params, key, f"{name}{caption}", played)
            if progress is not None:
                what = f"video of {name}" + (f", {caption.strip()}" if caption.strip() else "")
                blocks = _reported(blocks, progress, what, self._max_steps)
            # the return names the file, and is known once the episode ends: written under a hidden name first
            path = write_video(folder / f".{prefix}{name}.recording.mp4",
                               _kept(blocks, kept) if keep_frames else blocks, fps=self._fps)
        episode_return, length = played["return"], played["length"]
        final = _moved(path, path.with_name(video_name(prefix + name, episode_return, path.suffix)))
        return (EpisodeVideo(run=run, path=final, episode_return=episode_return, length=length),
                kept[0] if keep_frames else None)

    def _drawing(self) -> contextlib.AbstractContextManager:
        """What the episode's frames are drawn within: nothing here (a host env opens itself to draw)."""
        return contextlib.nullcontext()

    def _frames(self, params: PyTree, key: jax.Array, label: str, played: dict) -> Iterator[np.ndarray]:
        """The episode's frames, labelled, as its steps are recorded `RECORD_BLOCK` at a time: a hook that draws
        state by state is given `FRAMES_PER_BLOCK` states at a time, as each block comes to the host; another is
        given the whole episode's states at its end. The return and length go into `played` at the end."""
        state, active, t = self._start(key), jnp.ones((1,), bool), 0
        so_far = np.float32(0.0)
        widest = _widest_label(label, self._max_steps)  # every frame's label broken into lines as this one
        whole: list[tuple[PyTree, list[str] | None]] = []  # a hook that draws a whole episode: its blocks
        while True:
            state, active, taken, states, rewards = self._steps(params, state, active, jnp.int32(t))
            taken = int(taken)
            states = _to_host(jax.tree.map(lambda x: x[:taken, 0], states))
            # the return before step t's reward (what the frame, the state acted on, has earned), summed in float32
            # step after step across blocks, as one cumulative sum of the episode's rewards
            sums = np.cumsum(np.concatenate([[so_far], np.asarray(rewards)[:taken, 0]]).astype(np.float32),
                             dtype=np.float32)
            texts = [_frame_label(label, t + i, g) for i, g in enumerate(sums[:-1])] if self._label else None
            so_far, t = sums[-1], t + taken
            if self._draw.per_state:
                yield from self._drawn(states, taken, texts, self.FRAMES_PER_BLOCK, widest)
            else:
                whole.append((states, texts))
            if not bool(active[0]) or t >= self._max_steps:
                break
        if self._final_frame:
            # the state after the last step (a game's last move, the pole past its angle), with the whole return
            final = _to_host(jax.tree.map(lambda x: x[:1], state.env_state))
            text = [_frame_label(label, t, so_far)] if self._label else None
            if self._draw.per_state:
                yield from self._drawn(final, 1, text, 1, widest)
            else:
                whole.append((final, text))
        if whole:
            states = jax.tree.map(lambda *xs: np.concatenate(xs), *[s for s, _ in whole])
            texts = None if not self._label else [text for _, part in whole for text in part]
            count = t + self._final_frame
            yield from self._drawn(states, count, texts, count, widest)
        played["return"], played["length"] = float(state.episode_return[0]), int(state.episode_length[0])

    RECORD_BLOCK = 256
    """The steps of an episode recorded at a time on the device, whose states are then moved to the host and drawn:
    one program recording the whole episode kept a buffer of the env's time limit in states (`record_episodes`),
    27 GB for full Craftax's 100,000 steps of 273 kB, and the kernel ended `evaluate --video` without a word."""

    FRAMES_PER_BLOCK = 64
    """The states drawn at a time by a hook that draws state by state (`write`)."""

    def _drawn(self, states: PyTree, length: int, texts: Sequence[str] | None, block: int,
               widest: str) -> Iterator[np.ndarray]:
        """The episode's frames, labelled (each label broken into lines as `widest` is: `_label`), `block` states
        at a time (uint8 [<= block, H, W, 3] each)."""
        for start in range(0, length, block):
            stop = min(start + block, length)
            part = states if (start, stop) == (0, length) else jax.tree.map(lambda x: x[start:stop], states)
            frames = self._draw(self._env_params, part)
            if texts is not None:
                frames = _label(frames, texts[start:stop], in_place=self._draw.new_frames and frames.flags.writeable,
                                widest=widest)
            yield frames


class _HostEpisodeWriter(_EpisodeWriter):
    """`_EpisodeWriter` for a host env (gymnasium), which draws itself: its episode is played from Python, one
    jitted `collect.evaluation_step` at a time (the steps `evaluate` takes, so the same episode and return),
    with the env opened to draw (`GymnasiumEnv.drawing`) and its first sub-env drawn before every step and after
    the last (the state the episode ended in, drawn within the step that ended it, before the env's same-step reset:
    `GymnasiumEnv.final_frame`; an env drawn from its observations: the true final one), L + 1 frames for an
    episode of L steps as for a JAX env. The frames go to the encoder a block at a time, as they are drawn."""

    def __init__(self, env: Any, env_params: Any, policy_fn: Any, *, max_steps: int | None = None, fps: float = 30,
                 initial_carry: PyTree | None = None, label: bool = True):
        self._host = _drawing_host(env)  # cannot draw, or a missing package: before anything runs
        _imageio()
        self._fps, self._label = fps, label
        env_params = stepping.resolve_params(env, env_params)
        self._max_steps = _episode_bound(env, env_params, max_steps)
        self._returns = _episode_returns(env, env_params, policy_fn, max_steps, initial_carry)  # (in lockstep)
        self._start = jax.jit(lambda k: collect.rollout_init(k, env, env_params, 1, initial_carry))
        # evaluate's step, with the true final observation (an observation-drawn env's last frame)
        self._step = jax.jit(lambda p, state, active: collect._evaluation_step(env, env_params, policy_fn, p, 1)(
            state, active))

    def _drawing(self) -> contextlib.AbstractContextManager:
        return self._host.drawing()

    def _frames(self, params: PyTree, key: jax.Array, label: str, played: dict) -> Iterator[np.ndarray]:
        """The episode's frames, `FRAMES_PER_BLOCK` at a time, as it is played; its return and length go into
        `played` at the end."""
        state, active = self._start(key), jnp.ones((1,), bool)
        observed = isinstance(self._host, _ObservationFrames)
        widest = _widest_label(label, self._max_steps)  # every frame's label broken into lines as this one
        frames, texts, t = [], [], 0
        while True:
            # the state the policy acts on next (an env that cannot draw: the observation it acts on)
            frames.append(self._host.frame(np.asarray(state.obs[0])) if observed else self._host.frame())
            texts.append(_frame_label(label, t, state.episode_return[0]))
            state, active, _, final_obs = self._step(params, state, active)
            t += 1
            last = not bool(active[0]) or t >= self._max_steps
            if last:
                # the state after the last step, before the host env's same-step reset: the state an episode
                # ended in (drawn within the step) or the one a bound on the steps stopped at
                frames.append(self._host.frame(np.asarray(final_obs[0])) if observed
                              else self._host.final_frame())
                texts.append(_frame_label(label, t, state.episode_return[0]))
            if last or len(frames) >= self.FRAMES_PER_BLOCK:
                block = _check_frames(np.stack(frames), self._host.name)
                yield _label(block, texts, in_place=True, widest=widest) if self._label else block
                frames, texts = [], []
            if last:
                break
        played["return"], played["length"] = float(state.episode_return[0]), int(state.episode_length[0])


KEPT_FRAMES = 1_000
"""The most frames of one episode kept for `TrainingVideos`' sinks (TensorBoard, W&B): its first ones. The video
file has them all; the sinks' copy is held in memory whole, and an episode can be long (an Atari game's time limit
is 27,000 steps, which an untrained policy that never fires reaches: 9 GB of envpool's 336 x 336 frames; a time
limit raised with an env option, brax's `episode_length`)."""


def _kept(blocks: Iterator[np.ndarray], into: list) -> Iterator[np.ndarray]:
    """`blocks` as they come, their first `KEPT_FRAMES` frames also copied into one array, appended to `into` once
    the blocks end (a short episode's frames may be fewer). The array is made at the first block for `KEPT_FRAMES`
    frames and cut to those written: the pages of `np.empty` that are never written are never given memory, and the
    frames are held once (a list of the blocks and their concatenation held them twice at the end)."""
    kept, count = None, 0
    for block in blocks:
        if count < KEPT_FRAMES:
            if kept is None:
                kept = np.empty((KEPT_FRAMES, *block.shape[1:]), block.dtype)
            n = min(len(block), KEPT_FRAMES - count)
            kept[count:count + n] = block[:n]
            count += n
        yield block
    if kept is not None:
        into.append(kept[:count])


class TrainingVideos:
    """Videos of deterministic evaluation episodes while training: a `runner.train` hook (`train --video-every`).

    After a chunk that reaches or passes a multiple of `every` updates, it
    records one episode of each selected run's current policy, writes it to
    `folder` as "update<U>_<name>_return<R>.mp4" (U the updates done) and
    hands it to each sink's `log_video(run, video, frames, update)`
    (`loggers.TensorBoardLogger`, `loggers.WandbLogger`), as CleanRL's and
    SB3's `capture_video` do for their first env. Drawing happens on the host
    between chunks; the jitted recording is compiled once, at the first video.

    Run r's episode at update U uses the key `fold_in(keys[r], U)`: the same
    run and update give the same episode, and training's keys are untouched.

    Args:
      folder: where the videos go (created at the first video).
      env, env_params, policy_fn: as `write_episode_videos` (a deterministic
        policy: an algorithm's `eval_policy_fn`). A host env (gymnasium)
        must be another object than the one training steps: its videos
        reset it (the command line makes one of its own).
      policy_params: maps one run's train state to its policy params (an
        algorithm's `policy_params`); the hook is called with every run's
        state, leaves [R, ...].
      keys: [R] PRNG keys, one per run.
      every: record after every this many updates (a positive int).
      runs: a selector of the runs to record, see `select_runs` ("0", the
        default, is the first run; "best"/"worst" pick by the episode's return).
      names: R names for the files and frames ("run<r>" by default).
      first_update: updates already done (a resumed run's), so the next video
        comes at the next multiple of `every` after it.
      sinks: objects with `log_video(run, video, frames, update)`; a sink
        with `needs_frames = False` is passed None for the frames (it reads
        `video.path`), and when no sink needs them an episode is drawn and
        encoded a block of frames at a time (`write_episode_videos` too).
      num_updates: the run's total updates, if known: U is zero-padded to its
        digits in the file names, so they sort in training order.
      max_steps, fps, initial_carry, progress: as `write_episode_videos`.

    Raises:
      ValueError: `every` not a positive int, or the env cannot be rendered (at construction).
      TypeError: `progress` neither None nor callable (at construction).
      ImportError: the `video` extra is missing (at construction).
    """

    def __init__(self, folder: str | Path, env: Any, env_params: Any, policy_fn: Any, policy_params: Callable,
                 keys: jax.Array, every: int, runs: Any = "0", *, names: Sequence[str] | None = None,
                 first_update: int = 0, sinks: Sequence[Any] = (), num_updates: int | None = None,
                 max_steps: int | None = None, fps: float = 30, initial_carry: PyTree | None = None,
                 progress: Callable[[str], Any] | None = None):
        self.every = _checks.check_positive_int("every", every)
        self._progress = _check_progress(progress)
        self._writer = _episode_writer(env, env_params, policy_fn, max_steps=max_steps, fps=fps,
                                       initial_carry=initial_carry)
        self._keys = jnp.asarray(keys)
        select_runs(runs, int(self._keys.shape[0]), np.zeros(self._keys.shape[0]))  # a bad selector fails now
        self._folder, self._runs, self._names, self._sinks = Path(folder), runs, names, list(sinks)
        # a sink that reads only the video's file says so (`needs_frames = False`): without one that reads the
        # frames, an episode is drawn and encoded a block at a time, never held whole
        self._keep_frames = any(getattr(sink, "needs_frames", True) for sink in self._sinks)
        self._params = jax.jit(jax.vmap(policy_params))
        self._fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
        self._last = int(first_update)
        self._digits = len(str(num_updates)) if num_updates else 1
        self.written: list[EpisodeVideo] = []

    def __call__(self, state: PyTree | Callable[[], PyTree], updates_done: int) -> list[EpisodeVideo]:
        """Records the selected runs' episodes if a multiple of `every` was reached since the last call.

        `state` is every run's train state, or a function of no arguments
        returning it (`runner.train` passes one), called only when a video is
        due: merging a sweep's groups, replay buffers included, is then paid
        once per video instead of once per chunk.
        """
        due = updates_done // self.every > self._last // self.every
        self._last = updates_done
        if not due:
            return []
        if callable(state):
            state = state()
        out = self._writer.write(self._folder, self._params(state), self._fold(self._keys, updates_done), self._runs,
                                 names=self._names, prefix=f"update{updates_done:0{self._digits}d}_",
                                 caption=f"  update {updates_done}", keep_frames=self._keep_frames,
                                 progress=self._progress)
        for video, frames in out:
            for sink in self._sinks:
                sink.log_video(video.run, video, frames, updates_done)
        self.written.extend(v for v, _ in out)
        return [v for v, _ in out]
