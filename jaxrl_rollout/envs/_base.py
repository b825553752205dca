"""Shared pieces of the suite adapters: lazy imports and same-step auto-reset.

Every adapter turns a suite's environment into the gymnax>=1.0.1 protocol the
rollout takes: `reset(key, params) -> (obs, state)` and
`step(key, state, action, params) -> (obs, state, reward, terminated,
truncated, info)`, where a finished episode is reset within the same step with
a fresh key and `info["final_observation"]` holds the observation the episode
ended on (before the reset).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import numbers
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, prng
from jaxrl_rollout._extras import missing

PyTree = Any


def require(module: str, extra: str, what: str | None = None) -> Any:
    """Imports `module`, or raises a `MissingExtra` (an ImportError) naming the extra that installs it.

    Args:
      module: the module to import (e.g. "brax.envs").
      extra: the jaxrl-rollout extra that provides it (e.g. "brax").
      what: what needed it, for the message (e.g. "envs.make('brax/ant')").
    """
    try:
        return _import_quietly(module)
    except ImportError as err:
        raise missing(what or "This", extra, f"{module!r} could not be imported: {err}") from err


# What a suite prints while it is imported about an optional backend of its own being absent, which is
# not a problem with the import: mujoco.mjx (brax's MuJoCo) prints these two lines to stdout without
# NVIDIA Warp, a GPU backend brax never uses here, and users read them as an error.
_IMPORT_NOTICES = ("Failed to import warp:", "Failed to import mujoco_warp:")


def _import_quietly(module: str) -> Any:
    """`importlib.import_module(module)`, without the `_IMPORT_NOTICES` lines it prints (other output is kept)."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return importlib.import_module(module)
    finally:
        kept = [line for line in printed.getvalue().splitlines(keepends=True) if not line.startswith(_IMPORT_NOTICES)]
        if kept:
            sys.stdout.write("".join(kept))


def check_max_episode_steps(value: Any) -> int | None:
    """`value` as a Python int (a NumPy int too, as brax's, pgx's and xminigrid's limits take), or None; a
    ValueError naming `max_episode_steps` for anything else (0 truncated every step, and an evaluation bounded
    by it returned nothing)."""
    if value is not None and (not _checks.is_int(value) or value <= 0):
        raise ValueError(f"max_episode_steps must be a positive int or None, got {value!r}.")
    return None if value is None else int(value)


def with_max_episode_steps(make_kwargs: dict) -> dict:
    """`make_kwargs` with its `max_episode_steps` checked and made a Python int, where it has one."""
    if "max_episode_steps" not in make_kwargs:
        return make_kwargs
    return {**make_kwargs, "max_episode_steps": check_max_episode_steps(make_kwargs["max_episode_steps"])}


def refuse_wrappers(env: Any, module: Any, refused: tuple[str, ...], why: str) -> None:
    """A ValueError naming `env` when it, or a wrapper inside it, is an instance (subclasses too) of one of the
    classes `refused` names in the suite's wrappers `module`, saying `why`. The chain is followed through
    `module.Wrapper`s, each holding the next in `_env` (jumanji's and xminigrid's); a refused class need not be
    one (jumanji's gym and dm_env wrappers are not)."""
    classes = tuple(c for c in (getattr(module, name, None) for name in refused) if isinstance(c, type))
    inner = env
    while inner is not None:
        if isinstance(inner, classes):
            raise ValueError(f"env is wrapped in {type(inner).__name__}; pass the env without it: {why}")
        inner = getattr(inner, "_env", None) if isinstance(inner, module.Wrapper) else None


def check_param_override(suite: str, name: str, field: str, value: Any, default: Any, positive: bool = False) -> Any:
    """`value` for an env params field given to `make`, or a ValueError naming the field unless it is of its
    default's kind: a bool for a bool, an int for an int (a NumPy int too; positive where `positive`, as time
    limits and sizes are), a number for a float, a str for a str. A field of another kind (a suite's own
    structure: craftax's noise angles, xminigrid's ruleset) passes as given. The suites themselves failed only
    inside make_train, or at their first traced step (craftax's max_timesteps="10", xminigrid's view_size="5"),
    or truncated every step (0)."""
    if isinstance(default, bool):
        ok, kind = isinstance(value, (bool, np.bool_)), "a bool"
    elif isinstance(default, int):
        ok, kind = _checks.is_int(value), "an int"
        if ok and positive and value <= 0:
            ok, kind = False, "a positive int"
    elif isinstance(default, float):
        ok, kind = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)), "a number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a str"
    else:
        return value
    if not ok:
        raise ValueError(f"{suite} {name!r}: EnvParams field {field} must be {kind} (its default is {default!r}), "
                         f"got {value!r}.")
    return int(value) if kind == "an int" else value


def options_error(suite: str, name: str, options: dict, error: BaseException) -> ValueError:
    """The ValueError for a TypeError of `suite`'s make given `options`, naming them as jumanji's and brax's
    adapters do: options it does not take ("unexpected keyword argument"), or else values of a type the env
    cannot build with (`num_rows="6"` was reported as an option Snake does not take)."""
    if "keyword argument" in str(error):
        return ValueError(f"{suite} {name!r} does not take the options {sorted(options)}: {error}")
    return ValueError(f"{suite} {name!r} could not be built with the options {options!r} (a value of the wrong "
                      f"type?): {type(error).__name__}: {error}")


class UnsupportedEnv(NotImplementedError, ValueError):
    """An env (or a spec of it) the adapter cannot give in the protocol: a multi-agent reward, an action spec it
    cannot map. A NotImplementedError, and a ValueError, so the command line says it in one line, as it says
    every other env it cannot take."""


def unknown_name(what: str, name: Any, known, list_known: bool = True) -> ValueError:
    """The error for a name not in `known`: "unknown <what> <name>. Did you mean ...? Known names: ...".

    Args:
      what: what the name is, e.g. "brax env name".
      name: the name given.
      known: the valid names.
      list_known: also list every valid name (False for registries too long to print).
    """
    known = list(known)
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    listing = f" Known names: {', '.join(known)}." if list_known else ""
    return ValueError(f"unknown {what} {name!r}.{hint}{listing}")


def strong_dtypes(tree: PyTree) -> PyTree:
    """Every leaf as a jax array of its own dtype, never weakly typed (Python floats become float32).

    A suite whose reset and step give the same field different weak/strong
    dtypes would make the rollout's scan carry change type; adapters apply
    this to reset states and `cast_like` to step states.
    """
    return jax.tree.map(lambda x: x if prng.is_key(x) else jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def cast_like(tree: PyTree, like: PyTree) -> PyTree:
    """`tree` with the dtypes of `like`, leaf by leaf (the same structure)."""
    return jax.tree.map(lambda x, ref: x if prng.is_key(ref) else jnp.asarray(x, dtype=ref.dtype), tree, like)


def select_tree(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise `where(pred, on_true, on_false)` for a scalar `pred` (one env's done flag)."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class SameStepEnv:
    """Base for adapters: same-step auto-reset on top of a reset-free step.

    Subclasses implement `reset_env(key, params) -> (obs, state)` and
    `step_env(key, state, action, params) -> (obs, state, reward, terminated,
    truncated, info)` for a single env without any auto-reset, plus
    `action_space(params)` and `observation_space(params)`. `step` then
    resets an env whose episode ended (terminated or truncated) in the same
    step, from a key split off the step key, and puts the pre-reset
    observation in `info["final_observation"]`. `default_params` is None
    unless the suite has params.

    The rollout (`stepping.env_step`) does what `step` does for B envs with
    only the done envs' resets computed where `resets_only_done` is True.
    """

    resets_only_done: bool = False
    """Whether `stepping.env_step` computes only the done envs' resets (in a `lax.while_loop`) instead of every
    env's reset at every step, as `jax.vmap(step)` does. True for craftax, whose reset generates a world: its
    env steps took 0.13x the time so with 16 envs and 0.054x with 64 (`benchmarks/reset_only_done.py`, 2 CPU
    cores, 2026-12-01). False for the others, which it speeds up little or slows: xminigrid's Empty-5x5 1.16x /
    0.97x the time, jumanji's Snake 0.81x / 0.96x, pgx's tic_tac_toe (short games) 1.41x / 1.26x."""

    @property
    def default_params(self) -> Any:
        return None

    @property
    def name(self) -> str:
        return type(self).__name__

    def reset_env(self, key: jax.Array, params: Any) -> tuple[PyTree, PyTree]:
        raise NotImplementedError

    def step_env(self, key: jax.Array, state: PyTree, action: Any, params: Any) -> tuple:
        raise NotImplementedError

    def action_space(self, params: Any = None) -> Any:
        raise NotImplementedError

    def observation_space(self, params: Any = None) -> Any:
        raise NotImplementedError

    def reset(self, key: jax.Array, params: Any = None) -> tuple[PyTree, PyTree]:
        return self.reset_env(key, self.default_params if params is None else params)

    def step(self, key: jax.Array, state: PyTree, action: Any, params: Any = None) -> tuple:
        params = self.default_params if params is None else params
        obs, next_state, reward, terminated, truncated, info, reset_key = self.step_until_reset(key, state, action, params)
        reset_obs, reset_state = self.reset_env(reset_key, params)
        done = terminated | truncated
        return select_tree(done, reset_obs, obs), select_tree(done, reset_state, next_state), reward, terminated, truncated, info

    def step_until_reset(self, key: jax.Array, state: PyTree, action: Any, params: Any) -> tuple:
        """`step` up to its auto-reset: `(obs, next_state, reward, terminated, truncated, info, reset_key)`.

        The step key and the reset key are one split of `key`; `step_env`
        runs with the first, flags come back bool, the reward float32, and
        `info["final_observation"]` is `obs`. `step` resets from `reset_key`
        and selects; `stepping.env_step` (for `resets_only_done`) vmaps this
        and resets only the done envs, from the same keys.
        """
        step_key, reset_key = jax.random.split(key)
        obs, next_state, reward, terminated, truncated, info = self.step_env(step_key, state, action, params)
        return (obs, next_state, jnp.asarray(reward, dtype=jnp.float32), jnp.asarray(terminated, dtype=bool),
                jnp.asarray(truncated, dtype=bool), {**info, "final_observation": obs}, reset_key)
