"""Craftax environments in the gymnax>=1.0.1 protocol, death and time-out kept apart.

`make("Craftax-Classic-Symbolic-v1")` (or
`envs.make("craftax/Craftax-Classic-Symbolic-v1")`) builds craftax's env
without its auto-reset (`make_craftax_env_from_name(name, auto_reset=False)`)
and wraps it in a `CraftaxEnv`. Names (`NAMES`): "Craftax-Symbolic-v1",
"Craftax-Pixels-v1", "Craftax-Classic-Symbolic-v1",
"Craftax-Classic-Pixels-v1". craftax's "...-AutoReset-v1" aliases are not
taken: this adapter always resets itself.

craftax ends an episode (`is_terminal`) when the step count reaches
`params.max_timesteps` or the game is over: the player died (health <= 0),
stood in lava (Classic) or beat the final boss (Craftax). It reports one
`done` for all of these, and its `info["discount"]` is 0 for all of them,
time-outs included. Here:

  * `terminated`: the game is over for a reason other than the step count
    (craftax's own `is_terminal` evaluated with the time limit lifted);
  * `truncated`: the step count reached `max_timesteps` and the game is not
    over (a step that does both is terminated only);
  * a finished episode is reset within the same step from a fresh key (a new
    world), with the pre-reset observation in `info["final_observation"]`;
    craftax's `info` (achievements, score, discount) is passed on;
  * reward is float32; the spaces are gymnax's (`Discrete(17)` for Classic,
    `Discrete(43)` for Craftax; `Box(0, 1, ...)` observations: flat
    symbolic vectors, or H x W x 3 images for the pixels variants).

craftax's `EnvParams` are the env params: traced, so they can be vmapped, and
`make` returns them (with any overrides) as `(env, params)`; they are also the
env's `default_params`. Options of `make`: `static_env_params` (craftax's
`StaticEnvParams`: map size, mob counts; fixes shapes) and any `EnvParams`
field as a keyword, e.g. `max_timesteps=1000`.

Cost on a 2-core CPU: Classic-Symbolic compiles a rollout in about 20 s;
the full Craftax-Symbolic takes about 80 s for one reset and one step. The
first pixels env of a process also builds craftax's texture cache (about a
minute, once per installation).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_rollout.envs import _base

__all__ = ["NAMES", "CraftaxEnv", "make", "remove_broken_texture_caches", "with_texture_caches"]

NAMES = (
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
)

# The step count never reaches this: `is_terminal` with it as the time limit
# tells whether the game itself is over.
_NO_TIME_LIMIT = jnp.iinfo(jnp.int32).max


def make(name: str, *, static_env_params: Any = None, **param_overrides: Any) -> tuple[CraftaxEnv, Any]:
    """A `CraftaxEnv` of the craftax env `name`; returns `(env, env_params)`.

    Args:
      name: one of `NAMES`.
      static_env_params: craftax's `StaticEnvParams` for this env (None for
        its defaults).
      **param_overrides: `EnvParams` fields to change from craftax's defaults
        (e.g. `max_timesteps=1000`, `day_length=300`).

    Raises:
      ValueError: an unknown name (with close matches) or `EnvParams` field.
      ImportError: craftax is not installed (names the `craftax` extra).
    """
    what = f"envs.make('craftax/{name}')"
    if name not in NAMES:
        raise _base.unknown_name("craftax env name", name, NAMES)
    craftax_env = _base.require("craftax.craftax_env", "craftax", what)
    env = with_texture_caches(lambda: craftax_env.make_craftax_env_from_name(name, auto_reset=False))
    if static_env_params is not None:
        env = type(env)(static_env_params=static_env_params)
    params = env.default_params
    if param_overrides:
        fields = [f.name for f in dataclasses.fields(params)]
        unknown = sorted(set(param_overrides) - set(fields))
        if unknown:
            raise ValueError(
                f"unknown EnvParams field(s) {unknown} for {name!r}; its fields are {', '.join(fields)}."
            )
        checked = {field: _base.check_param_override("craftax", name, field, value, getattr(params, field),
                                                     positive=field in ("max_timesteps", "day_length"))
                   for field, value in param_overrides.items()}  # a NumPy int as a Python int, as xminigrid's
        params = params.replace(**checked)
    adapter = CraftaxEnv(env, params=params, name=name)
    return adapter, adapter.default_params


def _texture_cache_modules() -> list:
    """craftax's two `constants` modules (full and Classic), each with its TEXTURE_CACHE_FILE and load_all_textures."""
    from craftax.craftax import constants as full
    from craftax.craftax_classic import constants as classic

    return [full, classic]


def remove_broken_texture_caches(modules: Any = None) -> list[str]:
    """Removes every craftax texture cache file that cannot be read; returns their paths.

    craftax builds its texture cache (a bz2 pickle inside its own package
    folder) the first time a pixels env or its renderer is made, and writes
    it in place: a build cut short (Ctrl-C, a killed job) or read while
    another process writes it leaves a truncated file, after which every
    pixels env fails with an EOFError until the file goes. Readable files
    are kept; the `load_all_textures` caches of the given modules are cleared.
    """
    import bz2
    import os
    import pickle

    removed = []
    for module in _texture_cache_modules() if modules is None else modules:
        path = module.TEXTURE_CACHE_FILE
        if not os.path.exists(path):
            continue
        try:
            with bz2.BZ2File(path, "rb") as f:
                pickle.load(f)
        except Exception:  # noqa: BLE001 - any unreadable file is rebuilt by craftax
            try:
                os.remove(path)
            except FileNotFoundError:  # another process removed it first
                pass
            removed.append(str(path))
        load = getattr(module, "load_all_textures", None)
        if hasattr(load, "cache_clear"):
            load.cache_clear()
    return removed


def with_texture_caches(call: Any, modules: Any = None) -> Any:
    """`call()`; where it fails on an unreadable craftax texture cache, removes the cache and calls once more.

    The second call rebuilds the cache (about two minutes on 2 CPU cores), with
    a warning naming the file; an error that no broken cache explains is raised as it is.
    """
    import pickle
    import warnings

    try:
        return call()
    except (EOFError, OSError, pickle.UnpicklingError) as error:
        removed = remove_broken_texture_caches(modules)
        if not removed:
            raise
        warnings.warn(f"craftax's texture cache {', '.join(removed)} could not be read ({type(error).__name__}: "
                      f"{error}): removed it; craftax rebuilds it now (a build cut short leaves such a file).",
                      stacklevel=2)
        return call()


def _to_gymnax_space(space: Any, what: str) -> Any:
    """craftax's own Discrete/Box space as gymnax's (the rollout checks actions against gymnax's)."""
    from gymnax.environments import spaces

    if hasattr(space, "n"):
        return spaces.Discrete(int(space.n))
    if all(hasattr(space, a) for a in ("low", "high", "shape", "dtype")):
        return spaces.Box(space.low, space.high, tuple(space.shape), space.dtype)
    raise ValueError(f"{what} is {type(space).__name__}; CraftaxEnv supports Discrete and Box spaces.")


class CraftaxEnv(_base.SameStepEnv):
    """A single craftax env with death and time-out apart and same-step auto-reset.

    The gymnax>=1.0.1 protocol of `SameStepEnv`: `reset(key, params)` and
    `step(key, state, action, params)`, where `params` are craftax's
    `EnvParams` (None for `default_params`) and the state is craftax's
    `EnvState` (its `timestep` counts the steps of the episode).

    Args:
      env: a craftax env without auto-reset (`make_craftax_env_from_name(name,
        auto_reset=False)`); the auto-reset ones are refused.
      params: the default `EnvParams`; None for the env's own.
      name: a name for messages; defaults to the env's class name.
    """

    resets_only_done = True  # a reset generates a world: the rollout computes only the done envs' (`stepping`)

    def __init__(self, env: Any, *, params: Any = None, name: str | None = None):
        bases = _base.require("craftax.environment_base.environment_bases", "craftax", "CraftaxEnv")
        if isinstance(env, bases.EnvironmentAutoReset):
            raise ValueError(
                f"env {type(env).__name__} resets itself and loses the final observation; build it with "
                "make_craftax_env_from_name(name, auto_reset=False): CraftaxEnv does the reset."
            )
        if not isinstance(env, bases.EnvironmentNoAutoReset):
            raise ValueError(f"env must be a craftax environment without auto-reset, got {type(env).__name__}.")
        self._env = env
        self._params = env.default_params if params is None else params
        self._name = name or type(env).__name__

    def __repr__(self) -> str:
        return f"CraftaxEnv({self._name!r})"

    @property
    def name(self) -> str:
        return f"craftax/{self._name}"

    @property
    def craftax_env(self) -> Any:
        """The wrapped craftax env (no auto-reset)."""
        return self._env

    @property
    def default_params(self) -> Any:
        """craftax's `EnvParams` given at construction."""
        return self._params

    def max_steps_in_episode(self, params: Any = None) -> int | None:
        """`params.max_timesteps` (the time limit), for `evaluate`'s default bound."""
        return (self._params if params is None else params).max_timesteps

    def action_space(self, params: Any = None) -> Any:
        """`Discrete(num_actions)`."""
        params = self._params if params is None else params
        return _to_gymnax_space(self._env.action_space(params), f"{self._name}'s action_space")

    def observation_space(self, params: Any = None) -> Any:
        """`Box(0, 1, obs_shape, float32)`."""
        params = self._params if params is None else params
        return _to_gymnax_space(self._env.observation_space(params), f"{self._name}'s observation_space")

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        """A new world from `key`: (obs, state)."""
        obs, state = self._env.reset_env(key, params)
        return obs, _base.strong_dtypes(state)

    def step_env(self, key: jax.Array, state: Any, action: jax.Array, params: Any) -> tuple:
        """One craftax step without reset: (obs, state, reward, terminated, truncated, info)."""
        action = jnp.asarray(action)
        if action.shape != () or not jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(
                f"{self.name} takes one integer action per env (shape ()), got shape {action.shape} "
                f"and dtype {action.dtype}."
            )
        obs, next_state, reward, done, info = self._env.step_env(key, state, action, params)
        next_state = _base.cast_like(next_state, state)
        game_over = self._env.is_terminal(next_state, params.replace(max_timesteps=_NO_TIME_LIMIT))
        terminated = jnp.asarray(game_over, dtype=bool)
        truncated = jnp.asarray(done, dtype=bool) & ~terminated
        return obs, next_state, jnp.asarray(reward, jnp.float32), terminated, truncated, dict(info)
