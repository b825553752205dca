"""PyTorch/gymnasium reference collector for the end-to-end CartPole golden test.

A plain Python loop, the way a PyTorch PPO collector is usually written:

* `num_envs` gymnasium `CartPole-v1` envs made with a short time limit
  (`gymnasium.make("CartPole-v1", max_episode_steps=L)`), stepped one at a
  time, with same-step auto-reset done by hand: when a step terminates or
  truncates, the pre-reset ("final") observation is kept and the env is reset
  at once with a recorded seed, so the observation handed to the policy next
  is the reset observation (docs/semantics.md §2).
* A torch actor-critic (separate actor and critic MLPs, 2 hidden layers of 64,
  tanh, ARENA-style `layer_init`: orthogonal weights with gain sqrt(2) in the
  hidden layers, 0.01 on the actor head and 1.0 on the critic head, zero
  biases) built from a fixed torch seed. Actions are sampled from
  `Categorical(logits=...)`.
* TorchRL truncation semantics (docs/semantics.md §4, §5): a time limit that is
  not a termination bootstraps from V(final observation) and then cuts the
  GAE trace. Advantages and returns come from a reverse loop in torch float32:

      delta_t = r_t + gamma * (1 - terminated_t) * V(true next state_t) - V_t
      A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   A_T = 0
      R_t     = A_t + V_t

Everything is float32 except CartPole's own physics, which gymnasium
integrates in float64 (its observations are float32 casts of that state).
The physical state of every reset (`env.unwrapped.state`, 4 float64s) is
recorded so that another implementation can start each episode from the same
state, and the sampled actions are recorded so that it can teacher-force them.
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import torch
from torch import nn

OBS_DIM = 4
NUM_ACTIONS = 2
HIDDEN = 64

DEFAULTS = dict(
    num_envs=2,
    num_steps=300,
    max_episode_steps=25,
    gamma=0.99,
    gae_lambda=0.95,
    torch_seed=2024,
    sample_seed=7,
    reset_seed=1000,
)


def orthogonal_linear(n_in: int, n_out: int, gain: float = math.sqrt(2.0)) -> nn.Linear:
    """A Linear layer with an orthogonal weight of the given gain and a zero bias (docs/semantics.md §12)."""
    linear = nn.Linear(n_in, n_out)
    with torch.no_grad():
        nn.init.orthogonal_(linear.weight, gain=gain)
        linear.bias.zero_()
    return linear


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs: Linear-tanh-Linear-tanh-Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Sequential(
            orthogonal_linear(OBS_DIM, HIDDEN),
            nn.Tanh(),
            orthogonal_linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            orthogonal_linear(HIDDEN, NUM_ACTIONS, gain=0.01),
        )
        self.critic = nn.Sequential(
            orthogonal_linear(OBS_DIM, HIDDEN),
            nn.Tanh(),
            orthogonal_linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            orthogonal_linear(HIDDEN, 1, gain=1.0),
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs), self.value(obs)


def build_model(torch_seed: int) -> ActorCritic:
    torch.manual_seed(torch_seed)
    return ActorCritic()


def model_weights(model: ActorCritic) -> dict[str, np.ndarray]:
    """state_dict as float32 numpy, torch layout (Linear weight is (out, in))."""
    return {name: t.detach().cpu().numpy().astype(np.float32).copy() for name, t in model.state_dict().items()}


def reset_seed_of(reset_seed: int, env: int, episode: int) -> int:
    """The seed of env `env`'s `episode`-th reset (episode 0 is the initial reset)."""
    return reset_seed + 10_000 * env + episode


def torchrl_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TorchRL's loop GAE (same-index flags), time-major [T, B], float32."""
    not_terminated = 1.0 - terminated.to(torch.float32)
    not_done = 1.0 - done.to(torch.float32)
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * not_terminated[t] * next_values[t] - values[t]
        running = delta + gamma * gae_lambda * not_done[t] * running
        advantages[t] = running
    return advantages, advantages + values


def collect(
    num_envs: int = DEFAULTS["num_envs"],
    num_steps: int = DEFAULTS["num_steps"],
    max_episode_steps: int = DEFAULTS["max_episode_steps"],
    gamma: float = DEFAULTS["gamma"],
    gae_lambda: float = DEFAULTS["gae_lambda"],
    torch_seed: int = DEFAULTS["torch_seed"],
    sample_seed: int = DEFAULTS["sample_seed"],
    reset_seed: int = DEFAULTS["reset_seed"],
) -> dict[str, dict[str, np.ndarray]]:
    """Runs the reference collector; returns {"in": inputs, "out": outputs} of numpy arrays.

    Inputs are what another implementation needs to replay the run: the torch
    weights, the sampled actions [T, B], the physical reset states [B, R, 4]
    (float64, NaN-padded; index 0 is the initial reset) and the settings.
    Outputs are per-step [T, B] records (obs [T, B, 4]): `truncated` is a time
    limit WITHOUT termination (TorchRL / jaxrl_rollout convention; gymnasium
    may report both flags on the same step), `next_value` is V(final
    observation) where truncated, V(obs[t + 1]) elsewhere and V(last obs) at
    T - 1.
    """
    T, B, L = num_steps, num_envs, max_episode_steps
    model = build_model(torch_seed)
    weights = model_weights(model)
    torch.manual_seed(sample_seed)  # the Categorical sampling stream

    envs = [gymnasium.make("CartPole-v1", max_episode_steps=L) for _ in range(B)]
    resets: list[list[np.ndarray]] = [[] for _ in range(B)]
    seeds: list[list[int]] = [[] for _ in range(B)]

    def reset(i: int) -> np.ndarray:
        seed = reset_seed_of(reset_seed, i, len(resets[i]))
        obs, _ = envs[i].reset(seed=seed)
        state = np.array(envs[i].unwrapped.state, dtype=np.float64)
        assert np.array_equal(obs, state.astype(np.float32))
        resets[i].append(state)
        seeds[i].append(seed)
        return obs

    obs = np.stack([reset(i) for i in range(B)]).astype(np.float32)

    f32 = np.float32
    rec = {
        "obs": np.zeros((T, B, OBS_DIM), f32),
        "action": np.zeros((T, B), np.int32),
        "reward": np.zeros((T, B), f32),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "truncated_raw": np.zeros((T, B), bool),
        "done": np.zeros((T, B), bool),
        "log_prob": np.zeros((T, B), f32),
        "value": np.zeros((T, B), f32),
        "final_obs": np.full((T, B, OBS_DIM), np.nan, f32),
        "final_value": np.zeros((T, B), f32),
        "completed_return": np.zeros((T, B), f32),
        "completed_length": np.zeros((T, B), np.int32),
    }
    episode_return = np.zeros(B, f32)
    episode_length = np.zeros(B, np.int32)

    with torch.no_grad():
        for t in range(T):
            logits, value = model(torch.as_tensor(obs))
            dist = torch.distributions.Categorical(logits=logits)
            action = dist.sample()
            rec["obs"][t] = obs
            rec["action"][t] = action.numpy()
            rec["log_prob"][t] = dist.log_prob(action).numpy()
            rec["value"][t] = value.numpy()

            next_obs = np.zeros((B, OBS_DIM), f32)
            for i in range(B):
                o, r, terminated, truncated, _ = envs[i].step(int(action[i]))
                rec["reward"][t, i] = r
                rec["terminated"][t, i] = terminated
                rec["truncated_raw"][t, i] = truncated
                rec["truncated"][t, i] = truncated and not terminated
                rec["done"][t, i] = terminated or truncated
                episode_return[i] += f32(r)
                episode_length[i] += 1
                if terminated or truncated:
                    rec["final_obs"][t, i] = o
                    rec["completed_return"][t, i] = episode_return[i]
                    rec["completed_length"][t, i] = episode_length[i]
                    episode_return[i] = 0.0
                    episode_length[i] = 0
                    o = reset(i)  # same-step auto-reset
                next_obs[i] = o
            if rec["truncated"][t].any():
                rows = np.flatnonzero(rec["truncated"][t])
                final_values = model.value(torch.as_tensor(rec["final_obs"][t, rows]))
                rec["final_value"][t, rows] = final_values.numpy()
            obs = next_obs

        last_value = model.value(torch.as_tensor(obs)).numpy()

    next_value = np.concatenate([rec["value"][1:], last_value[None]]).astype(f32)
    next_value = np.where(rec["truncated"], rec["final_value"], next_value).astype(f32)
    advantages, returns = torchrl_gae(
        torch.as_tensor(rec["reward"]),
        torch.as_tensor(rec["value"]),
        torch.as_tensor(next_value),
        torch.as_tensor(rec["terminated"]),
        torch.as_tensor(rec["done"]),
        gamma,
        gae_lambda,
    )
    for env in envs:
        env.close()

    num_resets = np.array([len(r) for r in resets], np.int32)
    reset_states = np.full((B, int(num_resets.max()), OBS_DIM), np.nan, np.float64)
    reset_seeds = np.full((B, int(num_resets.max())), -1, np.int64)
    for i in range(B):
        reset_states[i, : num_resets[i]] = np.stack(resets[i])
        reset_seeds[i, : num_resets[i]] = seeds[i]

    inputs = {
        "num_envs": np.array(B, np.int32),
        "num_steps": np.array(T, np.int32),
        "max_episode_steps": np.array(L, np.int32),
        "gamma": np.array(gamma, np.float32),
        "gae_lambda": np.array(gae_lambda, np.float32),
        "torch_seed": np.array(torch_seed, np.int64),
        "sample_seed": np.array(sample_seed, np.int64),
        "reset_seed": np.array(reset_seed, np.int64),
        "actions": rec["action"],
        "reset_states": reset_states,
        "reset_seeds": reset_seeds,
        "num_resets": num_resets,
        **{f"weights/{name}": w for name, w in weights.items()},
    }
    outputs = {
        **{k: v for k, v in rec.items() if k != "action"},
        "last_value": last_value.astype(f32),
        "next_value": next_value,
        "advantages": advantages.numpy().astype(f32),
        "returns": returns.numpy().astype(f32),
    }
    return {"in": inputs, "out": outputs}
