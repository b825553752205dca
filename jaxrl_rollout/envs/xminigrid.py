"""XLand-MiniGrid environments in the gymnax>=1.0.1 protocol (`envs.make("xminigrid/<name>")`).

`make("MiniGrid-Empty-5x5", **param_overrides)` builds `xminigrid.make(name)`,
replaces fields of its `EnvParams` (e.g. `max_steps=50`, `view_size=5`), and
returns `(XMiniGridEnv(env, env_params), env_params)`. xminigrid's own
`GymAutoResetWrapper` drops the observation an episode ended on, so the
adapter steps the raw environment and resets a finished episode itself,
within the same step and from a fresh key, with the pre-reset observation in
`info["final_observation"]`.

The env params stay xminigrid's `EnvParams` (a pytree): pass them to
`rollout` as `env_params`. Their sizes (`height`, `width`, `view_size`,
`max_steps`) are static fields, so changing one (`params.replace(max_steps=3)`)
recompiles; the XLand ruleset (`params.ruleset`) is a traced field.

Episode ends. xminigrid marks the last step with `step_type == LAST` and
gives discount 0 only when the goal is reached, so the adapter reports
`terminated` = LAST with discount 0 (goal reached) and `truncated` = LAST
with discount 1 (the step counter reached `params.max_steps`). When both
happen on one step the discount is 0 and only `terminated` is set.

The observation is xminigrid's symbolic egocentric view, an array
[view_size, view_size, 2] of (tile, colour) ids in its own dtype (uint8);
`observation_space` is a `Box` with the tile and colour id ranges. The action
space is `Discrete(env.num_actions(params))` (6: forward, turn right, turn
left, pick up, put down, toggle).

Offline only: the MiniGrid ports ("MiniGrid-Empty-5x5", "MiniGrid-DoorKey-8x8",
...) and the XLand-MiniGrid layouts ("XLand-MiniGrid-R1-9x9", ...) build
without network access, the latter with xminigrid's placeholder ruleset (no
goal, so episodes only end at `max_steps`). Real XLand tasks come from the
benchmark rulesets ("small-1m", "medium-1m", ...), which
`xminigrid.load_benchmark` downloads from Hugging Face; this adapter never
downloads: load a benchmark yourself and pass `ruleset=benchmark.get_ruleset(i)`.

Options (keyword arguments of `make`): any field of the env's `EnvParams`,
e.g. `max_steps`, `view_size`, `ruleset` (XLand envs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_rollout import _checks
from jaxrl_rollout.envs._base import PyTree, SameStepEnv, check_param_override, refuse_wrappers, require, unknown_name

__all__ = ["XMiniGridEnv", "make"]


def _needs_download(what: str) -> str:
    import xminigrid

    example = xminigrid.registered_benchmarks()[0]  # (the smallest: "trivial-21k", "trivial-1m" before 0.9.2)
    return (
        f"{what}: XLand-MiniGrid benchmarks are sets of rulesets that xminigrid.load_benchmark downloads "
        "from Hugging Face, and this adapter only builds what works offline. Load the benchmark yourself "
        f"(`bench = xminigrid.load_benchmark({example!r})`) and pass one of its rulesets: "
        "envs.make('xminigrid/XLand-MiniGrid-R1-9x9', ruleset=bench.get_ruleset(0))."
    )


def _leaf_space(leaf: jax.ShapeDtypeStruct) -> Any:
    """A Box spanning the dtype's range, for observation parts the adapter knows nothing about."""
    dtype = np.dtype(leaf.dtype)
    if dtype == np.bool_:
        low, high = False, True
    elif np.issubdtype(dtype, np.integer):
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return spaces.Box(low, high, leaf.shape, dtype)


class XMiniGridEnv(SameStepEnv):
    """A raw xminigrid environment in the gymnax>=1.0.1 protocol, with same-step auto-reset.

    The adapter's env state is xminigrid's `TimeStep` (it holds the
    `State` that xminigrid's `step` takes). xminigrid's `step` takes no key:
    the step key only seeds the reset of an episode that ended.

    Args:
      env: an xminigrid `Environment` without an auto-reset wrapper (its
        observation wrappers are fine: the symbolic view [..., 2] is a Box of
        tile and colour ids, another view such as `RGBImgObservationWrapper`'s
        images a Box over its dtype's range).
      env_params: its `EnvParams`, returned by `default_params`.
      name: the name reported by `env.name` (default: the env's class name).

    Raises:
      ValueError: `env_params.max_steps` is not a positive int.
    """

    def __init__(self, env: Any, env_params: Any, *, name: str | None = None):
        what = "jaxrl_rollout.envs.xminigrid.XMiniGridEnv"
        self._last = require("xminigrid.types", "xminigrid", what).StepType.LAST
        constants = require("xminigrid.core.constants", "xminigrid", what)
        self._top_ids = (constants.NUM_TILES - 1, constants.NUM_COLORS - 1)
        refuse_wrappers(env, require("xminigrid.wrappers", "xminigrid", what),
                        ("GymAutoResetWrapper", "DmEnvAutoResetWrapper"),
                        "XMiniGridEnv resets finished episodes itself and keeps their true final observation "
                        "(after xminigrid's auto-reset the step returns the next episode's first one).")
        max_steps = getattr(env_params, "max_steps", None)
        if not _checks.is_int(max_steps) or max_steps <= 0:
            raise ValueError(f"env_params.max_steps must be a positive int (the time limit), got {max_steps!r}.")
        self.env = env
        self._params = env_params
        self._name = name or type(env).__name__

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> Any:
        return self._params

    def max_steps_in_episode(self, params: Any = None) -> int | None:
        """`params.max_steps` (the time limit), for `evaluate`'s default bound."""
        return (self._params if params is None else params).max_steps

    def action_space(self, params: Any = None) -> Any:
        """`Discrete(num_actions)`: forward, turn right, turn left, pick up, put down, toggle."""
        return spaces.Discrete(int(self.env.num_actions(self._params if params is None else params)))

    def observation_space(self, params: Any = None) -> Any:
        """A Box of (tile, colour) ids for the symbolic view; a Dict if a wrapper made the obs a dict."""
        params = self._params if params is None else params
        obs = jax.eval_shape(lambda key: self.env.reset(params, key).observation, jax.random.key(0))
        if isinstance(obs, dict):
            return spaces.Dict({k: self._grid_space(v) if k == "img" else _leaf_space(v) for k, v in obs.items()})
        return self._grid_space(obs)

    def _grid_space(self, leaf: jax.ShapeDtypeStruct) -> Any:
        """A Box of symbolic views [..., 2]: tile ids in layer 0, colour ids in layer 1; any other view (rendered
        RGB images [H, W, 3]) a Box over its dtype's range."""
        if tuple(leaf.shape[-1:]) != (2,):
            return _leaf_space(leaf)
        high = jnp.broadcast_to(jnp.asarray(self._top_ids, leaf.dtype), leaf.shape)
        return spaces.Box(0, high, leaf.shape, leaf.dtype)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        """Starts an episode: `(observation, TimeStep)`, with no auto-reset logic."""
        timestep = self.env.reset(params, key)
        return timestep.observation, timestep

    def step_env(self, key: jax.Array, state: PyTree, action: Any, params: Any) -> tuple:
        """One raw xminigrid step: `(obs, TimeStep, reward, terminated, truncated, {})`."""
        del key  # xminigrid's step is deterministic
        timestep = self.env.step(params, state, jnp.asarray(action, jnp.int32))
        last = timestep.step_type == self._last
        terminated = last & (timestep.discount == 0)
        truncated = last & (timestep.discount != 0)
        return timestep.observation, timestep, timestep.reward, terminated, truncated, {}


def make(name: str, **param_overrides: Any) -> tuple[XMiniGridEnv, Any]:
    """Builds a registered xminigrid environment; returns `(env, env_params)` like `gymnax.make`.

    Args:
      name: an xminigrid id, e.g. "MiniGrid-Empty-5x5" or
        "XLand-MiniGrid-R1-9x9" (see `xminigrid.registered_environments()`).
      **param_overrides: fields of the env's `EnvParams` to replace, e.g.
        `max_steps=50`, `view_size=5`, `ruleset=...` for XLand envs.

    Raises:
      ValueError: an unknown name (with close matches), a benchmark name or
        option (they need a download), or an unknown params field.
      ImportError: xminigrid is not installed (the message names the extra).
    """
    xminigrid = require("xminigrid", "xminigrid", f"envs.make('xminigrid/{name}')")
    if name in xminigrid.registered_benchmarks():
        raise ValueError(_needs_download(f"{name!r} is an XLand-MiniGrid benchmark, not an environment"))
    if "benchmark" in param_overrides:
        raise ValueError(_needs_download(f"benchmark={param_overrides['benchmark']!r} is not supported"))
    known = list(xminigrid.registered_environments())
    if name not in known:
        raise unknown_name("xminigrid env name", name, known)
    env, env_params = xminigrid.make(name)
    fields = [f.name for f in dataclasses.fields(env_params)]
    unknown = sorted(set(param_overrides) - set(fields))
    if unknown:
        raise ValueError(
            f"xminigrid {name!r} has no params {unknown}; its {type(env_params).__name__} fields are {fields}."
        )
    for field, value in param_overrides.items():
        # the grid's sizes, the view and the time limit, each positive
        param_overrides[field] = check_param_override("xminigrid", name, field, value, getattr(env_params, field),
                                                      positive=True)
    env_params = env_params.replace(**param_overrides)
    return XMiniGridEnv(env, env_params, name=f"xminigrid/{name}"), env_params

