"""Host environments stepped from inside jitted code through `io_callback`.

`HostEnv` holds everything the gymnasium and envpool adapters share: the JAX
side (`reset`/`step` in the vectorized gymnax protocol, one ordered
`io_callback` per call, a clear error under vmap) and the bookkeeping that
keeps a stateful host env from being silently misused (the tick check).
Subclasses implement three host methods on numpy arrays: `_host_open(batch,
seeds) -> obs`, `_host_step(action) -> (obs, final_obs, reward, terminated,
truncated)` with same-step auto-reset, and `_host_close()`.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import io_callback

__all__ = ["HostEnv", "HostParams"]

_SEED_BOUND = 2**31 - 1


def _to_gymnax_space(space: Any, what: str) -> Any:
    from gymnasium import spaces as gym_spaces
    from gymnax.environments import spaces

    if isinstance(space, gym_spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"{what} is Discrete(n={space.n}, start={space.start}); only start=0 is supported.")
        return spaces.Discrete(int(space.n))
    if isinstance(space, gym_spaces.Box):
        dtype = jnp.float32 if np.issubdtype(space.dtype, np.floating) else jnp.dtype(space.dtype)
        return spaces.Box(
            jnp.asarray(space.low, dtype), jnp.asarray(space.high, dtype), tuple(space.shape), dtype
        )
    raise ValueError(
        f"{what} is {space!r}; GymnasiumEnv supports Discrete (start=0) and Box spaces."
    )


def _struct(space: Any, batch: int) -> jax.ShapeDtypeStruct:
    """The [B, ...] array a gymnax Discrete/Box space's values stack to."""
    from gymnax.environments import spaces

    if isinstance(space, spaces.Discrete):
        return jax.ShapeDtypeStruct((batch,), jnp.int32)
    shape = (space.shape,) if isinstance(space.shape, int) else tuple(space.shape)
    return jax.ShapeDtypeStruct((batch, *shape), space.dtype)


@struct.dataclass
class HostParams:
    """A host env's params: only its time limit, for `evaluate`'s default bound (None if it has none)."""

    max_steps_in_episode: Any = struct.field(pytree_node=False, default=None)


class HostEnv:
    """B copies of a Python env in the vectorized gymnax>=1.0.1 protocol, stepped through `io_callback`.

    `reset(keys [B], params)` draws one int32 seed per env from its key and
    opens (or reopens) the host env with them; `step(keys [B], state,
    actions [B], params)` steps all B envs in one host call. `vectorized =
    True` tells the rollout to call these directly instead of vmapping them.
    `params` (`HostParams`) only carry the time limit. The env state the rollout carries is an int32
    tick [B] compared with the host env's own at every step (see the
    `jaxrl_rollout.envs.gymnasium` docstring for why).

    Args:
      name: for messages.
      action_space, observation_space: the single env's gymnasium spaces
        (Discrete with start 0, or Box).
      max_steps_in_episode: the env's time limit if it has one (for
        `evaluate`'s default bound).
    """

    vectorized = True

    def __init__(self, name: str, action_space: Any, observation_space: Any, max_steps_in_episode: Any = None):
        from gymnasium import spaces as gym_spaces

        self._name = name
        self._params = HostParams(None if max_steps_in_episode is None else int(max_steps_in_episode))
        self._action_space = _to_gymnax_space(action_space, f"{name}'s action_space")
        self._observation_space = _to_gymnax_space(observation_space, f"{name}'s observation_space")
        self._discrete_actions = isinstance(action_space, gym_spaces.Discrete)
        self._num_envs = 0
        self._tick = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r}, num_envs={self._num_envs or 'unset'})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> HostParams:
        return self._params

    def action_space(self, params: Any = None) -> Any:
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        return self._observation_space

    def close(self) -> None:
        """Closes the host env (the next reset opens it again)."""
        with self._lock:
            if self._num_envs:
                self._host_close()
            self._num_envs = 0

    # ---- host side, implemented by subclasses (numpy in, numpy out) ----

    def _host_open(self, batch: int, seeds: list[int]) -> Any:
        """(Re)opens the host env with `batch` envs seeded by `seeds`; returns the reset observations."""
        raise NotImplementedError

    def _host_step(self, action: np.ndarray) -> tuple:
        """Steps all envs; returns (obs, final_obs, reward, terminated, truncated), same-step reset done."""
        raise NotImplementedError

    def _host_close(self) -> None:
        raise NotImplementedError

    # ---- host side, run inside io_callback ----

    def _reset_callback(self, seeds: Any) -> tuple:
        seeds = np.asarray(seeds)
        with self._lock:
            batch = int(seeds.shape[0])
            if self._num_envs:
                self._host_close()
                self._num_envs = 0
            obs = self._host_open(batch, [int(s) for s in seeds])
            self._num_envs = batch
            self._tick += 1
            return self._obs(obs, batch), np.full((batch,), self._tick, np.int32)

    def _step_callback(self, action: Any, tick: Any) -> tuple:
        action, tick = np.asarray(action), np.asarray(tick)
        with self._lock:
            if not self._num_envs:
                raise RuntimeError(f"{self!r} was stepped before any reset (or after close); call rollout_init first.")
            if tick.shape != (self._num_envs,) or np.any(tick != self._tick):
                raise RuntimeError(
                    f"{self!r} was stepped from a stale env state (tick {int(tick.flat[0]) if tick.size else '?'}, "
                    f"the host env is at tick {self._tick}): a host env cannot be rewound or shared between two "
                    "rollout states. Continue from the latest RolloutState, or use one env object per rollout."
                )
            if self._discrete_actions:
                action = action.astype(np.int64)
            obs, final, reward, terminated, truncated = self._host_step(action)
            batch = self._num_envs
            self._tick += 1
            return (
                self._obs(obs, batch),
                self._obs(final, batch),
                np.asarray(reward, np.float32).reshape(batch),
                np.asarray(terminated, bool).reshape(batch),
                np.asarray(truncated, bool).reshape(batch),
                np.full((batch,), self._tick, np.int32),
            )

    def _obs(self, obs: Any, batch: int) -> np.ndarray:
        target = _struct(self._observation_space, batch)
        return np.asarray(obs).astype(target.dtype, copy=False).reshape(target.shape)

    # ---- JAX side ----

    def _no_vmap(self, fn: Callable) -> Callable:
        wrapped = jax.custom_batching.custom_vmap(fn)

        @wrapped.def_vmap
        def _rule(axis_size, in_batched, *args):
            raise ValueError(
                f"{self!r} steps its envs on the host through io_callback and cannot be vmapped "
                f"(here over an axis of size {axis_size}): vmap over seeds or hyperparameters needs a JAX "
                "env (gymnax, brax, ...). Run host-env seeds one after another or in separate processes."
            )

        return wrapped

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, jax.Array]:
        """Resets all B host envs; `key` holds one key per env. Returns (obs [B, ...], state)."""
        keys = jnp.asarray(key)
        typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        if (typed and keys.ndim != 1) or (not typed and (keys.ndim != 2 or keys.shape[1] != 2)):
            raise ValueError(
                f"{type(self).__name__}.reset takes one key per env (it is vectorized): typed keys [B] or raw "
                f"uint32 keys [B, 2], got shape {keys.shape}."
            )
        batch = keys.shape[0]
        seeds = jax.vmap(lambda k: jax.random.randint(k, (), 0, _SEED_BOUND, dtype=jnp.int32))(keys)
        result = (_struct(self._observation_space, batch), jax.ShapeDtypeStruct((batch,), jnp.int32))

        def call(seeds):
            return io_callback(self._reset_callback, result, seeds, ordered=True)

        obs, tick = self._no_vmap(call)(seeds)
        return obs, tick

    def step(self, key: jax.Array, state: jax.Array, action: jax.Array, params: Any = None) -> tuple:
        """Steps all B host envs with `action` [B, ...]; `key` is unused (the host envs have their own RNGs)."""
        del key, params
        tick = jnp.asarray(state)
        action = jnp.asarray(action)
        expected = _struct(self._action_space, tick.shape[0] if tick.ndim == 1 else 0)
        if tick.ndim != 1 or tick.dtype != jnp.int32 or action.shape != expected.shape:
            raise ValueError(
                f"{type(self).__name__}.step takes the batched env state (int32 [B]) and actions of shape "
                f"[B, ...] = {expected.shape} for {self._action_space}; got state {tick.dtype}{list(tick.shape)} "
                f"and action shape {action.shape}."
            )
        batch = tick.shape[0]
        obs_struct = _struct(self._observation_space, batch)
        result = (
            obs_struct,
            obs_struct,
            jax.ShapeDtypeStruct((batch,), jnp.float32),
            jax.ShapeDtypeStruct((batch,), jnp.bool_),
            jax.ShapeDtypeStruct((batch,), jnp.bool_),
            jax.ShapeDtypeStruct((batch,), jnp.int32),
        )

        def call(action, tick):
            return io_callback(self._step_callback, result, action, tick, ordered=True)

        obs, final_obs, reward, terminated, truncated, tick = self._no_vmap(call)(action.astype(expected.dtype), tick)
        return obs, tick, reward, terminated, truncated, {"final_observation": final_obs}
