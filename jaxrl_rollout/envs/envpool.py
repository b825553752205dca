"""envpool tasks as host envs, with envpool's next-step auto-reset turned into same-step.

`make("CartPole-v1")` (or `envs.make("envpool/CartPole-v1")`) gives an
`EnvpoolEnv` that the rollout steps through `io_callback`, like
`jaxrl_rollout.envs.gymnasium` (same limits: no rewinding, no vmapped
`evaluate`; see there).

envpool (checked with 1.2.5 on Python 3.11 and 1.2.7 on Python 3.12, the
releases the `envpool` extra installs there) resets a finished env on
the *next* `step`: that call ignores the env's action and returns the reset
observation with reward 0. The adapter instead resets the finished envs at
once, in the same host call, with envpool's partial `reset(env_ids)`, so the
next action is a real action of the new episode and the final observation is
the one the step returned: the same-step protocol of every other env here.

Why not envpool's XLA interface (`env.xla()`): it exposes `send`/`recv`/`step`
but no reset, so finished envs cannot be reset within the step; and stepping
a subset of envs through it (`step(handle, action, env_id)`) returned two rows
for env 0 and none for env 1 when tried with envpool 1.2.5.

Images: envpool gives image observations channels first (Atari's and
ViZDoom's frame stacks are [4, 84, 84]); the adapter gives them channels last
([84, 84, 4]), as every other suite here does and as `network='auto'`'s CNN
reads them. An observation is taken as a channels-first image when it has
three axes and the first is the shortest (a [64, 64, 3] image stays). This
rule knows envpool's convention and transposes; the networks' own check
(`algorithms._common._check_channels_last`) knows nothing of where an image
came from, so it is narrower ([C <= 4, H, W > 4]) and only refuses.

Seeding: envpool seeds env i with `seed + i` at creation. `reset(keys)`
recreates the pool with `seed` drawn from the first env's key, so the same key
gives the same trajectory. Under `jax.vmap` over R runs there is one pool per
run, each seeded from its own run's first key (so run r meets the same
episodes as a call on its key alone), all stepped one after another in the
same host call.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaxrl_rollout.envs import _base
from jaxrl_rollout.envs._host import HostEnv, HostEnvError

__all__ = ["EnvpoolEnv", "HostEnvError", "make"]


@contextlib.contextmanager
def _quiet_box_casts() -> Iterator[None]:
    """Without gymnasium's warning that the float64 bounds envpool gives a float32 Box are cast to float32, which
    its spaces print on every command for CartPole, Pendulum, ... (the observations are float32 either way)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*Box (low|high)'s precision lowered by casting to float32",
                                category=UserWarning)
        yield


def make(name: str, **make_kwargs: Any) -> tuple[EnvpoolEnv, Any]:
    """An `EnvpoolEnv` of envpool's gymnasium task `name`; returns `(env, env.default_params)`.

    Args:
      name: an envpool task id (`envpool.list_all_envs()`), e.g. "CartPole-v1".
      **make_kwargs: passed to `envpool.make_gymnasium` (e.g.
        `max_episode_steps`); `num_envs`, `batch_size` and `seed` are set by
        the adapter.
    """
    env = EnvpoolEnv(name, **make_kwargs)
    return env, env.default_params


def _channels_first(space: Any) -> bool:
    """Whether envpool's observation `space` is a channels-first image: a Box of three axes, the first the shortest."""
    shape = tuple(getattr(space, "shape", None) or ())
    return len(shape) == 3 and shape[0] < min(shape[1:])


class EnvpoolEnv(HostEnv):
    """B envs of one envpool task in the vectorized gymnax protocol, with same-step auto-reset."""

    suite = "envpool"

    def __init__(self, name: str, **make_kwargs: Any):
        envpool = _base.require("envpool", "envpool", f"envs.make('envpool/{name}')")
        _base.require("gymnasium", "envpool", f"envs.make('envpool/{name}')")
        known = envpool.list_all_envs()
        if name not in known:
            raise _base.unknown_name("envpool task id", name, sorted(known), list_known=False)
        fixed = sorted({"num_envs", "batch_size", "seed"} & set(make_kwargs))
        if fixed:
            raise ValueError(f"EnvpoolEnv sets {fixed} itself (num_envs from the keys given to reset); drop them.")
        make_kwargs = _base.with_max_episode_steps(make_kwargs)
        with _quiet_box_casts():  # the spaces are made when first read
            try:
                probe = envpool.make_gymnasium(name, num_envs=1, **make_kwargs)
            except TypeError as error:  # Config.__new__() got an unexpected keyword argument
                if not make_kwargs:
                    raise
                raise _base.options_error("envpool", name, make_kwargs, error) from error
            try:
                observation_space = probe.observation_space
                self._channels_first = _channels_first(observation_space)
                if self._channels_first:
                    from gymnasium import spaces as gym_spaces

                    observation_space = gym_spaces.Box(np.moveaxis(observation_space.low, 0, -1),
                                                       np.moveaxis(observation_space.high, 0, -1),
                                                       dtype=observation_space.dtype)
                super().__init__(name, probe.action_space, observation_space, probe.spec.config.max_episode_steps)
            finally:
                probe.close()
        self._make_kwargs = make_kwargs
        self._pools: list = []

    def _host_open(self, seeds: np.ndarray) -> Any:
        import envpool

        self._seeds = [int(s) for s in seeds[:, 0]]
        self._seed = self._seeds[0]
        with _quiet_box_casts():  # a pool makes its spaces when first read, in its first reset, and keeps them
            self._pools = [envpool.make_gymnasium(self._name, num_envs=seeds.shape[1], seed=seed, **self._make_kwargs)
                           for seed in self._seeds]
            return self._channels_last(np.stack([self._by_env_id(*pool.reset()) for pool in self._pools]))

    def _host_step(self, action: np.ndarray) -> tuple:
        obs, final, *rest = (np.stack(x) for x in zip(*(self._step_pool(p, a) for p, a in zip(self._pools, action))))
        return (self._channels_last(obs), self._channels_last(final), *rest)

    def _channels_last(self, obs: np.ndarray) -> np.ndarray:
        """[..., C, H, W] images as [..., H, W, C] (a copy, C-contiguous), others as they are."""
        return np.ascontiguousarray(np.moveaxis(obs, -3, -1)) if self._channels_first else obs

    @staticmethod
    def _step_pool(pool: Any, action: np.ndarray) -> tuple:
        """Steps one pool of B envs, resetting its finished envs at once (same-step)."""
        obs, reward, terminated, truncated, info = pool.step(action)
        order = np.argsort(np.asarray(info["env_id"]))
        obs, reward, terminated, truncated = (np.asarray(x)[order] for x in (obs, reward, terminated, truncated))
        final = np.array(obs, copy=True)
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            reset_obs, reset_info = pool.reset(done.astype(np.int32))
            obs[np.asarray(reset_info["env_id"])] = reset_obs
        return obs, final, reward, terminated, truncated

    def _host_close(self) -> None:
        for pool in self._pools:
            pool.close()
        self._pools = []

    @staticmethod
    def _by_env_id(obs: Any, info: dict) -> np.ndarray:
        return np.asarray(obs)[np.argsort(np.asarray(info["env_id"]))]
