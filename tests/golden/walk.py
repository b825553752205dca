"""A deterministic walk env (gymnax and a NumPy twin) and the same small networks in JAX and torch.

WalkEnv: position p starts at 0; action a in {0, 1, 2} moves it by a - 1;
reward = 1 - |p'| / 4; the episode terminates when |p'| >= 3 and is truncated
at `max_steps_in_episode`. obs = [p, time] float32. Resets are deterministic,
so the PyTorch references need only the actions, which they replay from the
JAX run (teacher forcing, docs/semantics.md §13.4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

OBS_DIM, NUM_ACTIONS, HIDDEN, MEMORY = 2, 3, 8, 4


@struct.dataclass
class WalkState(environment.EnvState):
    pos: jax.Array
    time: jax.Array


@struct.dataclass
class WalkParams(environment.EnvParams):
    max_steps_in_episode: int = 100


class WalkEnv(environment.Environment):
    @property
    def default_params(self):
        return WalkParams()

    def step_env(self, key, state, action, params):
        pos = state.pos + action.astype(jnp.int32) - 1
        new = WalkState(pos=pos, time=state.time + 1)
        reward = 1.0 - jnp.abs(pos).astype(jnp.float32) / 4.0
        return self._obs(new), new, reward, jnp.abs(pos) >= 3, {}

    def reset_env(self, key, params):
        state = WalkState(pos=jnp.int32(0), time=jnp.int32(0))
        return self._obs(state), state

    def _obs(self, state):
        return jnp.stack([state.pos, state.time]).astype(jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(NUM_ACTIONS)

    def observation_space(self, params=None):
        return spaces.Box(-1e3, 1e3, (OBS_DIM,), jnp.float32)


class WalkEnvPy:
    """The NumPy twin with a gym-style API: step returns (obs, reward, terminated, truncated)."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.reset()

    def reset(self):
        self.pos, self.time = 0, 0
        return self._obs()

    def _obs(self):
        return np.array([self.pos, self.time], np.float32)

    def step(self, action):
        self.pos += int(action) - 1
        self.time += 1
        reward = np.float32(1.0 - abs(self.pos) / 4.0)
        terminated = abs(self.pos) >= 3
        truncated = self.time >= self.max_steps
        return self._obs(), reward, terminated, truncated


def make_weights(seed: int = 0) -> dict:
    """float32 weights in torch layout (out, in), shared by both sides."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.normal(size=shape) * 0.7).astype(np.float32)  # noqa: E731
    return {
        "w1": w(HIDDEN, OBS_DIM), "b1": w(HIDDEN),
        "wpi": w(NUM_ACTIONS, HIDDEN), "bpi": w(NUM_ACTIONS),
        "wv": w(1, HIDDEN), "bv": w(1),
        "rin": w(MEMORY, OBS_DIM), "rh": w(MEMORY, MEMORY), "rb": w(MEMORY),
        "rpi": w(NUM_ACTIONS, MEMORY), "rpib": w(NUM_ACTIONS),
        "rv": w(1, MEMORY), "rvb": w(1),
    }


# --- JAX side ----------------------------------------------------------------------------

def jax_apply(params, obs):
    """Feedforward actor-critic: logits [B, A], value [B]."""
    h = jnp.tanh(obs @ params["w1"].T + params["b1"])
    return h @ params["wpi"].T + params["bpi"], (h @ params["wv"].T + params["bv"])[:, 0]


def jax_recurrent_policy(params, obs, key, memory):
    """h = tanh(W_in obs + W_h m + b); logits and value read from h; the new memory is h."""
    import jaxrl_rollout as jr

    h = jnp.tanh(obs @ params["rin"].T + memory @ params["rh"].T + params["rb"])
    logits = h @ params["rpi"].T + params["rpib"]
    value = (h @ params["rv"].T + params["rvb"])[:, 0]
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
    return jr.PolicyOutput(action, log_prob, value), h


def reshape_reward(obs, action, reward, done):
    """A torch-ac reward shaping that reads the post-step observation."""
    return reward * 2.0 - 0.1 * obs[0] + 0.5 * done


# --- torch side --------------------------------------------------------------------------

def torch_model(weights: dict):
    """Returns (feedforward(obs) -> (logits, value), recurrent(obs, memory) -> (logits, value, memory))."""
    import torch

    W = {k: torch.tensor(v) for k, v in weights.items()}

    def feedforward(obs):
        h = torch.tanh(obs @ W["w1"].T + W["b1"])
        return h @ W["wpi"].T + W["bpi"], (h @ W["wv"].T + W["bv"]).squeeze(-1)

    def recurrent(obs, memory):
        h = torch.tanh(obs @ W["rin"].T + memory @ W["rh"].T + W["rb"])
        return h @ W["rpi"].T + W["rpib"], (h @ W["rv"].T + W["rvb"]).squeeze(-1), h

    return feedforward, recurrent
