"""PyTorch baseline: CleanRL-style PPO on gymnasium CartPole-v1, same hyperparameters and step count.

Written for this benchmark in the shape of CleanRL's `ppo.py` (single file,
the same loop structure and update): `gymnasium.vector.SyncVectorEnv` over
`--num-envs` CartPole-v1 copies with same-step auto-reset (CleanRL's
semantics), a separate 64x64 tanh actor and critic with orthogonal init,
per-step action sampling under `torch.no_grad()`, GAE as CleanRL's reverse
loop (time limits treated as terminations), then `--update-epochs` epochs of
`--num-minibatches` minibatches with per-minibatch advantage normalisation,
the clipped surrogate, the clipped value loss, an entropy bonus,
`clip_grad_norm_` and Adam(eps=1e-5) with linear learning-rate annealing.
No logging, no TensorBoard: only the training itself is timed.

Threads: `torch.set_num_threads(--threads)` (default 1: on this 2-core CPU
and these tiny tensors one thread was faster than two; see BENCHMARKS.md).

Run: python -m benchmarks.torch_ppo_baseline [--total-steps 500000] [--seed 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from benchmarks import _common


def make_agent(torch, obs_dim: int, num_actions: int):
    nn = torch.nn

    def layer(n_in, n_out, gain):
        linear = nn.Linear(n_in, n_out)
        nn.init.orthogonal_(linear.weight, gain)
        nn.init.constant_(linear.bias, 0.0)
        return linear

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            root2 = math.sqrt(2)
            self.critic = nn.Sequential(layer(obs_dim, 64, root2), nn.Tanh(), layer(64, 64, root2), nn.Tanh(),
                                        layer(64, 1, 1.0))
            self.actor = nn.Sequential(layer(obs_dim, 64, root2), nn.Tanh(), layer(64, 64, root2), nn.Tanh(),
                                       layer(64, num_actions, 0.01))

        def value(self, x):
            return self.critic(x)

        def act(self, x, action=None):
            dist = torch.distributions.Categorical(logits=self.actor(x))
            if action is None:
                action = dist.sample()
            return action, dist.log_prob(action), dist.entropy(), self.critic(x)

    return Agent()


def train(args: argparse.Namespace) -> dict:
    """One full training run; returns wall time, steps/s and episode returns."""
    import gymnasium as gym
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    start = time.perf_counter()

    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(args.env) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_dim = envs.single_observation_space.shape[0]
    agent = make_agent(torch, obs_dim, int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)

    n, b = args.num_steps, args.num_envs
    batch_size = n * b
    minibatch_size = batch_size // args.num_minibatches
    num_updates = args.total_steps // batch_size
    obs_buf = torch.zeros((n, b, obs_dim))
    actions = torch.zeros((n, b))
    logprobs = torch.zeros((n, b))
    rewards = torch.zeros((n, b))
    dones = torch.zeros((n, b))
    values = torch.zeros((n, b))

    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.tensor(next_obs)
    next_done = torch.zeros(b)
    running_return = np.zeros(b)
    finished = []  # (global step, return) of every completed episode
    global_step = 0

    for update in range(1, num_updates + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (update - 1.0) / num_updates) * args.lr
        for step in range(n):
            global_step += b
            obs_buf[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminations, truncations, _ = envs.step(action.numpy())
            done = np.logical_or(terminations, truncations)
            running_return += reward
            for i in np.flatnonzero(done):
                finished.append((global_step, float(running_return[i])))
                running_return[i] = 0.0
            rewards[step] = torch.tensor(reward, dtype=torch.float32)
            next_obs, next_done = torch.tensor(next_obs), torch.tensor(done, dtype=torch.float32)

        with torch.no_grad():
            next_value = agent.value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(n)):
                if t == n - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs_buf.reshape((-1, obs_dim))
        b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        b_inds = np.arange(batch_size)
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for lo in range(0, batch_size, minibatch_size):
                mb = b_inds[lo:lo + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions.long()[mb])
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio,
                                    -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
                newvalue = newvalue.view(-1)
                v_unclipped = (newvalue - b_returns[mb]) ** 2
                v_clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

    wall = time.perf_counter() - start
    envs.close()
    tail = [r for s, r in finished if s > global_step - batch_size * 10]
    return {
        "seed": args.seed, "total_steps": global_step, "wall_s": wall, "steps_per_s": global_step / wall,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "episodes": len(finished), "final_return_mean": float(np.mean(tail)) if tail else float("nan"),
    }


def make_parser() -> argparse.ArgumentParser:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--total-steps", type=int, default=500_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=1, help="sequential runs with seeds seed, seed+1, ...")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--anneal-lr", type=int, default=1)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    return p


def main(argv=None) -> dict:
    args = make_parser().parse_args(argv)
    _common.require("torch", _common.TORCH_HINT)
    _common.require("gymnasium", _common.TORCH_HINT)
    import torch  # noqa: F401  (so machine_info records its version)

    machine = _common.machine_info()
    results, rows = [], []
    for i in range(args.runs):
        run_args = argparse.Namespace(**{**vars(args), "seed": args.seed + i})
        r = train(run_args)
        r["loadavg"] = _common.loadavg()
        results.append(r)
        rows.append([r["seed"], f"{r['total_steps']:,}", r["threads"], f"{r['wall_s']:.2f} s",
                     f"{r['steps_per_s']:,.0f}", f"{r['final_return_mean']:.1f}", r["loadavg"]])
        print(f"seed {r['seed']}: {r['wall_s']:.2f} s", file=sys.stderr)
    table = _common.markdown_table(
        ["seed", "env steps", "torch threads", "wall (training)", "env steps/s", "final return (last 10 updates)",
         "load avg"],
        rows,
    )
    return _common.report("torch_ppo_baseline", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
