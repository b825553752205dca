"""PyTorch reference for one CleanRL PPO update (and one A2C agent update), from fixed weights and a fixed batch.

Written to docs/semantics.md §8 to §11: per-minibatch advantage
normalisation with torch's unbiased std, the clipped surrogate, the clipped
value loss with its 1/2, `clip_grad_norm_` and Adam(eps=1e-5); the A2C agent's
loss (docs/semantics.md §9.2) with `clip_grad_norm_` and RMSprop. Minibatch indices are inputs, so the
JAX side replays the same permutation.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from tests.golden.cartpole_reference import orthogonal_linear

OBS_DIM, NUM_ACTIONS, HIDDEN = 4, 2, 64


class Agent(nn.Module):
    """CleanRL's CartPole agent: separate 2 x 64 tanh critic and actor."""

    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(orthogonal_linear(OBS_DIM, HIDDEN, math.sqrt(2)), nn.Tanh(),
                                    orthogonal_linear(HIDDEN, HIDDEN, math.sqrt(2)), nn.Tanh(), orthogonal_linear(HIDDEN, 1, 1.0))
        self.actor = nn.Sequential(orthogonal_linear(OBS_DIM, HIDDEN, math.sqrt(2)), nn.Tanh(),
                                   orthogonal_linear(HIDDEN, HIDDEN, math.sqrt(2)), nn.Tanh(), orthogonal_linear(HIDDEN, NUM_ACTIONS, 0.01))

    def evaluate(self, obs, action):
        dist = torch.distributions.Categorical(logits=self.actor(obs))
        return dist.log_prob(action), dist.entropy(), self.critic(obs).squeeze(-1)


def make_case(seed: int = 0, batch: int = 64, epochs: int = 2, minibatches: int = 4) -> dict:
    """Weights (torch layout), a batch and the minibatch indices."""
    torch.manual_seed(seed)
    agent = Agent()
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(batch, OBS_DIM)).astype(np.float32)
    actions = rng.integers(0, NUM_ACTIONS, size=batch)
    with torch.no_grad():
        logp, _, values = agent.evaluate(torch.tensor(obs), torch.tensor(actions))
    old_log_prob = (logp.numpy() + rng.normal(scale=0.3, size=batch)).astype(np.float32)
    old_value = (values.numpy() + rng.normal(scale=0.3, size=batch)).astype(np.float32)
    advantages = (rng.normal(size=batch) * 2).astype(np.float32)
    indices = np.stack([rng.permutation(batch).reshape(minibatches, -1) for _ in range(epochs)])
    weights = {k: v.detach().numpy().copy() for k, v in agent.state_dict().items()}
    return {
        "weights": weights, "obs": obs, "actions": actions, "old_log_prob": old_log_prob,
        "old_value": old_value, "advantages": advantages, "returns": (advantages + old_value).astype(np.float32),
        "indices": indices,
    }


def _agent(weights):
    agent = Agent()
    agent.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    return agent


def ppo_update(case: dict, lr=1e-2, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5) -> dict:
    agent = _agent(case["weights"])
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    t = {k: torch.tensor(case[k]) for k in ("obs", "actions", "old_log_prob", "old_value", "advantages", "returns")}
    records = {k: [] for k in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")}
    first_grads = None
    for epoch_indices in case["indices"]:
        for mb in epoch_indices:
            mb = torch.as_tensor(mb)
            new_log_prob, entropy, new_value = agent.evaluate(t["obs"][mb], t["actions"][mb])
            log_ratio = new_log_prob - t["old_log_prob"][mb]
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
            adv = t["advantages"][mb]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
            unclipped = (new_value - t["returns"][mb]) ** 2
            clipped = t["old_value"][mb] + torch.clamp(new_value - t["old_value"][mb], -clip_coef, clip_coef)
            v_loss = 0.5 * torch.max(unclipped, (clipped - t["returns"][mb]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
            optimizer.zero_grad()
            loss.backward()
            if first_grads is None:
                first_grads = {k: p.grad.detach().numpy().copy() for k, p in agent.named_parameters()}
            grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
            optimizer.step()
            for k, v in (("loss", loss), ("policy_loss", pg_loss), ("value_loss", v_loss), ("entropy", entropy_loss),
                         ("approx_kl", approx_kl), ("clip_fraction", clip_fraction), ("grad_norm", grad_norm)):
                records[k].append(float(torch.as_tensor(v).detach()))
    out = {k: np.array(v, np.float32) for k, v in records.items()}
    out.update({f"grad0/{k}": v for k, v in first_grads.items()})
    out.update({f"params/{k}": v.detach().numpy().copy() for k, v in agent.state_dict().items()})
    return out


def a2c_update(case: dict, lr=7e-4, alpha=0.99, eps=1e-5, vf_coef=0.5, ent_coef=0.01, max_grad_norm=0.5) -> dict:
    """The A2C agent's `_update_network` on the whole batch (Categorical from softmax probabilities)."""
    agent = _agent(case["weights"])
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=lr, alpha=alpha, eps=eps)
    obs, actions = torch.tensor(case["obs"]), torch.tensor(case["actions"])
    returns = torch.tensor(case["returns"]).unsqueeze(1)
    values = agent.critic(obs)
    pi = torch.softmax(agent.actor(obs), dim=-1)
    dist = torch.distributions.Categorical(pi)
    log_probs = dist.log_prob(actions).unsqueeze(1)
    advantages = returns - values
    value_loss = advantages.pow(2).mean()
    action_loss = -(advantages.detach() * log_probs).mean()
    entropy = dist.entropy().mean()
    total = action_loss + vf_coef * value_loss - ent_coef * entropy
    optimizer.zero_grad()
    total.backward()
    grads = {k: p.grad.detach().numpy().copy() for k, p in agent.named_parameters()}
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
    optimizer.step()
    out = {"loss": np.float32(total.item()), "value_loss": np.float32(value_loss.item()),
           "policy_loss": np.float32(action_loss.item()), "entropy": np.float32(entropy.item()),
           "grad_norm": np.float32(grad_norm.item())}
    out.update({f"grad/{k}": v for k, v in grads.items()})
    out.update({f"params/{k}": v.detach().numpy().copy() for k, v in agent.state_dict().items()})
    return out
