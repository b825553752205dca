"""gymnax-compatible env wrappers (plain classes: no `__getattr__` proxies)."""

from __future__ import annotations

import difflib
from typing import Any

import jax.numpy as jnp

__all__ = ["ClipAction", "make"]


def make(env_id: str):
    """`gymnax.make(env_id)`; an unknown id raises a ValueError that suggests close names."""
    import gymnax

    if env_id not in gymnax.registered_envs:
        close = difflib.get_close_matches(env_id, gymnax.registered_envs, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown env_id {env_id!r}.{hint} Known ids: {', '.join(gymnax.registered_envs)}.")
    return gymnax.make(env_id)


class ClipAction:
    """Clips continuous actions to the Box bounds inside `step`.

    The policy's raw action is what the rollout stores and what its log-prob
    refers to; only the env sees the clipped one (SEMANTICS.md, LANDSCAPE #9).
    """

    def __init__(self, env: Any):
        self.env = env

    @property
    def default_params(self):
        return self.env.default_params

    def action_space(self, params=None):
        return self.env.action_space(params)

    def observation_space(self, params=None):
        return self.env.observation_space(params)

    def reset(self, key, params=None):
        return self.env.reset(key, params)

    def step(self, key, state, action, params=None):
        space = self.env.action_space(params if params is not None else self.env.default_params)
        return self.env.step(key, state, jnp.clip(action, space.low, space.high), params)
