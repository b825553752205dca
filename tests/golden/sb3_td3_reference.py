"""Stable-Baselines3's own `TD3.train` as the reference for whole TD3 steps (docs/semantics.md §21.7).

Nothing of SB3's update is transcribed here: the published package
(`stable-baselines3==2.9.2`, on the pinned torch 2.13.0 CPU) runs its own
`TD3.train(gradient_steps, batch_size)` on its own `ReplayBuffer`, and this
module only sets the stage and watches:

- a `TD3("MlpPolicy", ...)` with 16-16 networks on a two-dimensional Box with
  asymmetric bounds (the update never sees them: SB3 stores and learns in the
  [-1, 1] scaled action space); the target networks, which SB3 starts as
  copies, are moved off the online ones so every Polyak update shows, and the
  target actor's last bias is pushed to both ends so smoothed actions get
  clipped at both bounds;
- a buffer of `BUFFER` transitions filled through `ReplayBuffer.add` with
  `handle_timeout_termination=True`: `done = terminated or truncated` and the
  info `TimeLimit.truncated = truncated and not terminated`, as SB3's VecEnvs
  report them, and `next_obs` the true final observation (SB3's
  `terminal_observation`);
- `TRAIN_CALLS` calls of `train`, five of one gradient step (SB3's default
  `train_freq=1, gradient_steps=1`) and one of three, so `_n_updates` runs
  1..8 across calls and the actor and targets move at 2, 4, 6 and 8.

What is recorded, with spies only (nothing SB3 computes is replaced): the
buffer indices SB3's `sample` drew and the `dones` it returned (a wrapper
around the buffer's `_get_samples`), the target actor's output and the
smoothed next actions (forward hooks on `actor_target` and `critic_target`),
the losses SB3 logs (a `Logger` without outputs, dumped after each call),
`_n_updates`, and every parameter after each call. The standard-normal draws
behind SB3's `normal_(0, target_policy_noise)` are recovered by reseeding
torch's generator before each call and drawing the same shapes again; that
they are the ones SB3 used is checked exactly against the hooked actions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

SB3_PIN = "2.9.2"
OBS_DIM, ACT_DIM, HIDDEN = 3, 2, 16
BUFFER, BATCH = 64, 32
LOW, HIGH = np.array([-2.0, -0.5], np.float32), np.array([2.0, 1.5], np.float32)
LR, GAMMA, TAU = 1e-3, 0.99, 0.05
POLICY_DELAY = 2
# Larger than SB3's defaults (0.2, 0.5) so the noise clip binds on many draws of a small batch.
POLICY_NOISE, NOISE_CLIP = 0.3, 0.4
TRAIN_CALLS = (1, 1, 1, 1, 1, 3)  # gradient_steps of each train() call: _n_updates 1..5, then 6..8
SEED = 0

NETS = ("actor", "actor_target", "critic", "critic_target")


class SpacesOnly(gym.Env):
    """The spaces TD3 is built for; train() never steps an env."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = gym.spaces.Box(LOW, HIGH, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(OBS_DIM, np.float32), {}

    def step(self, action):
        return np.zeros(OBS_DIM, np.float32), 0.0, False, False, {}


def make_buffer(seed: int = SEED) -> dict:
    """BUFFER transitions with every (terminated, truncated) combination; actions in SB3's [-1, 1]."""
    rng = np.random.default_rng(seed)
    terminated = rng.random(BUFFER) < 0.25
    truncated = rng.random(BUFFER) < 0.25
    terminated[:4], truncated[:4] = [True, True, False, False], [True, False, True, False]
    return {
        "obs": rng.normal(size=(BUFFER, OBS_DIM)).astype(np.float32),
        "next_obs": rng.normal(size=(BUFFER, OBS_DIM)).astype(np.float32),
        "actions": rng.uniform(-1.0, 1.0, size=(BUFFER, ACT_DIM)).astype(np.float32),
        "rewards": rng.normal(size=BUFFER).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }


def _state(module: torch.nn.Module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def make_model(seed: int = SEED):
    """SB3's TD3 with small networks and targets moved off the online networks (torch's default init)."""
    from stable_baselines3 import TD3
    from stable_baselines3.common.logger import Logger

    torch.manual_seed(seed)
    model = TD3(
        "MlpPolicy", SpacesOnly(), learning_rate=LR, buffer_size=BUFFER, batch_size=BATCH, tau=TAU, gamma=GAMMA,
        policy_delay=POLICY_DELAY, target_policy_noise=POLICY_NOISE, target_noise_clip=NOISE_CLIP,
        replay_buffer_kwargs={"handle_timeout_termination": True}, policy_kwargs={"net_arch": [HIDDEN, HIDDEN]},
        device="cpu",
    )
    model.set_logger(Logger(folder=None, output_formats=[]))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for target in (model.actor_target, model.critic_target):
            for p in target.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        last = model.actor_target.mu[-2]  # the Linear before the Tanh
        last.bias.add_(torch.tensor([1.5, -1.5]))
    return model


def run(seed: int = SEED) -> dict:
    """The buffer, the initial weights and SB3's record of `TRAIN_CALLS` calls of `TD3.train`."""
    import stable_baselines3

    if stable_baselines3.__version__ != SB3_PIN:
        raise RuntimeError(f"the reference is stable-baselines3=={SB3_PIN}, found {stable_baselines3.__version__}")
    torch.set_num_threads(1)
    model = make_model(seed)
    buf = make_buffer(seed)
    rb = model.replay_buffer
    assert rb.handle_timeout_termination
    for i in range(BUFFER):
        term, trunc = bool(buf["terminated"][i]), bool(buf["truncated"][i])
        rb.add(buf["obs"][i:i + 1], buf["next_obs"][i:i + 1], buf["actions"][i:i + 1], buf["rewards"][i:i + 1],
               np.array([term or trunc]), [{"TimeLimit.truncated": trunc and not term}])
    assert rb.full and rb.pos == 0

    out = {f"in/{k}": np.asarray(v) for k, v in buf.items()}
    for net in NETS:
        out.update({f"in/weights/{net}/{k}": v for k, v in _state(getattr(model, net)).items()})

    seen: dict[str, list] = {"batch_inds": [], "dones": [], "mu_target": [], "next_actions": []}
    get_samples = rb._get_samples

    def spy_get_samples(batch_inds, env=None):
        data = get_samples(batch_inds, env)
        seen["batch_inds"].append(np.asarray(batch_inds).copy())
        seen["dones"].append(data.dones.numpy().reshape(-1).copy())
        return data

    rb._get_samples = spy_get_samples
    model.actor_target.register_forward_hook(lambda m, args, output: seen["mu_target"].append(output.detach().clone()))
    model.critic_target.register_forward_hook(lambda m, args, output: seen["next_actions"].append(args[1].detach().clone()))

    noise, records = [], {"n_updates": [], "critic_loss": [], "actor_loss": []}
    snapshots: dict[str, list] = {}
    for call, gradient_steps in enumerate(TRAIN_CALLS):
        np.random.seed(seed + 10 + call)  # the buffer's sample draws its indices from numpy's global generator
        torch.manual_seed(seed + 100 + call)  # and SB3's target noise from torch's
        model.train(gradient_steps=gradient_steps, batch_size=BATCH)
        logged = dict(model.logger.name_to_value)
        model.logger.dump()
        records["n_updates"].append(model._n_updates)
        records["critic_loss"].append(logged["train/critic_loss"])
        records["actor_loss"].append(logged.get("train/actor_loss", np.nan))
        for net in NETS:
            for k, v in _state(getattr(model, net)).items():
                snapshots.setdefault(f"{net}/{k}", []).append(v)
        # the standard-normal draws behind this call's normal_(0, POLICY_NOISE), one [BATCH, ACT_DIM] per step
        torch.manual_seed(seed + 100 + call)
        noise.extend(torch.empty(BATCH, ACT_DIM).normal_() for _ in range(gradient_steps))

    steps = sum(TRAIN_CALLS)
    assert all(len(v) == steps for v in seen.values()) and len(noise) == steps
    for z, mu, next_actions in zip(noise, seen["mu_target"], seen["next_actions"], strict=True):
        # SB3's own expression with the recovered draws gives its actions bit for bit: they are its draws
        rebuilt = (mu + (z * POLICY_NOISE).clamp(-NOISE_CLIP, NOISE_CLIP)).clamp(-1, 1)
        if not torch.equal(rebuilt, next_actions):
            raise RuntimeError("the recovered draws are not the ones SB3's normal_ used")
    out["in/noise"] = torch.stack(noise).numpy()
    out["in/batch_inds"] = np.stack(seen["batch_inds"]).astype(np.int32)
    out["in/gradient_steps"] = np.array(TRAIN_CALLS, np.int32)
    out["sb3/dones"] = np.stack(seen["dones"])
    out["sb3/mu_target"] = torch.stack(seen["mu_target"]).numpy()
    out["sb3/next_actions"] = torch.stack(seen["next_actions"]).numpy()
    out["sb3/n_updates"] = np.array(records["n_updates"], np.int32)
    out["sb3/critic_loss"] = np.array(records["critic_loss"], np.float32)
    out["sb3/actor_loss"] = np.array(records["actor_loss"], np.float32)
    out.update({f"sb3/params/{k}": np.stack(v) for k, v in snapshots.items()})
    out["meta/stable_baselines3"] = np.array(stable_baselines3.__version__)
    return out
