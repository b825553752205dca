"""Host environments: any `gymnasium.Env` stepped from inside the jitted rollout.

For people migrating from PyTorch collectors: `make("CartPole-v1")` (or
`envs.make("gymnasium/CartPole-v1")`) gives a `GymnasiumEnv` that the rollout
steps through `io_callback(ordered=True)`, so
`rollout`, `evaluate` and a jitted PPO `train` run unchanged, with the env
itself running in Python on the host, one call per step for all B envs.

Semantics (the same as the gymnax envs):
  * same-step auto-reset (gymnasium's `AutoresetMode.SAME_STEP`): the
    observation after a finished episode is the reset one, and the true final
    observation is in `info["final_observation"]`;
  * `terminated` and `truncated` (gymnasium's TimeLimit) kept apart;
  * seeding through the JAX key: `reset(keys)` draws one integer seed per env
    from its key and resets the host env with those seeds, so the same key
    gives the same trajectory. Later episodes are seeded by each env's own
    generator, as in gymnasium.

Under `jax.vmap` (over seeds or hyperparameters, as the runner trains R runs)
the R runs' envs form one vector env of R x B sub-envs, stepped in one call per
step; run r's sub-envs are seeded from run r's keys only, so run r meets the
same episodes as a call on its key alone.

What a host env cannot do:
  * be rewound. The env state the rollout carries is a tick counter checked
    against the host env's own; stepping from a stale state (an old
    `RolloutState`, or after another reset of the same env) raises an error
    instead of silently continuing from wherever the host env is. Use separate
    `GymnasiumEnv` objects for training and evaluation. The same check stops
    a vmapped `lax.while_loop` whose runs finish at different steps (a
    finished run stops advancing its env state); `evaluate` of a host env
    runs the runs of a vmap in lockstep instead, so it vmaps.

Every `reset` (re)builds the host env with as many sub-envs as keys given
(times the runs under vmap): `gymnasium.vector.SyncVectorEnv`, or
`AsyncVectorEnv` with `asynchronous=True`, in `AutoresetMode.SAME_STEP`.

Videos. A gymnasium env draws itself (`render()` in `render_mode="rgb_array"`),
so its episodes are drawn while they are played, not from recorded states:
`jaxrl_rollout.video.write_episode_videos` and `TrainingVideos` (and so
`evaluate --video`, `train --video-every`) step the episode from Python with
`evaluate`'s own step and draw sub-env 0 between steps, and the state an episode
ended in is drawn in its last step, before the vector env resets it
(`final_frame`). For that the env needs
a way to make envs that draw: `make(name)` knows it (`gymnasium.make(name,
render_mode="rgb_array")`); a `GymnasiumEnv(env_fn)` takes `render_env_fn`,
or uses `env_fn` itself when its envs are already made with
`render_mode="rgb_array"` (they draw only when asked, so training pays nothing).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxrl_rollout.envs import _base
from jaxrl_rollout.envs._host import HostEnv, HostEnvError, raised_text

__all__ = ["GymnasiumEnv", "HostEnvError", "make"]


def make(name: str, *, asynchronous: bool = False, **make_kwargs: Any) -> tuple[GymnasiumEnv, Any]:
    """A `GymnasiumEnv` of `gymnasium.make(name, **make_kwargs)`; returns `(env, env.default_params)`.

    Args:
      name: a registered gymnasium id ("CartPole-v1", "Pendulum-v1", ...), or,
        in gymnasium's own form, "MODULE:ID" for an env that importing MODULE
        registers ("ale_py:ALE/Pong-v5", "my_package.envs:MyEnv-v0").
      asynchronous: step the B sub-envs in worker processes
        (`AsyncVectorEnv`) instead of one after another in this process.
      **make_kwargs: passed to `gymnasium.make` (e.g. `max_episode_steps`).
    """
    gymnasium = _base.require("gymnasium", "gymnasium", f"envs.make('gymnasium/{name}')")
    _check_registered(gymnasium, name)
    make_kwargs = _base.with_max_episode_steps(make_kwargs)
    drawing = {**make_kwargs, "render_mode": "rgb_array"}  # for videos only; a given render_mode is the user's
    try:
        env = GymnasiumEnv(lambda: gymnasium.make(name, **make_kwargs), asynchronous=asynchronous, name=name,
                           render_env_fn=lambda: gymnasium.make(name, **drawing))
    except TypeError as error:
        if not make_kwargs:
            raise
        raise _base.options_error("gymnasium", name, make_kwargs, error) from error
    except gymnasium.error.DependencyNotInstalled as error:  # LunarLander without Box2D, ...: gymnasium's own extra
        from jaxrl_rollout._extras import MissingExtra

        raise MissingExtra(f"gymnasium/{name} needs a package gymnasium did not find: {error}") from None
    return env, env.default_params


def _check_asynchronous(asynchronous: Any) -> None:
    """A bool, or a ValueError naming it, as the suites' other bad options: a string such as 'no' (the command
    line's `--env-option asynchronous=no`) would be true."""
    if not isinstance(asynchronous, (bool, np.bool_)):
        raise ValueError(f"asynchronous must be a bool (true or false), got {asynchronous!r}.")


def _check_registered(gymnasium: Any, name: str) -> None:
    """Raises a ValueError saying what to do when `name` ("ID" or "MODULE:ID") names no registered env.

    MODULE is imported first, as `gymnasium.make` does. An id in a namespace
    nothing has registered ("ALE/Pong-v5": gymnasium >= 1.0 registers
    ale-py's envs only when `ale_py` is imported) says to name the module
    that registers it.
    """
    import importlib

    module, _, env_id = name.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            top = module.partition(".")[0]
            where = "" if not (isinstance(error, ModuleNotFoundError) and error.name == top) else (
                " ale-py is not installed: pip install ale-py." if top == "ale_py" else
                " Python looks for it on sys.path, which holds the current folder under `python -m jaxrl_rollout` "
                "and not under the jaxrl-rollout command: PYTHONPATH=. adds it.")
            raise ValueError(f"gymnasium id {name!r}: cannot import {module!r}, the module named before ':' to "
                             f"register the env ({error}).{where}") from None
    if env_id in gymnasium.registry:
        return
    namespace = env_id.partition("/")[0] if "/" in env_id else None
    registered = {spec.namespace for spec in gymnasium.registry.values()}
    if namespace is not None and namespace not in registered:
        example = "ale_py" if namespace == "ALE" else "the_package"
        install = " (ale-py's envs: pip install ale-py)" if namespace == "ALE" else ""
        raise ValueError(f"unknown gymnasium env id {env_id!r}: no env of namespace {namespace!r} is registered"
                         f"{' after importing ' + repr(module) if module else ''}. gymnasium registers a package's "
                         f"envs when the package is imported: name its module before the id, as gymnasium.make "
                         f"takes it, e.g. gymnasium/{example}:{env_id}{install}.")
    error = _base.unknown_name("gymnasium env id", env_id, gymnasium.registry, list_known=False)
    hint = "" if module or "Did you mean" in str(error) else (
        " An env that a package of yours registers when imported: gymnasium/MODULE:ID, e.g. "
        "gymnasium/my_package.envs:MyEnv-v0.")
    raise ValueError(f"{error}{hint}")


def _time_limit(spec: Any) -> int | None:
    """The most steps of an episode of the env `spec` makes: its TimeLimit (`max_episode_steps`), else, for an
    Arcade Learning Environment game (ale-py), the limit the emulator truncates at: `max_num_frames_per_episode`
    frames (108,000 for the v5 ids, 30 minutes of play) in steps of `frameskip` frames (4), ceil(frames / skip)
    steps, the fewest frames a step takes where the skip is drawn from a range; None without either."""
    if spec is None:
        return None
    if spec.max_episode_steps is not None:
        return spec.max_episode_steps
    frames, skip = spec.kwargs.get("max_num_frames_per_episode"), spec.kwargs.get("frameskip", 1)
    skip = min(skip) if isinstance(skip, (tuple, list)) and skip else skip
    if isinstance(frames, int) and frames > 0 and isinstance(skip, int) and skip > 0:
        return -(-frames // skip)
    return None


class GymnasiumEnv(HostEnv):
    """B copies of a `gymnasium.Env`, in the vectorized gymnax protocol (see the module docstring).

    Args:
      env_fn: a no-argument callable returning a fresh `gymnasium.Env`
        (e.g. `lambda: gymnasium.make("CartPole-v1")`); it is called once
        here to read the spaces, then B times at every reset.
      asynchronous: use `AsyncVectorEnv` (worker processes) for the B envs.
      name: a name for messages; defaults to the env's spec id.
      render_env_fn: a no-argument callable returning the same env made with
        `render_mode="rgb_array"`, for videos (see the module docstring);
        None uses `env_fn` if its envs have that render mode, else the env
        cannot be drawn (`check_drawable` says how to fix it).
    """

    suite = "gymnasium"

    def __init__(self, env_fn: Callable[[], Any], *, asynchronous: bool = False, name: str | None = None,
                 render_env_fn: Callable[[], Any] | None = None):
        gymnasium = _base.require("gymnasium", "gymnasium", "GymnasiumEnv")
        _check_asynchronous(asynchronous)
        if not callable(env_fn):
            raise TypeError(f"env_fn must be a callable returning a gymnasium.Env, got {type(env_fn).__name__}.")
        probe = env_fn()
        if not isinstance(probe, gymnasium.Env):
            raise TypeError(f"env_fn must return a gymnasium.Env, got {type(probe).__name__}.")
        if render_env_fn is not None and not callable(render_env_fn):
            raise TypeError(f"render_env_fn must be a callable returning a gymnasium.Env made with "
                            f"render_mode='rgb_array', or None; got {type(render_env_fn).__name__}.")
        if render_env_fn is None and getattr(probe, "render_mode", None) == "rgb_array":
            render_env_fn = env_fn
        try:
            name = name or (probe.spec.id if probe.spec is not None else type(probe.unwrapped).__name__)
            super().__init__(name, probe.action_space, probe.observation_space, _time_limit(probe.spec))
        finally:
            probe.close()
        self._env_fn = env_fn
        self._render_env_fn = render_env_fn
        self._drawing = False
        self._final = None  # inside `drawing`: the frame sub-env 0's episode ended on in the last step, if it did
        self._drawable = False  # `check_drawable` passed
        self._asynchronous = bool(asynchronous)
        self._vec = None

    def check_drawable(self) -> None:
        """Checks that this env's episodes can be drawn: makes one drawing env, resets it and draws a frame
        (once: a later call returns at once, so `evaluate --video`'s check and its writer's make one env, not two).

        Raises:
          ValueError: no way to make envs with `render_mode="rgb_array"`
            (says to pass `render_env_fn`), or the env draws no RGB frame.
          ImportError: a package the drawing needs is missing (pygame for
            classic control: the `video` extra names it).
        """
        if self._drawable:
            return
        import gymnasium

        from jaxrl_rollout import _render_suites

        _render_suites.quiet_pygame()  # before gymnasium's renderer imports and initialises pygame
        if self._render_env_fn is None:
            raise ValueError(
                f"cannot draw {self.name}: its envs are made without render_mode='rgb_array', and GymnasiumEnv "
                f"was given no render_env_fn; pass GymnasiumEnv(env_fn, render_env_fn=lambda: gymnasium.make(ID, "
                "render_mode='rgb_array', ...)), or make env_fn's envs with that render mode (drawn only when a "
                "video asks).")
        try:
            env = self._render_env_fn()
        except gymnasium.error.Error as error:  # a render mode the env does not have, ...
            raise ValueError(f"cannot draw {self.name}: making it with render_mode='rgb_array' failed ({error}).") \
                from None
        try:
            if getattr(env, "render_mode", None) != "rgb_array":
                raise ValueError(f"cannot draw {self.name}: render_env_fn made an env with render_mode="
                                 f"{getattr(env, 'render_mode', None)!r}; videos need 'rgb_array'.")
            env.reset(seed=0)
            frame = env.render()
        except gymnasium.error.DependencyNotInstalled as error:  # pygame for classic control, ...
            from jaxrl_rollout import _extras

            raise _extras.missing(f"drawing {self.name}", "video", error) from None
        except ValueError:
            raise
        except Exception as error:  # the env's own reset or render: a bug, a renderer without its display
            raise self._cannot_draw("reset or render()", raised_text(error)) from error
        finally:
            env.close()
        shape = np.shape(frame)
        if len(shape) != 3 or shape[-1] not in (3, 4):
            raise ValueError(f"cannot draw {self.name}: its render() in render_mode='rgb_array' gave "
                             f"{type(frame).__name__} of shape {shape}, not an RGB frame [H, W, 3].")
        self._drawable = True

    @contextlib.contextmanager
    def drawing(self) -> Iterator[None]:
        """Within it, every reset makes envs that draw (`render_env_fn`), and `frame()` draws sub-env 0."""
        if self._render_env_fn is None:
            self.check_drawable()  # raises, saying how to make the env drawable
        self._drawing = True
        try:
            yield
        finally:
            self._drawing = False
            self.close()  # the next reset opens envs that do not draw

    def frame(self) -> np.ndarray:
        """The current frame of the first sub-env, uint8 [H, W, 3] (inside `drawing`, after a reset)."""
        with self._lock:
            if not (self._drawing and self._vec is not None):
                raise RuntimeError(f"{self!r}.frame() draws an env opened inside `with env.drawing():`.")
            try:
                return np.asarray(self._vec.call("render")[0])
            except Exception as error:  # the env's own render(): a bug, a frame it cannot draw
                raise self._cannot_draw("render()", raised_text(error)) from error

    def final_frame(self) -> np.ndarray:
        """The frame of the first sub-env after the last step, uint8 [H, W, 3] (inside `drawing`): where its
        episode ended in that step, the state it ended in, drawn in the step before the vector env's same-step
        reset (`frame()` otherwise).

        Raises:
          ValueError: the env's `render()` of that state raised (as `frame()`'s).
        """
        with self._lock:
            kept, self._final = self._final, None
        if isinstance(kept, str):  # what the env's render() of the state raised, in the step (`_drawing_env`)
            raise self._cannot_draw("render()", kept)
        return kept if kept is not None else self.frame()

    def _cannot_draw(self, what: str, raised: str) -> ValueError:
        """The one-line error of the env's own `what` having raised while drawing (`raised`: `raised_text`'s line)."""
        return ValueError(f"cannot draw {self.name}: its {what} in render_mode='rgb_array' raised {raised}.")

    def _host_open(self, seeds: np.ndarray) -> Any:
        import gymnasium

        vector = gymnasium.vector.AsyncVectorEnv if self._asynchronous else gymnasium.vector.SyncVectorEnv
        env_fn = functools.partial(_drawing_env, self._render_env_fn) if self._drawing else self._env_fn
        # One vector env for every run's envs: sub-envs are independent, each seeded with its own seed.
        self._vec = vector([env_fn] * seeds.size, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
        self._final = None
        obs, _ = self._vec.reset(seed=[int(s) for s in seeds.flat])
        return obs

    def _host_step(self, action: np.ndarray) -> tuple:
        obs, reward, terminated, truncated, info = self._vec.step(action.reshape(-1, *action.shape[2:]))
        final = np.array(obs, copy=True)
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final[i] = info["final_obs"][i]
        if self._drawing:  # sub-env 0's final frame (or what its render raised), where its episode ended here
            ended = info.get("final_info", {})
            self._final = next((ended[key][0] for key in (FINAL_FRAME, FINAL_FRAME_ERROR)
                                if ended.get(f"_{key}", [False])[0]), None)
        return obs, final, reward, terminated, truncated

    def _host_close(self) -> None:
        if self._vec is not None:
            self._vec.close()
        self._vec = None


FINAL_FRAME = "jaxrl_rollout_final_frame"
"""The key of the info (under gymnasium's "final_info") that holds the frame of the state an episode ended in,
drawn by `_drawing_env`'s wrapper in the step that ended it."""

FINAL_FRAME_ERROR = "jaxrl_rollout_final_frame_error"
"""The key of the info that holds, instead, what the env's `render()` of that state raised, in one line
(`raised_text`): `GymnasiumEnv.final_frame` raises it as `frame()` does, not as a failure of the env's step."""


def _drawing_env(render_env_fn: Callable[[], Any]) -> Any:
    """`render_env_fn()` in a wrapper whose `step` draws the state an episode ends in into the step's info
    (`FINAL_FRAME`): the vector env resets that sub-env before the step returns. A module-level function, so an
    `AsyncVectorEnv`'s worker processes can make it."""
    return _final_frame_wrapper()(render_env_fn())


@functools.cache
def _final_frame_wrapper() -> type:
    import gymnasium

    class DrawsFinalState(gymnasium.Wrapper):
        """Draws the state an episode ended in, into the info of the step that ended it (`FINAL_FRAME`)."""

        def step(self, action: Any) -> tuple:
            obs, reward, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                try:
                    info = {**info, FINAL_FRAME: np.asarray(self.env.render())}
                except Exception as error:  # the env's own render(): said by `final_frame`, as `frame()` says it
                    info = {**info, FINAL_FRAME_ERROR: raised_text(error)}
            return obs, reward, terminated, truncated, info

    return DrawsFinalState
