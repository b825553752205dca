"""Jumanji environments in the gymnax>=1.0.1 protocol (`envs.make("jumanji/<name>")`).

`make("Snake-v1", **env_kwargs)` builds `jumanji.make("Snake-v1", **env_kwargs)`
and wraps the raw environment (never jumanji's `AutoResetWrapper`) in
`JumanjiEnv`, which resets a finished episode within the same step from a
fresh key and returns the observation the episode ended on in
`info["final_observation"]`. Jumanji has no env params: `make` returns
`(env, None)` and the rollout uses `env.default_params` (None).

Episode ends. Jumanji's `TimeStep` marks the last step of an episode with
`step_type == LAST`; this adapter reports

- `terminated` where the step is LAST with discount 0,
- `truncated` where it is LAST with a nonzero discount (jumanji's
  `truncation`), or where the adapter's own step counter reaches
  `max_episode_steps` (if the env also terminates on that step, both flags
  are set and the rollout counts the step as terminated).

Most jumanji environments (Snake, Tetris, Maze, Cleaner, PacMan, Sokoban,
RubiksCube, ...) end an episode at their own `time_limit` with discount 0,
that is as a termination, so their time limit is never bootstrapped. To get
a real time-limit truncation, pass `max_episode_steps=N` with the
environment's `time_limit` above N (e.g. `make("Snake-v1", time_limit=10_000,
max_episode_steps=500)`); `make` refuses an N that the env's own `time_limit`
would pre-empt.

Observations stay the suite's pytrees (e.g. Snake's `Observation(grid,
step_count, action_mask)` NamedTuple), and `observation_space` describes them
with a gymnax `Dict` keyed by the observation's field names (nested specs give
nested `Dict`s): `DiscreteArray` -> `Discrete` (`Box` when its dtype is not
int32/int64), every other array spec -> `Box` with the spec's bounds, shape
and dtype (the dtype's range where the spec has no bounds).

Action spaces: `DiscreteArray` -> `Discrete(num_values)`; float
`BoundedArray`/`Array` -> `Box`; integer `MultiDiscreteArray`/`BoundedArray`
of shape (A,) or more -> with `multi_discrete="tuple"` (default) a gymnax
`Tuple` of one `Discrete` per element (row-major order; the action is a tuple
of ints, each counted from the spec's minimum), with `multi_discrete="flat"`
a single `Discrete` over all combinations (row-major, as jumanji's joint
action masks are laid out), usable with `categorical_policy`; a joint
`action_mask` ([4, 6] for Tetris) is then given flat ([24]), so that
`network="auto"` masks the flat actions with it. A mask is taken as joint
when its shape is the action elements' value counts; a per-element mask of
that same shape (JobShop with 2 machines and 1 job: 2 x 2) would be misread,
so keep "tuple" there. Other action
specs (bool, nested) raise `UnsupportedEnv` (a NotImplementedError and a
ValueError) naming the spec.

Only single-agent rewards are supported: envs whose reward or discount spec
is not a scalar (Connector, LevelBasedForaging, SearchAndRescue) raise
`UnsupportedEnv`. Sokoban-v0's default generator downloads its levels from
Hugging Face when it is built.

Options (keyword arguments of `make`):
  max_episode_steps: truncate an episode after this many steps (None: only
    the env's own episode ends).
  multi_discrete: "tuple" or "flat", how integer multi-dimensional action
    specs become gymnax spaces (see above).
  **env_kwargs: passed to the jumanji environment's constructor (e.g.
    `num_rows`, `num_cols`, `time_limit` for Snake).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from jaxrl_rollout.envs._base import (
    PyTree,
    SameStepEnv,
    UnsupportedEnv,
    check_max_episode_steps,
    options_error,
    refuse_wrappers,
    require,
    unknown_name,
)

__all__ = ["JumanjiEnv", "JumanjiState", "make"]

# jumanji's wrappers that reset episodes (dropping the final observation), add a batch axis, or change the API.
_REFUSED_WRAPPERS = ("AutoResetWrapper", "VmapAutoResetWrapper", "VmapWrapper", "JumanjiToGymWrapper",
                     "JumanjiToDMEnvWrapper")

_MULTI_DISCRETE_MODES = ("tuple", "flat")
_MASK_FIELD = "action_mask"  # jumanji's name for the legal-action mask in its observations


class JumanjiState(NamedTuple):
    """The adapter's state for one env.

    Attributes:
      env_state: the jumanji environment's own state.
      step_count: int32 [], steps taken in the running episode (the adapter's
        counter for `max_episode_steps`).
    """

    env_state: PyTree
    step_count: jax.Array


def _dtype_range(dtype: Any) -> tuple[Any, Any]:
    """The widest (low, high) a Box of this dtype can hold."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return False, True
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.min, info.max
    return -np.inf, np.inf


def _bounds(spec: Any) -> tuple[np.ndarray, np.ndarray]:
    """A bounded spec's (minimum, maximum), broadcast to its shape."""
    low = np.broadcast_to(np.asarray(spec.minimum), spec.shape)
    high = np.broadcast_to(np.asarray(spec.maximum), spec.shape)
    return low, high


def _counts(spec: Any) -> tuple[int, ...]:
    """The number of values of each element of an integer bounded action spec, row-major."""
    low, high = _bounds(spec)
    return tuple(int(n) for n in (high.astype(np.int64) - low.astype(np.int64) + 1).reshape(-1))


def _box(spec: Any) -> Any:
    """A gymnax Box with a bounded spec's bounds (scalars where they are uniform)."""
    low, high = (x.flat[0] if x.size and np.all(x == x.flat[0]) else jnp.asarray(x) for x in _bounds(spec))
    return spaces.Box(low, high, spec.shape, spec.dtype)


def _observation_space(spec: Any, specs: Any, where: str) -> Any:
    """A gymnax space describing observations of a (possibly nested) jumanji spec."""
    if isinstance(spec, specs.DiscreteArray):
        if np.dtype(spec.dtype) in (np.dtype(np.int32), np.dtype(np.int64)):
            return spaces.Discrete(int(spec.num_values), dtype=spec.dtype)
        return spaces.Box(0, int(spec.num_values) - 1, (), spec.dtype)
    if isinstance(spec, specs.BoundedArray):
        return _box(spec)
    if isinstance(spec, specs.Array):
        low, high = _dtype_range(spec.dtype)
        return spaces.Box(low, high, spec.shape, spec.dtype)
    if isinstance(spec, specs.Spec):
        children = {k: v for k, v in vars(spec).items() if isinstance(v, specs.Spec)}
        return spaces.Dict({k: _observation_space(v, specs, f"{where}.{k}") for k, v in children.items()})
    raise UnsupportedEnv(f"{where} is a {type(spec).__name__}, not a jumanji spec: {spec!r}.")


def _action_codec(spec: Any, specs: Any, multi_discrete: str) -> tuple[Any, Callable[[Any], jax.Array]]:
    """The gymnax action space for a jumanji action spec, and the map from its actions to the env's."""
    dtype = np.dtype(spec.dtype) if isinstance(spec, specs.Array) else None
    if isinstance(spec, specs.DiscreteArray):
        return spaces.Discrete(int(spec.num_values)), lambda a: jnp.asarray(a, dtype)
    if isinstance(spec, specs.BoundedArray) and np.issubdtype(dtype, np.integer):
        counts = _counts(spec)
        low = jnp.asarray(_bounds(spec)[0], dtype)
        if spec.shape == ():
            return spaces.Discrete(int(counts[0])), lambda a: jnp.asarray(a, dtype) + low
        if multi_discrete == "tuple":
            space = spaces.Tuple([spaces.Discrete(int(n)) for n in counts])
            return space, lambda a: (jnp.stack(a).reshape(spec.shape) + low).astype(dtype)
        total = math.prod(int(n) for n in counts)
        if total >= 2**31:
            raise ValueError(
                f"multi_discrete='flat' needs the {math.prod(spec.shape)} action elements of {spec!r} to "
                f"have fewer than 2**31 combinations, got {total}; use multi_discrete='tuple'."
            )
        dims = tuple(int(n) for n in counts)
        return spaces.Discrete(total), lambda a: (
            jnp.stack(jnp.unravel_index(a, dims)).reshape(spec.shape) + low
        ).astype(dtype)
    if isinstance(spec, specs.Array) and np.issubdtype(dtype, np.floating):
        if isinstance(spec, specs.BoundedArray):
            space = _box(spec)
        else:
            space = spaces.Box(-jnp.inf, jnp.inf, spec.shape, dtype)
        return space, lambda a: jnp.asarray(a, dtype)
    raise UnsupportedEnv(
        f"jumanji action spec {spec!r} is not supported: the adapter takes DiscreteArray, integer "
        "MultiDiscreteArray/BoundedArray and float BoundedArray/Array action specs."
    )


class JumanjiEnv(SameStepEnv):
    """A raw jumanji `Environment` in the gymnax>=1.0.1 protocol, with same-step auto-reset.

    The env's own stochasticity lives in its state (jumanji's `step` takes no
    key), so the step key only seeds the reset of an episode that ended.

    Args:
      env: a jumanji `Environment` without an auto-reset wrapper.
      max_episode_steps: truncate episodes after this many steps, or None.
      multi_discrete: "tuple" or "flat" (see the module docstring).
      name: the name reported by `env.name` (default: the env's class name).

    Raises:
      ValueError: a bad option, or `max_episode_steps` not below the env's
        own `time_limit` (which jumanji reports as a termination).
      NotImplementedError: a multi-agent reward or discount, or an action
        spec the adapter cannot map.
    """

    def __init__(
        self,
        env: Any,
        *,
        max_episode_steps: int | None = None,
        multi_discrete: str = "tuple",
        name: str | None = None,
    ):
        specs = require("jumanji.specs", "jumanji", "jaxrl_rollout.envs.jumanji.JumanjiEnv")
        self._last = require("jumanji.types", "jumanji").StepType.LAST
        refuse_wrappers(env, require("jumanji.wrappers", "jumanji"), _REFUSED_WRAPPERS,
                        "JumanjiEnv takes one raw env. It resets finished episodes itself and keeps their true final "
                        "observation (after jumanji's auto-reset the step returns the next episode's first one), "
                        "and the rollout vmaps it.")
        if multi_discrete not in _MULTI_DISCRETE_MODES:
            raise ValueError(f"multi_discrete must be one of {_MULTI_DISCRETE_MODES}, got {multi_discrete!r}.")
        if max_episode_steps is not None:
            max_episode_steps = check_max_episode_steps(max_episode_steps)
            time_limit = getattr(env, "time_limit", None)
            if isinstance(time_limit, int) and max_episode_steps >= time_limit:
                raise ValueError(
                    f"max_episode_steps={max_episode_steps} must be below the env's own time_limit={time_limit}, "
                    "which jumanji ends as a termination (discount 0) before the adapter could truncate; "
                    f"build the env with a larger time_limit (e.g. time_limit={2 * max_episode_steps})."
                )
        for what, spec in (("reward", env.reward_spec), ("discount", env.discount_spec)):
            if tuple(spec.shape) != ():
                raise UnsupportedEnv(
                    f"{type(env).__name__} has a {what} of shape {tuple(spec.shape)} (one per agent); the "
                    "rollout takes one scalar reward and discount per env."
                )
        self.env = env
        self.max_episode_steps = max_episode_steps
        self._name = name or type(env).__name__
        self._action_space, self._to_env_action = _action_codec(env.action_spec, specs, multi_discrete)
        self._observation_space = _observation_space(env.observation_spec, specs, "observation_spec")
        # With flat actions a joint action mask ([4, 6] over Tetris's rotation x column) is given flat, [24], in
        # the same row-major order as the actions, so that it masks the one Discrete the policy samples from.
        self._joint_mask = None
        mask_spec = getattr(env.observation_spec, _MASK_FIELD, None)
        if (multi_discrete == "flat" and isinstance(self._action_space, spaces.Discrete)
                and isinstance(env.action_spec, specs.BoundedArray) and tuple(env.action_spec.shape) != ()
                and isinstance(mask_spec, specs.Array) and len(mask_spec.shape) > 1
                and tuple(mask_spec.shape) == _counts(env.action_spec)):  # one mask axis per action element
            self._joint_mask = tuple(mask_spec.shape)
            mask_space = self._observation_space.spaces[_MASK_FIELD]
            flat = tuple(np.broadcast_to(np.asarray(x), mask_spec.shape).reshape(-1) for x in (mask_space.low,
                                                                                                mask_space.high))
            self._observation_space = spaces.Dict({**self._observation_space.spaces, _MASK_FIELD: spaces.Box(
                *(x.flat[0] if np.all(x == x.flat[0]) else jnp.asarray(x) for x in flat),
                (int(self._action_space.n),), mask_space.dtype)})

    def _observation(self, obs: PyTree) -> PyTree:
        """The env's observation, with a joint action mask flattened (flat actions; see `__init__`)."""
        if self._joint_mask is None:
            return obs
        flat = jnp.reshape(getattr(obs, _MASK_FIELD) if hasattr(obs, "_replace") else obs[_MASK_FIELD], (-1,))
        return obs._replace(**{_MASK_FIELD: flat}) if hasattr(obs, "_replace") else {**obs, _MASK_FIELD: flat}

    def max_steps_in_episode(self, params: Any = None) -> int | None:
        """`max_episode_steps`, else the env's own `time_limit` (None if neither), for `evaluate`."""
        return self.max_episode_steps if self.max_episode_steps is not None else getattr(self.env, "time_limit", None)

    @property
    def name(self) -> str:
        return self._name

    def action_space(self, params: Any = None) -> Any:
        """The gymnax action space (params are ignored: jumanji has none)."""
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        """The gymnax space of the observation pytree (a `Dict` keyed by its fields)."""
        return self._observation_space

    def reset_env(self, key: jax.Array, params: Any) -> tuple[PyTree, JumanjiState]:
        """Starts an episode: `(observation, JumanjiState)`, with no auto-reset logic."""
        env_state, timestep = self.env.reset(key)
        return self._observation(timestep.observation), JumanjiState(env_state, jnp.zeros((), jnp.int32))

    def step_env(self, key: jax.Array, state: JumanjiState, action: Any, params: Any) -> tuple:
        """One raw jumanji step: `(obs, state, reward, terminated, truncated, info)`.

        `info["extras"]` holds the TimeStep's extras and `info["discount"]` its
        discount.
        """
        del key  # jumanji draws its randomness from the key in its state
        env_state, timestep = self.env.step(state.env_state, self._to_env_action(action))
        step_count = state.step_count + 1
        last = timestep.step_type == self._last
        terminated = last & (timestep.discount == 0)
        truncated = last & (timestep.discount != 0)
        if self.max_episode_steps is not None:
            truncated = truncated | (step_count >= self.max_episode_steps)
        info = {"discount": timestep.discount, "extras": timestep.extras}
        return (self._observation(timestep.observation), JumanjiState(env_state, step_count), timestep.reward,
                terminated, truncated, info)


def make(
    name: str,
    *,
    max_episode_steps: int | None = None,
    multi_discrete: str = "tuple",
    **env_kwargs: Any,
) -> tuple[JumanjiEnv, None]:
    """Builds a registered jumanji environment; returns `(env, None)` like `gymnax.make`.

    Args:
      name: a jumanji id with its version, e.g. "Snake-v1" (see
        `jumanji.registered_environments()`).
      max_episode_steps: truncate episodes after this many steps (None: only
        the env's own ends; most jumanji envs end their time limit as a
        termination, see the module docstring).
      multi_discrete: "tuple" or "flat", for integer multi-dimensional actions.
      **env_kwargs: options for the env's constructor (e.g. `num_rows=6,
        num_cols=6, time_limit=100` for Snake).

    Raises:
      ValueError: an unknown name (with close matches) or an option the env
        does not take.
      ImportError: jumanji is not installed (the message names the extra).
    """
    jumanji = require("jumanji", "jumanji", f"envs.make('jumanji/{name}')")
    known = sorted(jumanji.registered_environments())
    if name not in known:
        raise unknown_name("jumanji env name", name, known)
    try:
        env = jumanji.make(name, **env_kwargs)
    except TypeError as err:
        if not env_kwargs:
            raise
        raise options_error("jumanji", name, env_kwargs, err) from err
    adapter = JumanjiEnv(
        env, max_episode_steps=max_episode_steps, multi_discrete=multi_discrete, name=f"jumanji/{name}"
    )
    return adapter, None
