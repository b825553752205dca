"""Tiny gymnax environments whose every step can be worked out by hand.

CountingEnv: the observation is (time, tag) where `time` counts steps since
the reset and `tag` is a uniform draw made at reset (it tells episodes apart).
Stepping adds 1 to time and pays reward = the new time, so an episode of
length L returns L (L + 1) / 2. Action 1 terminates the episode; the gymnax
time limit `max_steps_in_episode` truncates it.
BoxCountingEnv: the same with a Box action in [-1, 3], where an action above
2.5 terminates (for the continuous-action learners).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

import jaxrl_rollout as jr


@struct.dataclass
class CountingState(environment.EnvState):
    time: jax.Array
    tag: jax.Array


@struct.dataclass
class CountingParams(environment.EnvParams):
    max_steps_in_episode: int = 5


class CountingEnv(environment.Environment):
    def __init__(self, dict_obs: bool = False):
        super().__init__()
        self.dict_obs = dict_obs

    @property
    def default_params(self) -> CountingParams:
        return CountingParams()

    def _obs(self, state):
        if self.dict_obs:
            return {"time": state.time, "tag": state.tag[None]}
        return jnp.stack([state.time.astype(jnp.float32), state.tag])

    def step_env(self, key, state, action, params):
        time = state.time + 1
        new = CountingState(time=time, tag=state.tag)
        return self._obs(new), new, time.astype(jnp.float32), action == 1, {}

    def reset_env(self, key, params):
        state = CountingState(time=jnp.int32(0), tag=jax.random.uniform(key))
        return self._obs(state), state

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1e6, (2,), jnp.float32)


class OldApiEnv(CountingEnv):
    """A pre-1.0 gymnax env: step returns (obs, state, reward, done, info)."""

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, _, info = super().step(key, state, action, params)
        return obs, state, reward, terminated, info


class BoxCountingEnv(CountingEnv):
    """CountingEnv with a Box action in [-1, 3]: an action above 2.5 terminates; time limit 5."""

    def step_env(self, key, state, action, params):
        time = state.time + 1
        new = CountingState(time=time, tag=state.tag)
        return self._obs(new), new, time.astype(jnp.float32), action[0] > 2.5, {}

    def action_space(self, params=None):
        return spaces.Box(-1.0, 3.0, (1,), jnp.float32)


def obs_time(obs):
    return obs["time"].astype(jnp.float32) if isinstance(obs, dict) else obs[..., 0]


def obs_tag(obs):
    return obs["tag"][..., 0] if isinstance(obs, dict) else obs[..., 1]


def toy_value(obs):
    """V(obs) = time + 100 * tag: distinct for final and reset observations."""
    return obs_time(obs) + 100.0 * obs_tag(obs)


def scripted_policy(term_at):
    """Env b takes action 1 (terminate) once its time reaches term_at[b]."""
    term_at = jnp.asarray(term_at, jnp.float32)

    def policy_fn(params, obs, key):
        del params, key
        action = (obs_time(obs) >= term_at).astype(jnp.int32)
        return jr.PolicyOutput(action, -obs_time(obs), toy_value(obs))

    return policy_fn


def counting_recurrent_policy(term_at):
    """A recurrent policy whose carry counts the steps it has seen.

    The value reported is the count before this step, so it equals the
    observation's time exactly when the carry is reset at episode starts. The
    action terminates once the count reaches term_at[b], so a wrong reset also
    changes the dynamics.
    """
    term_at = jnp.asarray(term_at, jnp.float32)

    def policy_fn(params, obs, key, carry):
        del params, key
        count = carry[:, 0]
        action = (count >= term_at).astype(jnp.int32)
        return jr.PolicyOutput(action, jnp.zeros_like(count), count), carry + 1.0

    return policy_fn


def mlp_policy(key, obs_dim: int = 4, num_actions: int = 2, deterministic: bool = False):
    """A small random flax MLP actor-critic for CartPole-sized problems."""
    import flax.linen as nn

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.tanh(nn.Dense(16)(x))
            return nn.Dense(num_actions)(h), nn.Dense(1)(h)[:, 0]

    net = ActorCritic()
    params = net.init(key, jnp.zeros((1, obs_dim)))
    return jr.categorical_policy(net.apply, deterministic=deterministic), params



class NaNRewardEnv(CountingEnv):
    """CountingEnv that never terminates (1000-step time limit) and pays NaN from env step `nan_at` on.

    With num_steps T, update k (from 0) sees env steps k T + 1 ... (k + 1) T, so
    the first update with a NaN reward is the one holding step `nan_at`.
    """

    def __init__(self, nan_at: int = 17):
        super().__init__()
        self.nan_at = nan_at

    @property
    def default_params(self) -> CountingParams:
        return CountingParams(max_steps_in_episode=1000)

    def step_env(self, key, state, action, params):
        obs, new, reward, _, info = super().step_env(key, state, action, params)
        return obs, new, jnp.where(new.time >= self.nan_at, jnp.nan, reward), jnp.bool_(False), info


@struct.dataclass
class ParityState(environment.EnvState):
    cell: jax.Array


class ParityEnv(environment.Environment):
    """A one-step contextual bandit with a Discrete(16) observation: the cell, drawn at reset; action cell % 2 pays
    1, the other 0, and the episode ends. Read as one number the cell's parity alternates 16 times over its range;
    one-hot, each cell is its own input."""

    CELLS = 16

    @property
    def default_params(self) -> environment.EnvParams:
        return environment.EnvParams(max_steps_in_episode=1)

    def reset_env(self, key, params):
        state = ParityState(time=0, cell=jax.random.randint(key, (), 0, self.CELLS, jnp.int32))
        return state.cell, state

    def step_env(self, key, state, action, params):
        reward = (action == state.cell % 2).astype(jnp.float32)
        return state.cell, state, reward, jnp.bool_(True), {}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params=None):
        return spaces.Discrete(self.CELLS)


class ParityBoxActionEnv(ParityEnv):
    """`ParityEnv` with a Box action in [-1, 1]: an action of the sign of (cell % 2 - 0.5) pays 1, else 0."""

    def step_env(self, key, state, action, params):
        reward = ((action[0] > 0) == (state.cell % 2 == 1)).astype(jnp.float32)
        return state.cell, state, reward, jnp.bool_(True), {}

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


class ParityDictEnv(ParityEnv):
    """`ParityEnv` whose observation is a dict: the Discrete cell beside a constant Box leaf."""

    def reset_env(self, key, params):
        cell, state = super().reset_env(key, params)
        return self._obs(cell), state

    def step_env(self, key, state, action, params):
        cell, state, reward, done, info = super().step_env(key, state, action, params)
        return self._obs(cell), state, reward, done, info

    @staticmethod
    def _obs(cell):
        return {"cell": cell, "bias": jnp.ones((2,), jnp.float32)}

    def observation_space(self, params=None):
        return spaces.Dict({"cell": spaces.Discrete(self.CELLS), "bias": spaces.Box(0.0, 1.0, (2,), jnp.float32)})


class ParityCell(NamedTuple):
    cell: jax.Array
    bias: jax.Array


class ParityNamedTupleEnv(ParityDictEnv):
    """`ParityDictEnv` whose observation is a NamedTuple (cell, bias), as jumanji's are: it flattens in field order,
    the Dict space in sorted-key order (bias, cell). `tuple_space=True` describes it by a Tuple space instead."""

    def __init__(self, tuple_space: bool = False):
        super().__init__()
        self.tuple_space = tuple_space

    @staticmethod
    def _obs(cell):
        return ParityCell(cell, jnp.ones((2,), jnp.float32))

    def observation_space(self, params=None):
        if self.tuple_space:
            return spaces.Tuple([spaces.Discrete(self.CELLS), spaces.Box(0.0, 1.0, (2,), jnp.float32)])
        return super().observation_space(params)
