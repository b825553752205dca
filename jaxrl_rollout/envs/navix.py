"""navix gridworlds (MiniGrid in JAX) in the rollout's env protocol.

`make("Navix-Empty-5x5-v0")` (or `envs.make("navix/Navix-Empty-5x5-v0")`)
gives a `NavixEnv`: gymnax>=1.0.1 `reset`/`step` with same-step auto-reset.
navix 4 needs Python >= 3.12; on an older interpreter, or without the `navix`
extra (`pip install 'jaxrl-rollout[navix]'`, which installs nothing on Python
< 3.12), `make` raises an ImportError saying so.

Semantics:
  * navix's `Timestep` is the env state; its `step_type` says how a step
    ended: `StepType.TRANSITION` (0) the episode goes on, `TRUNCATION` (1)
    the env's `max_steps` was reached, `TERMINATION` (2) a true terminal
    state (goal, lava, ...). `terminated` and `truncated` come from it, so
    they are never both True (navix gives termination precedence when the
    goal is reached on the last allowed step).
  * navix's own auto-reset is deferred by one call (the step after a
    terminal timestep returns the reset one); the adapter switches it off
    (`disable_autoreset=True`) and resets in the same step instead, with a
    fresh key, keeping the terminal observation in
    `info["final_observation"]`.
  * navix draws its randomness (e.g. moving balls) from `state.key`; the
    adapter sets that key from the step key each step, so trajectories are a
    function of the rollout's keys, as with gymnax envs.
  * observations are navix's (`symbolic` u8[H, W, 3] by default; pass
    `observation_fn=navix.observations.rgb` etc. to `make`), actions are
    MiniGrid's seven (0 rotate ccw, 1 rotate cw, 2 forward, 3 pickup,
    4 drop, 5 toggle, 6 done) unless the env says otherwise.
  * the env params are None (navix keeps its settings, `max_steps` included,
    on the static env object).
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxrl_rollout._extras import MissingExtra
from jaxrl_rollout.envs import _base

__all__ = ["NavixEnv", "make"]

MIN_PYTHON = (3, 12)


def _interpreter() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _import_navix(what: str) -> Any:
    """Imports navix 4, or raises an ImportError naming Python >= 3.12 and the extra."""
    if sys.version_info < MIN_PYTHON:
        raise MissingExtra(
            f"{what} needs navix 4, and navix 4 needs Python >= 3.12; this interpreter is {_interpreter()}. "
            "Use Python >= 3.12 and install the `navix` extra: pip install 'jaxrl-rollout[navix]' "
            "(on older Pythons that extra installs nothing)."
        )
    try:
        navix = _base.require("navix", "navix", what)
    except ImportError as err:
        raise MissingExtra(f"{err} (navix 4 needs Python >= 3.12; this interpreter is {_interpreter()}.)") from err
    try:
        version = metadata.version("navix")
    except metadata.PackageNotFoundError:  # a source checkout: trust it
        version = None
    if version is not None and not version.startswith("4."):
        raise MissingExtra(
            f"{what} needs navix 4 (navix>=4,<5; navix 4 needs Python >= 3.12), found navix {version}. "
            "Install the `navix` extra: pip install 'jaxrl-rollout[navix]'"
        )
    return navix


def _to_gymnax_space(space: Any, what: str) -> Any:
    """A gymnax space for a navix `Discrete` / `Continuous` space."""
    shape = tuple(space.shape)
    if type(space).__name__ == "Discrete" and shape == () and what == "action_space":
        return spaces.Discrete(int(space.n))
    low = jnp.broadcast_to(jnp.asarray(space.minimum), shape)
    high = jnp.broadcast_to(jnp.asarray(space.maximum), shape)
    if jnp.issubdtype(jnp.dtype(space.dtype), jnp.integer):
        low, high = int(jnp.min(low)), int(jnp.max(high))
    return spaces.Box(low, high, shape, jnp.dtype(space.dtype))


class NavixEnv(_base.SameStepEnv):
    """A navix `Environment` in the gymnax>=1.0.1 protocol (see the module docstring).

    The state is navix's `Timestep` (`state.t` counts steps since the reset,
    `state.info["return"]` is navix's running return).

    Args:
      navix_env: a `navix.Environment`, e.g. `navix.make("Navix-DoorKey-5x5-v0")`.
      name: a name for messages; defaults to the env's class name.
    """

    def __init__(self, navix_env: Any, name: str | None = None):
        navix = _import_navix("NavixEnv")
        if not isinstance(navix_env, navix.Environment):
            raise ValueError(
                f"navix_env must be a navix.Environment (e.g. navix.make('Navix-Empty-5x5-v0')), got {navix_env!r}."
            )
        # The same-step reset below replaces navix's one-call-late auto-reset.
        self._env = navix_env.replace(disable_autoreset=True)
        self._name = name or type(navix_env).__name__
        self._termination = int(navix.StepType.TERMINATION)
        self._truncation = int(navix.StepType.TRUNCATION)
        self._action_space = _to_gymnax_space(navix_env.action_space, "action_space")
        self._observation_space = _to_gymnax_space(navix_env.observation_space, "observation_space")

    def __repr__(self) -> str:
        return f"NavixEnv({self._name!r}, max_steps={self._env.max_steps})"

    @property
    def name(self) -> str:
        return f"navix/{self._name}"

    @property
    def navix_env(self) -> Any:
        """The wrapped `navix.Environment` (with navix's own auto-reset off)."""
        return self._env

    @property
    def max_steps(self) -> int:
        """navix's truncation horizon: a step with `t >= max_steps` is truncated."""
        return int(self._env.max_steps)

    def max_steps_in_episode(self, params: Any = None) -> int:
        """The truncation horizon (`max_steps`), which bounds `evaluate`'s episodes."""
        return self.max_steps

    def action_space(self, params: Any = None) -> Any:
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        return self._observation_space

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        timestep = self._env.reset(key)
        return timestep.observation, timestep

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> tuple:
        action = jnp.asarray(action)
        if action.shape != () or not jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(f"action must be one integer per env, got {action.dtype}{action.shape}.")
        state = state.replace(state=state.state.replace(key=key))
        timestep = self._env.step(state, action.astype(jnp.int32))
        terminated = timestep.step_type == self._termination
        truncated = timestep.step_type == self._truncation
        return timestep.observation, timestep, timestep.reward, terminated, truncated, {}


def make(name: str, **kwargs: Any) -> tuple[NavixEnv, None]:
    """A `NavixEnv` of `navix.make(name, **kwargs)`; returns `(env, None)`.

    Args:
      name: a navix id ("Navix-Empty-5x5-v0", "Navix-DoorKey-8x8-v0", ...;
        `sorted(navix.registry())` lists them).
      **kwargs: navix options, e.g. `max_steps` (truncation horizon, default
        4 x height x width), `observation_fn`, `gamma`, `penalty_coeff`.

    Raises:
      ImportError: Python < 3.12, or navix 4 is not installed (the `navix` extra).
      ValueError: an unknown name (with close matches) or an option the env does not take.
    """
    navix = _import_navix(f"envs.make('navix/{name}')")
    known = sorted(navix.registry())
    # MiniGrid "-v1" ids navix.make redirects to its own "-v0" ones.
    aliases = getattr(importlib.import_module("navix.environments.registry"), "V1_ALIASES", {})
    if name not in known and name not in aliases:
        raise _base.unknown_name("navix env name", name, known)
    try:
        navix_env = navix.make(name, **kwargs)
    except TypeError as err:
        raise _base.options_error("navix", name, kwargs, err) from err
    return NavixEnv(navix_env, name=name), None
