"""PyTorch (and NumPy, where the original is NumPy) reference implementations.

Written for jaxrl_rollout from the conventions in docs/semantics.md; each
function follows its original's loop structure, float32 arithmetic and masking
(multiplication, or select for rlplay), so the golden fixtures carry the
original's numerics. Inputs and outputs are NumPy arrays.
"""

from __future__ import annotations

import numpy as np
import torch

F32 = torch.float32


def _t(x):
    return torch.as_tensor(np.asarray(x))


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """CleanRL ppo.py: reversed loop over start flags, masks by multiplication."""
    rewards, values, dones = _t(rewards), _t(values), _t(dones).to(F32)
    next_value, next_done = _t(next_value), _t(next_done).to(F32)
    gamma, gae_lambda = float(gamma), float(gae_lambda)
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, following = 1.0 - next_done, next_value
        else:
            nonterminal, following = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * following * nonterminal - values[t]
        running = delta + gamma * gae_lambda * nonterminal * running
        advantages[t] = running
    return {"advantages": advantages.numpy(), "returns": (advantages + values).numpy()}


def torch_ac_gae(rewards, values, masks, next_value, next_mask, discount, gae_lambda):
    """torch-ac collect_experiences: masks[i] = 1 - start flag, next_mask for the last step."""
    rewards, values, masks = _t(rewards), _t(values), _t(masks)
    next_value, next_mask = _t(next_value), _t(next_mask)
    discount, gae_lambda = float(discount), float(gae_lambda)
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    for i in reversed(range(T)):
        m = masks[i + 1] if i < T - 1 else next_mask
        v = values[i + 1] if i < T - 1 else next_value
        a = advantages[i + 1] if i < T - 1 else 0
        delta = rewards[i] + discount * v * m - values[i]
        advantages[i] = delta + discount * gae_lambda * a * m
    return {"advantages": advantages.numpy(), "returns": (values + advantages).numpy()}


def arena_compute_advantages(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    """ARENA: vectorised deltas, then A_{T-1} = delta_{T-1} and a reversed loop."""
    rewards, values = _t(rewards), _t(values)
    terminated, next_terminated = _t(terminated).to(F32), _t(next_terminated).to(F32)
    next_value = _t(next_value)
    gamma, gae_lambda = float(gamma), float(gae_lambda)
    T = values.shape[0]
    following = torch.cat([values[1:], next_value[None]])
    following_term = torch.cat([terminated[1:], next_terminated[None]])
    deltas = rewards + gamma * following * (1.0 - following_term) - values
    advantages = torch.zeros_like(deltas)
    advantages[-1] = deltas[-1]
    for s in reversed(range(T - 1)):
        advantages[s] = deltas[s] + gamma * gae_lambda * (1.0 - terminated[s + 1]) * advantages[s + 1]
    return {"advantages": advantages.numpy()}


def sb3_compute_returns_and_advantage(rewards, values, episode_starts, last_values, dones, gamma, gae_lambda):
    """SB3 RolloutBuffer: NumPy float32 loop with episode_starts."""
    rewards, values = np.asarray(rewards, np.float32), np.asarray(values, np.float32)
    episode_starts = np.asarray(episode_starts, np.float32)
    last_values, dones = np.asarray(last_values, np.float32), np.asarray(dones, np.float32)
    gamma, gae_lambda = float(gamma), float(gae_lambda)
    T = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    running = np.zeros_like(rewards[0])
    for step in reversed(range(T)):
        if step == T - 1:
            nonterminal, following = 1.0 - dones, last_values
        else:
            nonterminal, following = 1.0 - episode_starts[step + 1], values[step + 1]
        delta = rewards[step] + gamma * following * nonterminal - values[step]
        running = delta + gamma * gae_lambda * nonterminal * running
        advantages[step] = running
    return {"advantages": advantages, "returns": advantages + values}


def torchrl_gae_loop(rewards, values, next_values, terminated, done, gamma, gae_lambda):
    """TorchRL generalized_advantage_estimate: batch-major [*B, T, 1], same-index flags."""
    def batch_major(x, dtype=F32):
        x = _t(x).to(dtype)
        return x.movedim(0, -1).unsqueeze(-1)  # [T, *B] -> [*B, T, 1]

    reward, state_value, next_state_value = batch_major(rewards), batch_major(values), batch_major(next_values)
    not_done, not_terminated = 1.0 - batch_major(done), 1.0 - batch_major(terminated)
    gamma, lmbda = float(gamma), float(gae_lambda)
    T = reward.shape[-2]
    advantage = torch.zeros_like(reward)
    running = torch.zeros_like(reward[..., 0, :])
    for t in reversed(range(T)):
        delta = reward[..., t, :] + gamma * next_state_value[..., t, :] * not_terminated[..., t, :] - state_value[..., t, :]
        running = delta + gamma * lmbda * not_done[..., t, :] * running
        advantage[..., t, :] = running
    target = advantage + state_value

    def time_major(x):
        return x.squeeze(-1).movedim(-1, 0).numpy()

    return {"advantages": time_major(advantage), "returns": time_major(target)}


def _discount_cut(rewards, dones, gamma):
    """baselines' discount_with_dones on Python lists: R = r + gamma R (1 - done), from R = 0."""
    out, running = [], 0
    for reward, done in zip(reversed(rewards), reversed(dones)):
        running = reward + gamma * running * (1.0 - done)
        out.append(running)
    return out[::-1]


def a2c_runner_returns(rewards, dones, last_values, gamma):
    """The A2C runner: per env row, bootstrap with V_T unless the last step is done."""
    rewards = np.asarray(rewards, np.float32).copy()
    dones, last_values = np.asarray(dones, bool), np.asarray(last_values, np.float32)
    gamma = float(gamma)
    for n in range(rewards.shape[0]):
        row, row_dones, value = rewards[n].tolist(), dones[n].tolist(), last_values[n]
        if row_dones[-1] == 0:
            returns = _discount_cut(row + [value], row_dones + [0], gamma)[:-1]
        else:
            returns = _discount_cut(row, row_dones, gamma)
        rewards[n] = returns
    return {"returns": rewards}


def ilpyt_compute_target(rewards, dones, next_value, gamma):
    """ilpyt compute_target: G = V(next_states[-1]), G_i = r_i + gamma G (1 - done_i), reversed."""
    rewards, dones, g = _t(rewards), _t(dones).to(F32), _t(next_value)
    gamma = float(gamma)
    targets = torch.zeros_like(rewards)
    for i in reversed(range(rewards.shape[0])):
        g = rewards[i] + gamma * g * (1.0 - dones[i])
        targets[i] = g
    return {"returns": targets.numpy()}


def rlplay_gae(rew, fin, value, gamma, gae_lambda):
    """rlplay engine/returns: rew = rew[1:], fin = fin[1:], val = value[:-1], bootstrap = value[-1].

    Select masking (masked_fill), and delta evaluated as gamma v' 1{not d} + (r - v).
    """
    rew, fin, value = _t(rew)[1:], _t(fin)[1:].to(torch.bool), _t(value)
    val, bootstrap = value[:-1], value[-1]
    gamma, lam = float(gamma), float(gae_lambda)
    T = rew.shape[0]
    following = torch.cat([val[1:], bootstrap[None]])
    delta = (gamma * following).masked_fill(fin, 0.0) + (rew - val)
    gae = torch.zeros_like(rew)
    running = torch.zeros_like(rew[0])
    for t in reversed(range(T)):
        running = delta[t] + (gamma * lam * running).masked_fill(fin[t], 0.0)
        gae[t] = running
    ret = torch.zeros_like(rew)
    running = bootstrap.clone()
    for t in reversed(range(T)):
        running = rew[t] + (gamma * running).masked_fill(fin[t], 0.0)
        ret[t] = running
    return {"advantages": gae.numpy(), "returns": ret.numpy()}


ESTIMATOR_REFERENCES = {
    "cleanrl": cleanrl_gae,
    "torch_ac": torch_ac_gae,
    "arena": arena_compute_advantages,
    "sb3": sb3_compute_returns_and_advantage,
    "torchrl": torchrl_gae_loop,
    "a2c": a2c_runner_returns,
    "ilpyt": ilpyt_compute_target,
    "rlplay": rlplay_gae,
}


def categorical(logits, probs, actions):
    """torch.distributions.Categorical from logits and from probs: log_prob and entropy."""
    from_logits = torch.distributions.Categorical(logits=_t(logits))
    from_probs = torch.distributions.Categorical(probs=_t(probs))
    a = _t(actions).to(torch.int64)
    return {
        "logits_log_prob": from_logits.log_prob(a).numpy(),
        "logits_entropy": from_logits.entropy().numpy(),
        "probs_log_prob": from_probs.log_prob(a).numpy(),
        "probs_entropy": from_probs.entropy().numpy(),
    }


def a2c_loss(values, probs, actions, returns, value_loss_coef, entropy_coef):
    """The A2C agent's `_update_network` loss, with autograd gradients w.r.t. values and probs.

    docs/semantics.md §9.2.
    """
    values = _t(values).clone().requires_grad_(True)
    probs = _t(probs).clone().requires_grad_(True)
    dist = torch.distributions.Categorical(probs)
    log_probs = dist.log_prob(_t(actions).to(torch.int64))
    advantages = _t(returns) - values
    value_loss = advantages.pow(2).mean()
    action_loss = -(advantages.detach() * log_probs).mean()
    entropy = dist.entropy().mean()
    total = action_loss + float(value_loss_coef) * value_loss - float(entropy_coef) * entropy
    total.backward()
    return {
        "total": total.detach().numpy(), "value_loss": value_loss.detach().numpy(),
        "action_loss": action_loss.detach().numpy(), "entropy": entropy.detach().numpy(),
        "grad_values": values.grad.numpy(), "grad_probs": probs.grad.numpy(),
    }
