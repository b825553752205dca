"""Brax environments in the gymnax>=1.0.1 protocol, with a correct final observation.

`make("inverted_pendulum")` (or `envs.make("brax/inverted_pendulum")`) builds
the env with brax's own registry (`brax.envs.get_environment`) and wraps it in
a `BraxEnv`. None of brax's training wrappers is used: brax's
`AutoResetWrapper` puts back one cached first state instead of a fresh reset
and drops the observation the episode ended on (brax#641), so a learner that
bootstraps on time-outs values the wrong state. Here instead:

  * the time limit is the adapter's: the state counts the steps of the
    episode, and the step that reaches `episode_length` without the env
    terminating is `truncated` (brax's convention, `info["truncation"]`, is
    mirrored as a float);
  * `terminated` is the raw env's `done` (the pendulum fell, the ant flipped),
    never the time limit;
  * a finished episode is reset within the same step from a fresh key, with
    the pre-reset observation in `info["final_observation"]`;
  * reward is float32, observations are the env's arrays; the action space is
    `Box(-1, 1, (action_size,))` (brax scales [-1, 1] to the actuator range
    itself and its actuators clip to that range; wrap the env in
    `envs.ClipAction` to clip a Gaussian policy's samples explicitly) and the
    observation space `Box(-inf, inf, (observation_size,))`.

Options of `make`: `episode_length` (default 1000, brax's), `backend`
("generalized", "positional", "spring" or "mjx"; None keeps the env's own
default, "generalized" for the built-in envs) and any keyword argument of the
env's constructor. brax envs have no params: `make` returns `(env, None)`.

Cost on a 2-core CPU (inverted_pendulum, default "generalized" backend): a
jitted `rollout_init` + `rollout` compiles in about 15-20 s ("spring" and
"mjx" are no quicker to compile; "spring" and "positional" also use another
time step); once compiled, a step costs about 25-40 us per env at 16-64 envs.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_rollout import _checks
from jaxrl_rollout.envs import _base

__all__ = ["BACKENDS", "BraxEnv", "BraxState", "make"]

BACKENDS = ("generalized", "positional", "spring", "mjx")

# brax.envs.training wrappers that would add a second time limit, a second
# (wrong) auto-reset, or a batch axis to what must be a single env.
_TRAINING_WRAPPERS = ("AutoResetWrapper", "EpisodeWrapper", "VmapWrapper", "DomainRandomizationVmapWrapper")


class BraxState(NamedTuple):
    """One brax env's state as the rollout carries it.

    Attributes:
      brax_state: the raw `brax.envs.State` (pipeline state, obs, reward,
        done, metrics, info), with the same leaf dtypes after reset and step.
      steps: [] int32, env steps taken in the running episode.
    """

    brax_state: Any
    steps: jax.Array


def _check_episode_length(episode_length: Any) -> int:
    if not _checks.is_int(episode_length):
        raise ValueError(f"episode_length must be a positive int (steps per episode), got {episode_length!r}.")
    if episode_length <= 0:
        raise ValueError(f"episode_length must be a positive int (steps per episode), got {episode_length}.")
    return int(episode_length)


def _known_names(brax_envs: Any) -> list[str]:
    # brax keeps its registry (built-in and `register_environment`ed envs) in a private dict.
    return sorted(getattr(brax_envs, "_envs", {}))


def _check_runs_on_this_jax(name: str) -> None:
    """Refuses an env whose brax code calls a jax API this jax has dropped, in one line naming both."""
    import inspect

    import jax.numpy as jnp

    # brax 0.14's fluid model (swimmer's viscosity) calls jnp.clip(a_min=...), which newer jax no longer takes.
    if name == "swimmer" and "a_min" not in inspect.signature(jnp.clip).parameters:
        raise ValueError(f"brax/swimmer cannot run on jax {jax.__version__}: brax's fluid model calls "
                         "jnp.clip(a_min=...), which this jax no longer accepts; choose another brax env.")


def make(
    name: str, *, episode_length: int = 1000, backend: str | None = None, **env_kwargs: Any
) -> tuple[BraxEnv, None]:
    """A `BraxEnv` of brax's registered env `name`; returns `(env, None)`.

    Args:
      name: a brax registry name ("inverted_pendulum", "ant", "halfcheetah",
        "hopper", ...).
      episode_length: steps after which an episode that has not terminated
        is truncated (a positive int).
      backend: the physics pipeline, one of `BACKENDS`, or None for the env's
        own default.
      **env_kwargs: passed to the env's constructor (e.g. `n_frames`, or
        `terminate_when_unhealthy` for ant).

    Raises:
      ValueError: an unknown name (with close matches), a bad
        `episode_length` or `backend`, or an option the env does not take.
      ImportError: brax is not installed (names the `brax` extra).
    """
    brax_envs = _base.require("brax.envs", "brax", f"envs.make('brax/{name}')")
    known = _known_names(brax_envs)
    if name not in known:
        raise _base.unknown_name("brax env name", name, known)
    _check_runs_on_this_jax(name)
    episode_length = _check_episode_length(episode_length)
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be None or one of {', '.join(BACKENDS)}; got {backend!r}.")
        env_kwargs["backend"] = backend
    try:
        env = brax_envs.get_environment(name, **env_kwargs)
    except TypeError as err:  # an option the env's constructor does not take
        raise ValueError(f"brax env {name!r} does not take the option(s) {sorted(env_kwargs)}: {err}") from err
    # brax warns that it is not maintained each time it loads a model after any change to the warning filters
    # (another library's catch_warnings; a training run makes its env more than once): said once, it is left out
    # after, until the filters in force now are restored
    warnings.filterwarnings("ignore", message=_NOT_MAINTAINED, category=UserWarning)
    return BraxEnv(env, episode_length=episode_length, name=name), None


_NOT_MAINTAINED = "Brax System, piplines and environments are not actively being maintained"
"""The start of the UserWarning brax gives as it loads a model (brax 0.14)."""


class BraxEnv(_base.SameStepEnv):
    """A single brax env with a time limit and same-step auto-reset.

    The gymnax>=1.0.1 protocol of `SameStepEnv`: `reset(key, params)` and
    `step(key, state, action, params)`, where `params` is unused (None) and
    the state is a `BraxState`. brax steps are deterministic, so the step key
    only seeds the reset of a finished episode.

    Args:
      env: an unwrapped (single, not batched) `brax.envs.Env`, e.g. from
        `brax.envs.get_environment`. brax's training wrappers
        (AutoReset, Episode, Vmap) are refused: this class does their work.
      episode_length: steps after which a running episode is truncated.
      name: a name for messages; defaults to the env's class name.
    """

    def __init__(self, env: Any, *, episode_length: int = 1000, name: str | None = None):
        brax_base = _base.require("brax.envs.base", "brax", "BraxEnv")
        if not isinstance(env, brax_base.Env):
            raise ValueError(f"env must be a brax.envs.Env, got {type(env).__name__}.")
        wrapped = env
        while isinstance(wrapped, brax_base.Wrapper):
            if type(wrapped).__name__ in _TRAINING_WRAPPERS:
                raise ValueError(
                    f"env is wrapped in brax's {type(wrapped).__name__}; pass the unwrapped env "
                    "(brax.envs.get_environment): BraxEnv does the time limit and the auto-reset itself."
                )
            wrapped = wrapped.env
        self._env = env
        self._episode_length = _check_episode_length(episode_length)
        self._name = name or type(env.unwrapped).__name__
        self._action_size = int(env.action_size)
        self._obs_spec = None

    def __repr__(self) -> str:
        return f"BraxEnv({self._name!r}, episode_length={self._episode_length}, backend={self._env.backend!r})"

    @property
    def name(self) -> str:
        return f"brax/{self._name}"

    @property
    def brax_env(self) -> Any:
        """The wrapped brax env (reset-free, no time limit)."""
        return self._env

    @property
    def episode_length(self) -> int:
        """Steps after which an episode that has not terminated is truncated."""
        return self._episode_length

    def max_steps_in_episode(self, params: Any = None) -> int | None:
        """The time limit (`episode_length`), for `evaluate`'s default bound."""
        return self._episode_length

    def action_space(self, params: Any = None) -> Any:
        """`Box(-1, 1, (action_size,), float32)`."""
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (self._action_size,), jnp.float32)

    def observation_space(self, params: Any = None) -> Any:
        """`Box(-inf, inf, obs.shape)` (a `Dict` of them for dict observations)."""
        from gymnax.environments import spaces

        if self._obs_spec is None:
            # Traced once, not run: the env's reset gives the observation's shape and dtype.
            self._obs_spec = jax.eval_shape(self._env.reset, jax.random.PRNGKey(0)).obs
        to_box = lambda s: spaces.Box(-math.inf, math.inf, tuple(s.shape), s.dtype)  # noqa: E731
        if isinstance(self._obs_spec, jax.ShapeDtypeStruct):
            return to_box(self._obs_spec)
        return spaces.Dict({k: to_box(v) for k, v in self._obs_spec.items()})

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, BraxState]:
        """A fresh episode from `key`: (obs, state)."""
        raw = _base.strong_dtypes(self._env.reset(key))
        return raw.obs, BraxState(brax_state=raw, steps=jnp.int32(0))

    def step_env(self, key: jax.Array, state: BraxState, action: jax.Array, params: Any) -> tuple:
        """One brax step without reset: (obs, state, reward, terminated, truncated, info)."""
        del key, params
        action = jnp.asarray(action, jnp.float32)
        if action.shape != (self._action_size,):
            raise ValueError(
                f"{self.name} takes one action of shape (action_size,)=({self._action_size},) per env, "
                f"got shape {action.shape}."
            )
        # brax's envs update `state.metrics` in place (ant, humanoid: `metrics.update(...)`, some entries Python
        # floats): step a copy of the state's containers, so the caller's state and its dtypes stay as they were.
        raw = self._env.step(jax.tree.map(lambda x: x, state.brax_state), action)
        if jax.tree.structure(raw) != jax.tree.structure(state.brax_state):
            raise ValueError(
                f"{self.name}'s step returned a state whose structure differs from its reset state "
                f"({jax.tree.structure(raw)} vs {jax.tree.structure(state.brax_state)}); the rollout "
                "needs one structure to scan over and to select between step and reset."
            )
        # Same dtypes as the incoming state (brax returns e.g. a Python float reward).
        raw = _base.cast_like(raw, state.brax_state)
        steps = state.steps + 1
        terminated = raw.done != 0
        truncated = (steps >= self._episode_length) & ~terminated
        info = {"truncation": truncated.astype(jnp.float32), "metrics": dict(raw.metrics)}
        reward = raw.reward.astype(jnp.float32)
        return raw.obs, BraxState(brax_state=raw, steps=steps), reward, terminated, truncated, info
