"""Environments for the rollout: gymnax ids, and adapters for other suites.

`make("CartPole-v1")` (or "gymnax/CartPole-v1") builds a gymnax environment;
`make("<suite>/<name>")` builds another suite's env through its adapter in
`jaxrl_rollout.envs.<suite>`, imported only then, so `import jaxrl_rollout`
never imports a suite. Every adapter follows the gymnax>=1.0.1 protocol with
same-step auto-reset, `terminated` and `truncated` apart and the pre-reset
observation in `info["final_observation"]`. Wrappers here are plain classes
(no `__getattr__` proxies).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import jax.numpy as jnp

__all__ = ["SUITES", "ClipAction", "check_id", "make", "suite_of"]

# suite prefix -> the pip extra that installs it (`pip install 'jaxrl-rollout[<extra>]'`).
SUITES = {
    "gymnax": None,
    "brax": "brax",
    "jumanji": "jumanji",
    "craftax": "craftax",
    "xminigrid": "xminigrid",
    "navix": "navix",
    "pgx": "pgx",
    "gymnasium": "gymnasium",
    "envpool": "envpool",
}


def _check_gymnax_name(env_id: str) -> None:
    """A ValueError with close matches for a name that gymnax does not register; builds nothing."""
    import gymnax

    if env_id not in gymnax.registered_envs:
        suite, colon, name = env_id.partition(":")
        if colon and name and suite in SUITES:  # "brax:ant": a suite's env named with a colon for the slash
            hint = f" Did you mean {f'{suite}/{name}'!r}?"
        else:
            close = difflib.get_close_matches(env_id, gymnax.registered_envs, n=3, cutoff=0.4)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
        others = ", ".join(suite for suite in SUITES if suite != "gymnax")
        raise ValueError(f"unknown env_id {env_id!r}.{hint} Known ids: {', '.join(gymnax.registered_envs)}. Those are "
                         f"gymnax's; another suite's env is named SUITE/NAME (suites: {others}; e.g. brax/ant, "
                         "jumanji/Snake-v1).")


def _make_gymnax(env_id: str):
    import gymnax

    _check_gymnax_name(env_id)
    try:
        return gymnax.make(env_id)
    except OSError as error:  # MNISTBandit-bsuite downloads MNIST on first use (urllib's URLError is an OSError)
        raise OSError(f"gymnax's {env_id} downloads its data when it is made, and the download failed "
                      f"({getattr(error, 'reason', None) or error}); run it once with network access, or choose "
                      "another env.") from error


def check_id(env_id: str) -> None:
    """Checks an env id as far as it can without building the env or importing another suite.

    The id must be a non-empty string, and a gymnax id ("CartPole-v1" or
    "gymnax/CartPole-v1") a name in gymnax's registry, with `make`'s
    messages. Any other "<suite>/<name>" id, its suite included, is checked
    by `make` when the env is built. The algorithms' configs call this: a
    config never builds its env.

    Args:
      env_id: as for `make`.

    Raises:
      ValueError: an id that is not a non-empty string, or an unknown gymnax
        name (with close matches).
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string such as 'CartPole-v1' or 'brax/ant', got {env_id!r}.")
    suite, sep, name = env_id.partition("/")
    if not sep:
        _check_gymnax_name(env_id)
    elif suite == "gymnax" and name:
        _check_gymnax_name(name)


def suite_of(env_id: str) -> str:
    """The suite an env id names: the part before "/", or "gymnax" for an id without one ("CartPole-v1")."""
    suite, sep, _ = env_id.partition("/")
    return suite if sep else "gymnax"


def make(env_id: str, **kwargs: Any):
    """Builds an environment from an id; returns `(env, env_params)` like `gymnax.make`.

    Args:
      env_id: a gymnax id ("CartPole-v1", also "gymnax/CartPole-v1"), or
        "<suite>/<name>" for another suite: "brax/ant", "jumanji/Snake-v1",
        "craftax/Craftax-Symbolic-v1", "xminigrid/MiniGrid-Empty-5x5",
        "navix/Navix-Empty-5x5-v0", "pgx/tic_tac_toe",
        "gymnasium/CartPole-v1", "envpool/CartPole-v1". Each suite's module
        (`jaxrl_rollout.envs.brax`, ...) documents its names and options.
      **kwargs: options for the suite's adapter (e.g. `episode_length` for
        brax, `max_episode_steps` for gymnasium); gymnax takes none. An
        algorithm's config carries the plain ones as `env_options` (the
        command line's `--env-option NAME=VALUE`), so a saved run builds its
        env again with them.

    Raises:
      ValueError: an unknown suite or env name (with close matches).
      ImportError: the suite's extra is not installed (the message names it).
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string such as 'CartPole-v1' or 'brax/ant', got {env_id!r}.")
    suite, sep, name = env_id.partition("/")
    if not sep:
        suite, name = "gymnax", env_id
    if suite not in SUITES:
        close = difflib.get_close_matches(suite, list(SUITES), n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown env suite {suite!r} in env_id {env_id!r}.{hint} "
            f"Known suites: {', '.join(SUITES)} (gymnax ids may also be given without a prefix)."
        )
    if not name:
        raise ValueError(f"env_id {env_id!r} names no environment after {suite + '/'!r}.")
    if suite == "gymnax":
        if kwargs:
            raise ValueError(f"gymnax envs take no options; got {sorted(kwargs)} for {env_id!r}.")
        return _make_gymnax(name)
    module = importlib.import_module(f"jaxrl_rollout.envs.{suite}")
    return module.make(name, **kwargs)


class ClipAction:
    """Clips continuous actions to the Box bounds inside `step`.

    The policy's raw action is what the rollout stores and what its log-prob
    refers to; only the env sees the clipped one, so the stored log-prob stays
    the log-density of the stored action (docs/semantics.md §13.3).
    """

    def __init__(self, env: Any):
        self.env = env
        # A vectorized (host) env stays one: the rollout must not vmap it.
        from jaxrl_rollout.stepping import is_vectorized

        self.vectorized = is_vectorized(env)

    @property
    def default_params(self):
        return self.env.default_params

    def action_space(self, params=None):
        return self.env.action_space(params)

    def observation_space(self, params=None):
        return self.env.observation_space(params)

    def max_steps_in_episode(self, params=None):
        """The wrapped env's time limit (its params' `max_steps_in_episode`, or its adapter's), or None."""
        inner = getattr(self.env, "max_steps_in_episode", None)
        if callable(inner):
            return inner(params)
        return getattr(params if params is not None else self.env.default_params, "max_steps_in_episode", None)

    def reset(self, key, params=None):
        return self.env.reset(key, params)

    def clip(self, action, params=None):
        """`action` clipped to the wrapped env's Box bounds (what `step` hands it)."""
        space = self.env.action_space(params if params is not None else self.env.default_params)
        return jnp.clip(action, space.low, space.high)

    def step(self, key, state, action, params=None):
        return self.env.step(key, state, self.clip(action, params), params)
