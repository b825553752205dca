"""PyTorch reference for `jaxrl_rollout.algorithms.dqn` (torch 2.13.0).

Written to reproduce the computation of CleanRL's `dqn.py`
(https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/dqn.py) on one fixed
batch, not copied from it:

* the Q-network: Linear(obs, 120) ReLU Linear(120, 84) ReLU Linear(84, A);
* the target: `max_a' Q_target(s', a')`, times gamma and `(1 - done)`, plus
  r, under `torch.no_grad()`; `done` is `terminated | truncated` where a
  truncation ends the bootstrap ("done") and `terminated` alone as with
  SB3's `handle_timeout_termination` and CleanRL's stored terminations
  ("time_limits");
* the loss: `F.mse_loss(td_target, Q(s, a))`, then one `torch.optim.Adam`
  step (torch's defaults apart from lr);
* `linear_schedule(start_e, end_e, duration, t)`, the epsilon schedule;
* the target update `tau * q + (1 - tau) * target`, every
  `target_network_frequency` steps (tau = 1: a hard copy).

Inputs and outputs are NumPy arrays; weights are the torch `state_dict`
(Linear weight (out, in)).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def q_network(obs_dim: int, action_dim: int, hidden_sizes=(120, 84)) -> nn.Sequential:
    layers, width = [], obs_dim
    for h in hidden_sizes:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, action_dim))
    return nn.Sequential(*layers)


def state_dict_numpy(net: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def load_numpy(net: nn.Module, weights: dict[str, np.ndarray]) -> None:
    net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})


def dqn_step(q_weights: dict, target_weights: dict, batch: dict, gamma: float, lr: float, bootstrap: str,
             hidden_sizes=(120, 84)) -> dict[str, np.ndarray]:
    """One CleanRL DQN gradient step on `batch`; returns targets, loss, grads and the updated weights.

    `batch` holds obs [N, O], action [N] int, reward [N], next_obs [N, O],
    terminated [N] bool, truncated [N] bool.
    """
    obs = torch.from_numpy(np.asarray(batch["obs"], np.float32))
    next_obs = torch.from_numpy(np.asarray(batch["next_obs"], np.float32))
    action = torch.from_numpy(np.asarray(batch["action"], np.int64))
    reward = torch.from_numpy(np.asarray(batch["reward"], np.float32))
    terminated = np.asarray(batch["terminated"], bool)
    if bootstrap == "done":
        done_np = terminated | np.asarray(batch["truncated"], bool)
    elif bootstrap == "time_limits":
        done_np = terminated
    else:
        raise ValueError(bootstrap)
    done = torch.from_numpy(done_np.astype(np.float32))

    obs_dim, action_dim = obs.shape[1], q_weights[f"{2 * len(hidden_sizes)}.weight"].shape[0]
    q_net, target_net = q_network(obs_dim, action_dim, hidden_sizes), q_network(obs_dim, action_dim, hidden_sizes)
    load_numpy(q_net, q_weights)
    load_numpy(target_net, target_weights)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=lr)

    with torch.no_grad():
        target_max, _ = target_net(next_obs).max(dim=1)
        td_target = reward.flatten() + gamma * target_max * (1 - done.flatten())
    old_val = q_net(obs).gather(1, action.view(-1, 1)).squeeze()
    loss = F.mse_loss(td_target, old_val)
    optimizer.zero_grad()
    loss.backward()
    grads = {name: p.grad.detach().numpy().copy() for name, p in q_net.named_parameters()}
    optimizer.step()
    return {
        "td_target": td_target.numpy().copy(),
        "old_val": old_val.detach().numpy().copy(),
        "loss": np.float32(loss.item()),
        "grads": grads,
        "params": state_dict_numpy(q_net),
    }


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """CleanRL's epsilon schedule: a line from start_e falling to end_e over `duration` steps, then flat."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def target_update(q_weights: dict, target_weights: dict, tau: float, step: int, period: int) -> dict:
    """CleanRL's target update at `step`: `tau * q + (1 - tau) * target` when step % period == 0 (torch ops)."""
    q_net = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in q_weights.items()}
    target = {k: torch.from_numpy(np.asarray(v, np.float32)).clone() for k, v in target_weights.items()}
    if step % period == 0:
        for k in target:
            target[k].data.copy_(tau * q_net[k].data + (1.0 - tau) * target[k].data)
    return {k: v.numpy().copy() for k, v in target.items()}
