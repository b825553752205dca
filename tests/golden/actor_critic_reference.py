"""PyTorch references for one SAC update (CleanRL's and SB3's) and one TD3 update (CleanRL's), docs/semantics.md §21.

Each function replays one iteration of the reference's training loop on a
fixed batch from fixed weights, in the reference's order of operations:

- CleanRL `sac_continuous_action.py`: critic step, one actor step (with the
  critics just updated), one temperature step (a fresh sample from the
  updated actor), Polyak update of both target critics.
- SB3 `SAC.train`: temperature step first (sample from the current actor),
  the target with the temperature from before that step, critic step with
  0.5 * (sum of MSEs), actor step (its sample from before the critic step,
  scored by the updated critics), SB3's in-place `polyak_update`. Its replay
  buffer with `handle_timeout_termination=True` is emulated:
  done = (terminated | truncated) * (1 - timeout), timeout = truncated & ~terminated.
- CleanRL `td3_continuous_action.py`: smoothed target actions, critic step,
  actor step on -Q1, Polyak update of the target actor and critics.

Every `rsample` is written as torch's own formula `loc + eps * scale` with
the standard-normal draws `eps` passed in, so the JAX side can replay them.
Networks use torch's default `nn.Linear` init (weights are passed as data).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

OBS_DIM, ACT_DIM, HIDDEN, BATCH = 3, 2, 16, 32
LOG_STD_MAX, LOG_STD_MIN = 2, -5  # CleanRL
SB3_LOG_STD_MIN = -20
# CleanRL SAC case: asymmetric bounds, so scale and bias both matter.
SAC_LOW, SAC_HIGH = np.array([-2.0, -0.5], np.float32), np.array([2.0, 1.5], np.float32)
# TD3 case: CleanRL clamps to the scalars low[0], high[0]; equal bounds on every dimension.
TD3_LOW, TD3_HIGH = np.array([-2.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32)
GAMMA, TAU = 0.99, 0.005
DELAYED_STEPS, POLICY_FREQUENCY = 4, 2  # CleanRL's global_step 1..4: the actor and targets move at 2 and 4
POLICY_NOISE, NOISE_CLIP = 0.2, 0.5


class SoftQNetwork(nn.Module):
    """CleanRL's `SoftQNetwork` / `QNetwork` (SB3's critic has the same layers): Q(cat(obs, action))."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(OBS_DIM + ACT_DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class SacActor(nn.Module):
    """CleanRL's SAC `Actor` (tanh-rescaled log-std) or, with sb3=True, SB3's (clamped log-std, [-1, 1] actions)."""

    def __init__(self, low, high, sb3: bool = False):
        super().__init__()
        self.sb3 = sb3
        self.fc1 = nn.Linear(OBS_DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mean = nn.Linear(HIDDEN, ACT_DIM)
        self.fc_logstd = nn.Linear(HIDDEN, ACT_DIM)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        mean = self.fc_mean(x)
        log_std = self.fc_logstd(x)
        if self.sb3:
            log_std = torch.clamp(log_std, SB3_LOG_STD_MIN, LOG_STD_MAX)
        else:
            log_std = torch.tanh(log_std)
            log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x, eps):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.loc + eps * normal.scale  # rsample with the given draws
        y_t = torch.tanh(x_t)
        if self.sb3:  # SquashedDiagGaussianDistribution.log_prob
            log_prob = normal.log_prob(x_t).sum(dim=1)
            log_prob -= torch.sum(torch.log(1 - y_t**2 + 1e-6), dim=1)
            return y_t, log_prob, torch.tanh(mean)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


class Td3Actor(nn.Module):
    """CleanRL's TD3 `Actor`: tanh(fc_mu) * action_scale + action_bias."""

    def __init__(self, low, high):
        super().__init__()
        self.fc1 = nn.Linear(OBS_DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc_mu = nn.Linear(HIDDEN, ACT_DIM)
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        return torch.tanh(self.fc_mu(x)) * self.action_scale + self.action_bias


def _params(module: nn.Module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.named_parameters()}


def _grads(module: nn.Module) -> dict:
    return {k: v.grad.detach().numpy().copy() for k, v in module.named_parameters()}


def _load(module: nn.Module, weights: dict) -> nn.Module:
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    return module


def make_case(seed: int = 0) -> dict:
    """Weights (torch's default init, torch layout), a batch with both flags and the standard-normal draws."""
    torch.manual_seed(seed)
    nets = {
        "sac_actor": SacActor(SAC_LOW, SAC_HIGH), "td3_actor": Td3Actor(TD3_LOW, TD3_HIGH),
        "td3_target_actor": Td3Actor(TD3_LOW, TD3_HIGH),
        "qf1": SoftQNetwork(), "qf2": SoftQNetwork(), "qf1_target": SoftQNetwork(), "qf2_target": SoftQNetwork(),
    }
    weights = {name: _params(net) for name, net in nets.items()}
    # SB3's actor: the SAC actor's weights with the log-std bias lowered by 1.5 (std about 0.2, as
    # CleanRL's tanh-rescaled log-std gives here), so tanh stays away from saturation, where 1-ulp
    # differences of tanh are amplified (docs/semantics.md §21.1). Its clamp is checked by `clamp_log_std`.
    weights["sb3_actor"] = {k: v.copy() for k, v in weights["sac_actor"].items()}
    weights["sb3_actor"]["fc_logstd.bias"] = weights["sb3_actor"]["fc_logstd.bias"] - np.float32(1.5)
    # TD3's target actor pushed towards the upper bound on the first dimension, so the smoothed
    # target actions get clipped there.
    weights["td3_target_actor"]["fc_mu.bias"] = weights["td3_target_actor"]["fc_mu.bias"] + np.float32([1.5, 0.0])
    rng = np.random.default_rng(seed)
    terminated = rng.random(BATCH) < 0.25
    truncated = rng.random(BATCH) < 0.25
    truncated[:2], terminated[:2] = True, [True, False]  # both flags at once, and a pure time limit
    case = {
        "obs": rng.normal(size=(BATCH, OBS_DIM)).astype(np.float32),
        "next_obs": rng.normal(size=(BATCH, OBS_DIM)).astype(np.float32),
        "sac_actions": rng.uniform(SAC_LOW, SAC_HIGH, size=(BATCH, ACT_DIM)).astype(np.float32),
        "sb3_actions": rng.uniform(-1.0, 1.0, size=(BATCH, ACT_DIM)).astype(np.float32),
        "td3_actions": rng.uniform(TD3_LOW, TD3_HIGH, size=(BATCH, ACT_DIM)).astype(np.float32),
        "rewards": rng.normal(size=BATCH).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "log_alpha": np.array([-1.0], np.float32),
    }
    for name in ("noise_next", "noise_pi", "noise_alpha", "noise_td3"):
        case[name] = rng.standard_normal(size=(BATCH, ACT_DIM)).astype(np.float32)
    # per-step draws for the multi-step TD3 run (`td3_delayed_updates`)
    case["noise_td3_steps"] = rng.standard_normal(size=(DELAYED_STEPS, BATCH, ACT_DIM)).astype(np.float32)
    # per-step draws for the multi-step CleanRL SAC run (`cleanrl_sac_delayed_updates`): the target's, and
    # the actor's and the temperature's for each of the policy_frequency inner iterations
    case["noise_sac_next_steps"] = rng.standard_normal(size=(DELAYED_STEPS, BATCH, ACT_DIM)).astype(np.float32)
    for name in ("noise_sac_pi_steps", "noise_sac_alpha_steps"):
        case[name] = rng.standard_normal(size=(DELAYED_STEPS, POLICY_FREQUENCY, BATCH, ACT_DIM)).astype(np.float32)
    for net, w in weights.items():
        case.update({f"weights/{net}/{k}": v for k, v in w.items()})
    return case


def clamp_log_std() -> dict:
    """SB3's `th.clamp(log_std, -20, 2)` on values across both bounds, with the gradient of sum(w * log_std)."""
    raw = torch.tensor([-25.0, -20.5, -20.0, -19.5, -5.0, 0.0, 1.5, 2.0, 2.5, 7.0], requires_grad=True)
    w = torch.linspace(0.5, 1.5, raw.numel())
    log_std = torch.clamp(raw, SB3_LOG_STD_MIN, LOG_STD_MAX)
    (w * log_std).sum().backward()
    return {"raw": raw.detach().numpy().copy(), "w": w.numpy(), "log_std": log_std.detach().numpy(),
            "grad": raw.grad.numpy().copy()}


def _weights(case: dict, net: str) -> dict:
    prefix = f"weights/{net}/"
    return {k[len(prefix):]: v for k, v in case.items() if k.startswith(prefix)}


def _qnets(case: dict):
    return [_load(SoftQNetwork(), _weights(case, n)) for n in ("qf1", "qf2", "qf1_target", "qf2_target")]


def cleanrl_sac_update(case: dict, q_lr: float = 1e-3, policy_lr: float = 3e-4) -> dict:
    """One iteration of CleanRL's SAC loop with done = terminated | truncated (its pre-gymnasium `dones`)."""
    t = {k: torch.tensor(v) for k, v in case.items() if not k.startswith("weights/")}
    actor = _load(SacActor(SAC_LOW, SAC_HIGH), _weights(case, "sac_actor"))
    qf1, qf2, qf1_target, qf2_target = _qnets(case)
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=q_lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=policy_lr)
    target_entropy = -torch.prod(torch.Tensor([ACT_DIM])).item()
    log_alpha = t["log_alpha"].clone().requires_grad_(True)
    alpha = log_alpha.exp().item()
    a_optimizer = torch.optim.Adam([log_alpha], lr=q_lr)
    dones = (t["terminated"] | t["truncated"]).float()
    out = {}
    with torch.no_grad():
        next_state_actions, next_state_log_pi, _ = actor.get_action(t["next_obs"], t["noise_next"])
        qf1_next_target = qf1_target(t["next_obs"], next_state_actions)
        qf2_next_target = qf2_target(t["next_obs"], next_state_actions)
        min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
        next_q_value = t["rewards"].flatten() + (1 - dones.flatten()) * GAMMA * (min_qf_next_target).view(-1)
    qf1_a_values = qf1(t["obs"], t["sac_actions"]).view(-1)
    qf2_a_values = qf2(t["obs"], t["sac_actions"]).view(-1)
    qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
    qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
    qf_loss = qf1_loss + qf2_loss
    q_optimizer.zero_grad()
    qf_loss.backward()
    out.update({f"grad/qf1/{k}": v for k, v in _grads(qf1).items()})
    out.update({f"grad/qf2/{k}": v for k, v in _grads(qf2).items()})
    q_optimizer.step()

    pi, log_pi, _ = actor.get_action(t["obs"], t["noise_pi"])
    qf1_pi = qf1(t["obs"], pi)
    qf2_pi = qf2(t["obs"], pi)
    min_qf_pi = torch.min(qf1_pi, qf2_pi)
    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
    actor_optimizer.zero_grad()
    actor_loss.backward()
    out.update({f"grad/actor/{k}": v for k, v in _grads(actor).items()})
    actor_optimizer.step()

    with torch.no_grad():
        _, alpha_log_pi, _ = actor.get_action(t["obs"], t["noise_alpha"])
    alpha_loss = (-log_alpha.exp() * (alpha_log_pi + target_entropy)).mean()
    a_optimizer.zero_grad()
    alpha_loss.backward()
    out["grad/log_alpha"] = log_alpha.grad.detach().numpy().copy()
    a_optimizer.step()

    for param, target_param in zip(qf1.parameters(), qf1_target.parameters(), strict=True):
        target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)
    for param, target_param in zip(qf2.parameters(), qf2_target.parameters(), strict=True):
        target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)

    with torch.no_grad():
        _, _, mean_action = actor.get_action(t["obs"], t["noise_pi"])
    out.update({
        "next_actions": next_state_actions.numpy(), "next_log_pi": next_state_log_pi.view(-1).numpy(),
        "target": next_q_value.numpy(), "qf1_loss": qf1_loss.detach().numpy(), "qf2_loss": qf2_loss.detach().numpy(),
        "qf_loss": qf_loss.detach().numpy(), "pi": pi.detach().numpy(), "log_pi": log_pi.detach().view(-1).numpy(),
        "actor_loss": actor_loss.detach().numpy(), "alpha_log_pi": alpha_log_pi.view(-1).numpy(),
        "alpha_loss": alpha_loss.detach().numpy(), "log_alpha": log_alpha.detach().numpy().copy(),
        "mean_action_after": mean_action.numpy(),
    })
    for name, net in (("qf1", qf1), ("qf2", qf2), ("actor", actor), ("qf1_target", qf1_target), ("qf2_target", qf2_target)):
        out.update({f"params/{name}/{k}": v for k, v in _params(net).items()})
    return {k: np.asarray(v) for k, v in out.items()}


def sb3_sac_update(case: dict, lr: float = 3e-4) -> dict:
    """One gradient step of SB3's `SAC.train` (ent_coef="auto") with `handle_timeout_termination=True`."""
    t = {k: torch.tensor(v) for k, v in case.items() if not k.startswith("weights/")}
    actor = _load(SacActor(SAC_LOW, SAC_HIGH, sb3=True), _weights(case, "sb3_actor"))
    qf1, qf2, qf1_target, qf2_target = _qnets(case)
    critic_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=lr)
    target_entropy = float(-np.prod((ACT_DIM,)).astype(np.float32))
    log_ent_coef = t["log_alpha"].clone().requires_grad_(True)
    ent_coef_optimizer = torch.optim.Adam([log_ent_coef], lr=lr)
    # the buffer: dones = terminated | truncated, timeouts = TimeLimit.truncated = truncated and not terminated
    dones = (t["terminated"] | t["truncated"]).float()
    timeouts = (t["truncated"] & ~t["terminated"]).float()
    sampled_dones = (dones * (1 - timeouts)).reshape(-1, 1)
    rewards = t["rewards"].reshape(-1, 1)
    out = {}

    actions_pi, log_prob = actor.get_action(t["obs"], t["noise_pi"])[:2]
    log_prob = log_prob.reshape(-1, 1)
    ent_coef = torch.exp(log_ent_coef.detach())
    ent_coef_loss = -(log_ent_coef * (log_prob + target_entropy).detach()).mean()
    ent_coef_optimizer.zero_grad()
    ent_coef_loss.backward()
    out["grad/log_alpha"] = log_ent_coef.grad.detach().numpy().copy()
    ent_coef_optimizer.step()

    with torch.no_grad():
        next_actions, next_log_prob = actor.get_action(t["next_obs"], t["noise_next"])[:2]
        next_q_values = torch.cat([qf1_target(t["next_obs"], next_actions), qf2_target(t["next_obs"], next_actions)], dim=1)
        next_q_values, _ = torch.min(next_q_values, dim=1, keepdim=True)
        next_q_values = next_q_values - ent_coef * next_log_prob.reshape(-1, 1)
        target_q_values = rewards + (1 - sampled_dones) * GAMMA * next_q_values
    current_q_values = (qf1(t["obs"], t["sb3_actions"]), qf2(t["obs"], t["sb3_actions"]))
    critic_loss = 0.5 * sum(F.mse_loss(current_q, target_q_values) for current_q in current_q_values)
    critic_optimizer.zero_grad()
    critic_loss.backward()
    out.update({f"grad/qf1/{k}": v for k, v in _grads(qf1).items()})
    out.update({f"grad/qf2/{k}": v for k, v in _grads(qf2).items()})
    critic_optimizer.step()

    q_values_pi = torch.cat([qf1(t["obs"], actions_pi), qf2(t["obs"], actions_pi)], dim=1)
    min_qf_pi, _ = torch.min(q_values_pi, dim=1, keepdim=True)
    actor_loss = (ent_coef * log_prob - min_qf_pi).mean()
    actor_optimizer.zero_grad()
    actor_loss.backward()
    out.update({f"grad/actor/{k}": v for k, v in _grads(actor).items()})
    actor_optimizer.step()

    with torch.no_grad():
        for params, targets in ((qf1.parameters(), qf1_target.parameters()), (qf2.parameters(), qf2_target.parameters())):
            for param, target_param in zip(params, targets, strict=True):
                target_param.data.mul_(1 - TAU)
                torch.add(target_param.data, param.data, alpha=TAU, out=target_param.data)

    with torch.no_grad():
        _, log_std = actor(t["obs"])
    out.update({
        "done": sampled_dones.view(-1).numpy(), "next_actions": next_actions.numpy(),
        "next_log_pi": next_log_prob.view(-1).numpy(), "target": target_q_values.view(-1).numpy(),
        "critic_loss": critic_loss.detach().numpy(), "pi": actions_pi.detach().numpy(),
        "log_pi": log_prob.detach().view(-1).numpy(), "actor_loss": actor_loss.detach().numpy(),
        "alpha_loss": ent_coef_loss.detach().numpy(), "log_alpha": log_ent_coef.detach().numpy().copy(),
        "log_std_after": log_std.numpy(),
    })
    for name, net in (("qf1", qf1), ("qf2", qf2), ("actor", actor), ("qf1_target", qf1_target), ("qf2_target", qf2_target)):
        out.update({f"params/{name}/{k}": v for k, v in _params(net).items()})
    return {k: np.asarray(v) for k, v in out.items()}


def td3_update(case: dict, lr: float = 3e-4) -> dict:
    """One iteration of CleanRL's TD3 loop at a step where the delayed update runs (done = terminated, as it stores)."""
    t = {k: torch.tensor(v) for k, v in case.items() if not k.startswith("weights/")}
    actor = _load(Td3Actor(TD3_LOW, TD3_HIGH), _weights(case, "td3_actor"))
    target_actor = _load(Td3Actor(TD3_LOW, TD3_HIGH), _weights(case, "td3_target_actor"))
    qf1, qf2, qf1_target, qf2_target = _qnets(case)
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=lr)
    dones = t["terminated"].float()
    out = {}
    with torch.no_grad():
        clipped_noise = (t["noise_td3"] * POLICY_NOISE).clamp(-NOISE_CLIP, NOISE_CLIP) * target_actor.action_scale
        next_state_actions = (target_actor(t["next_obs"]) + clipped_noise).clamp(float(TD3_LOW[0]), float(TD3_HIGH[0]))
        qf1_next_target = qf1_target(t["next_obs"], next_state_actions)
        qf2_next_target = qf2_target(t["next_obs"], next_state_actions)
        min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
        next_q_value = t["rewards"].flatten() + (1 - dones.flatten()) * GAMMA * (min_qf_next_target).view(-1)
    qf1_a_values = qf1(t["obs"], t["td3_actions"]).view(-1)
    qf2_a_values = qf2(t["obs"], t["td3_actions"]).view(-1)
    qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
    qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
    qf_loss = qf1_loss + qf2_loss
    q_optimizer.zero_grad()
    qf_loss.backward()
    out.update({f"grad/qf1/{k}": v for k, v in _grads(qf1).items()})
    out.update({f"grad/qf2/{k}": v for k, v in _grads(qf2).items()})
    q_optimizer.step()

    actor_loss = -qf1(t["obs"], actor(t["obs"])).mean()
    actor_optimizer.zero_grad()
    actor_loss.backward()
    out.update({f"grad/actor/{k}": v for k, v in _grads(actor).items()})
    actor_optimizer.step()
    for net, target in ((actor, target_actor), (qf1, qf1_target), (qf2, qf2_target)):
        for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
            target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)

    out.update({
        "next_actions": next_state_actions.numpy(), "target": next_q_value.numpy(),
        "qf1_loss": qf1_loss.detach().numpy(), "qf2_loss": qf2_loss.detach().numpy(), "qf_loss": qf_loss.detach().numpy(),
        "actor_loss": actor_loss.detach().numpy(),
    })
    for name, net in (("qf1", qf1), ("qf2", qf2), ("actor", actor), ("target_actor", target_actor),
                      ("qf1_target", qf1_target), ("qf2_target", qf2_target)):
        out.update({f"params/{name}/{k}": v for k, v in _params(net).items()})
    return {k: np.asarray(v) for k, v in out.items()}


def td3_delayed_updates(case: dict, lr: float = 3e-4) -> dict:
    """CleanRL's TD3 loop for global_step = 1..DELAYED_STEPS on the case's batch (one draw per step).

    The critics step every time; at `global_step % policy_frequency == 0` the actor steps and the three
    targets move. Adam's state carries over between steps.
    """
    t = {k: torch.tensor(v) for k, v in case.items() if not k.startswith("weights/")}
    actor = _load(Td3Actor(TD3_LOW, TD3_HIGH), _weights(case, "td3_actor"))
    target_actor = _load(Td3Actor(TD3_LOW, TD3_HIGH), _weights(case, "td3_target_actor"))
    qf1, qf2, qf1_target, qf2_target = _qnets(case)
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=lr)
    dones = t["terminated"].float()
    qf_losses, actor_losses = [], []
    for step, noise in zip(range(1, DELAYED_STEPS + 1), t["noise_td3_steps"], strict=True):
        with torch.no_grad():
            clipped_noise = (noise * POLICY_NOISE).clamp(-NOISE_CLIP, NOISE_CLIP) * target_actor.action_scale
            next_state_actions = (target_actor(t["next_obs"]) + clipped_noise).clamp(float(TD3_LOW[0]), float(TD3_HIGH[0]))
            min_qf_next_target = torch.min(qf1_target(t["next_obs"], next_state_actions),
                                           qf2_target(t["next_obs"], next_state_actions))
            next_q_value = t["rewards"].flatten() + (1 - dones.flatten()) * GAMMA * (min_qf_next_target).view(-1)
        qf1_loss = F.mse_loss(qf1(t["obs"], t["td3_actions"]).view(-1), next_q_value)
        qf2_loss = F.mse_loss(qf2(t["obs"], t["td3_actions"]).view(-1), next_q_value)
        qf_loss = qf1_loss + qf2_loss
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        qf_losses.append(qf_loss.item())
        if step % POLICY_FREQUENCY == 0:
            actor_loss = -qf1(t["obs"], actor(t["obs"])).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            actor_losses.append(actor_loss.item())
            for net, target in ((actor, target_actor), (qf1, qf1_target), (qf2, qf2_target)):
                for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
                    target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)
    out = {"qf_loss": np.array(qf_losses, np.float32), "actor_loss": np.array(actor_losses, np.float32)}
    for name, net in (("qf1", qf1), ("qf2", qf2), ("actor", actor), ("target_actor", target_actor),
                      ("qf1_target", qf1_target), ("qf2_target", qf2_target)):
        out.update({f"params/{name}/{k}": v for k, v in _params(net).items()})
    return out


def cleanrl_sac_delayed_updates(case: dict, q_lr: float = 1e-3, policy_lr: float = 3e-4) -> dict:
    """CleanRL's SAC loop for global_step = 1..DELAYED_STEPS (policy_frequency 2, target_network_frequency 1).

    Every step: critic step, then the Polyak update; at even steps, between the two, policy_frequency
    iterations of (actor step, temperature step), each with fresh draws, alpha refreshed after each.
    done = terminated | truncated, as `cleanrl_sac_update`. Adam's states carry over.
    """
    t = {k: torch.tensor(v) for k, v in case.items() if not k.startswith("weights/")}
    actor = _load(SacActor(SAC_LOW, SAC_HIGH), _weights(case, "sac_actor"))
    qf1, qf2, qf1_target, qf2_target = _qnets(case)
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=q_lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=policy_lr)
    target_entropy = -torch.prod(torch.Tensor([ACT_DIM])).item()
    log_alpha = t["log_alpha"].clone().requires_grad_(True)
    alpha = log_alpha.exp().item()
    a_optimizer = torch.optim.Adam([log_alpha], lr=q_lr)
    dones = (t["terminated"] | t["truncated"]).float()
    qf_losses, actor_losses, alpha_losses = [], [], []
    for i, global_step in enumerate(range(1, DELAYED_STEPS + 1)):
        with torch.no_grad():
            next_state_actions, next_state_log_pi, _ = actor.get_action(t["next_obs"], t["noise_sac_next_steps"][i])
            min_qf_next_target = torch.min(qf1_target(t["next_obs"], next_state_actions),
                                           qf2_target(t["next_obs"], next_state_actions)) - alpha * next_state_log_pi
            next_q_value = t["rewards"].flatten() + (1 - dones.flatten()) * GAMMA * (min_qf_next_target).view(-1)
        qf_loss = F.mse_loss(qf1(t["obs"], t["sac_actions"]).view(-1), next_q_value) + F.mse_loss(
            qf2(t["obs"], t["sac_actions"]).view(-1), next_q_value)
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        qf_losses.append(qf_loss.item())
        if global_step % POLICY_FREQUENCY == 0:
            for j in range(POLICY_FREQUENCY):
                pi, log_pi, _ = actor.get_action(t["obs"], t["noise_sac_pi_steps"][i, j])
                min_qf_pi = torch.min(qf1(t["obs"], pi), qf2(t["obs"], pi))
                actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                actor_losses.append(actor_loss.item())
                with torch.no_grad():
                    _, log_pi, _ = actor.get_action(t["obs"], t["noise_sac_alpha_steps"][i, j])
                alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                a_optimizer.zero_grad()
                alpha_loss.backward()
                a_optimizer.step()
                alpha = log_alpha.exp().item()
                alpha_losses.append(alpha_loss.item())
        for net, target in ((qf1, qf1_target), (qf2, qf2_target)):
            for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
                target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)
    out = {"qf_loss": np.array(qf_losses, np.float32), "actor_loss": np.array(actor_losses, np.float32),
           "alpha_loss": np.array(alpha_losses, np.float32), "log_alpha": log_alpha.detach().numpy().copy()}
    for name, net in (("qf1", qf1), ("qf2", qf2), ("actor", actor), ("qf1_target", qf1_target), ("qf2_target", qf2_target)):
        out.update({f"params/{name}/{k}": v for k, v in _params(net).items()})
    return out
