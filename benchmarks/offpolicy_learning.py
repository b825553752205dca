"""Off-policy learning check: DQN solves CartPole-v1 (>= 475), SAC reaches >= -200 on Pendulum-v1 (means over seeds).

`--algo dqn` (the default):

`dqn.make_train(DQNConfig(...))` with CleanRL `dqn.py`'s CartPole
hyperparameters (500,000 steps, 1 env, buffer 10,000, batch 128,
learning_starts 10,000, train_frequency 10, target_network_frequency 500,
tau 1, lr 2.5e-4, epsilon 1 -> 0.05 over half the run, Q-network 120-84)
unless overridden, S seeds vmapped in one jitted call. Reported per seed:

- train return: the mean return of the episodes that ended in the last
  `--tail` env steps of training (epsilon-greedy, epsilon at end_e);
- greedy return: `collect.evaluate` of the final Q-network acting greedily,
  `--eval-episodes` episodes (CartPole-v1's 500-step limit);

and their means over seeds against the 475 threshold of issue #27.

`--algo sac`: `sac.make_train(SACConfig(...))` with CleanRL
`sac_continuous_action.py`'s hyperparameters (1 env, buffer 1e6, batch 256,
learning_starts 5,000, policy_lr 3e-4, q_lr 1e-3, policy_frequency 2,
target_network_frequency 1, tau 0.005, gamma 0.99, autotuned alpha, MLPs
256-256) on Pendulum-v1 for `--total-steps` (default 20,000; CleanRL's 1e6 is
far more than Pendulum needs). Reported per seed: the train return (sampled
actions) over the last `--tail` env steps and the deterministic return
(tanh of the mean) over `--eval-episodes` episodes, against issue #27's -200.

`--algo td3`: TD3 on Pendulum-v1 (`td3.make_train`, CleanRL
`td3_continuous_action.py`'s networks and hyperparameters, 256-256, batch
256, lr 3e-4, policy_frequency 2), but 20,000 steps and learning_starts
1,000 by default (CleanRL's 1e6 and 25,000 are for MuJoCo), against a
threshold of -200: the greedy return is `collect.evaluate` of the
deterministic actor.

Run: python -m benchmarks.offpolicy_learning [--algo dqn|sac|td3] [--seeds 4] [--total-steps N] [--bootstrap time_limits]
"""

from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from benchmarks import _common
from jaxrl_rollout.algorithms import dqn, sac
from jaxrl_rollout.collect import evaluate

THRESHOLD = 475.0
SAC_THRESHOLD = -200.0


def main() -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--algo", default="dqn", choices=("dqn", "sac", "td3"))
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--total-steps", type=int, default=None, help="dqn: 500,000; sac and td3: 20,000")
    p.add_argument("--bootstrap", default="time_limits", choices=("time_limits", "done"))
    p.add_argument("--learning-starts", type=int, default=None, help="dqn: 10,000; sac: 5,000; td3: 1,000")
    p.add_argument("--lr", type=float, default=None, help="dqn: 2.5e-4; td3: 3e-4 (sac does not read it)")
    p.add_argument("--exploration-fraction", type=float, default=0.5, help="dqn only")
    p.add_argument("--tail", type=int, default=None,
                   help="env steps at the end of training averaged for the train return (dqn: 10,000; sac and "
                        "td3: 2,000)")
    p.add_argument("--eval-episodes", type=int, default=32)
    args = p.parse_args()
    machine = dict(_common.machine_info(here=True), loadavg_start=_common.loadavg())
    if args.algo == "td3":
        return _td3(args, machine)
    if args.algo == "sac":
        return run_sac(args, machine)
    args.total_steps = 500_000 if args.total_steps is None else args.total_steps
    args.learning_starts = 10_000 if args.learning_starts is None else args.learning_starts
    args.tail = 10_000 if args.tail is None else args.tail
    args.lr = 2.5e-4 if args.lr is None else args.lr

    cfg = dqn.DQNConfig(total_timesteps=args.total_steps, learning_starts=args.learning_starts,
                        bootstrap=args.bootstrap)
    hp = dqn.DQNHParams(lr=args.lr, exploration_fraction=args.exploration_fraction)
    algo = dqn.make_dqn(cfg)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    run = jax.jit(jax.vmap(algo.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = run.lower(keys, hp).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = _common.block(compiled(keys, hp))
    run_s = time.perf_counter() - t0

    tail_updates = max(1, args.tail // cfg.steps_per_update)
    ret, n = np.asarray(metrics.episode_return)[:, -tail_updates:], np.asarray(metrics.num_episodes)[:, -tail_updates:]
    train_return = np.nansum(np.nan_to_num(ret) * n, axis=1) / np.maximum(n.sum(axis=1), 1)
    eval_keys = jax.random.split(jax.random.key(1), args.seeds)
    greedy = jax.jit(jax.vmap(lambda params, k: evaluate(algo.env, algo.env_params, algo.eval_policy_fn, params, k,
                                                         args.eval_episodes).returns.mean()))(state.params, eval_keys)
    greedy = np.asarray(greedy)
    rows = [[s, f"{train_return[s]:.1f}", f"{greedy[s]:.1f}"] for s in range(args.seeds)]
    rows.append(["mean", f"{train_return.mean():.1f}", f"{greedy.mean():.1f}"])
    table = _common.markdown_table(["seed", "train return (last tail)", "greedy return"], rows)
    table += (f"\n\nDQN CartPole-v1, {cfg.total_timesteps:,} steps x {args.seeds} seeds (vmapped), bootstrap="
              f"{cfg.bootstrap}, lr={hp.lr}, exploration_fraction={hp.exploration_fraction}, learning_starts="
              f"{cfg.learning_starts}; compile {compile_s:.1f} s, run {run_s:.1f} s; solved (greedy mean >= "
              f"{THRESHOLD:g}): {bool(greedy.mean() >= THRESHOLD)}")
    results = dict(train_return=train_return.tolist(), greedy_return=greedy.tolist(), compile_s=compile_s,
                   run_s=run_s, config=repr(cfg), hparams=hp._asdict(), solved=bool(greedy.mean() >= THRESHOLD))
    return _common.report("offpolicy_learning", args, machine, results, table, _common.command_line())


def run_sac(args, machine: dict) -> dict:
    steps = 20_000 if args.total_steps is None else args.total_steps
    starts = 5_000 if args.learning_starts is None else args.learning_starts
    tail = 2_000 if args.tail is None else args.tail
    cfg = sac.SACConfig(total_timesteps=steps, learning_starts=starts, buffer_size=max(steps, 1),
                        bootstrap=args.bootstrap)
    hp = sac.SACHParams()
    algo = sac.make_sac(cfg)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    run = jax.jit(jax.vmap(algo.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = run.lower(keys, hp).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = _common.block(compiled(keys, hp))
    run_s = time.perf_counter() - t0

    tail_updates = max(1, tail // cfg.steps_per_update)
    ret, n = np.asarray(metrics.episode_return)[:, -tail_updates:], np.asarray(metrics.num_episodes)[:, -tail_updates:]
    train_return = np.nansum(np.nan_to_num(ret) * n, axis=1) / np.maximum(n.sum(axis=1), 1)
    eval_keys = jax.random.split(jax.random.key(1), args.seeds)
    det = jax.jit(jax.vmap(lambda params, k: evaluate(algo.env, algo.env_params, algo.eval_policy_fn, params, k,
                                                      args.eval_episodes).returns.mean()))(state.actor_params, eval_keys)
    det = np.asarray(det)
    ok = bool(det.mean() >= SAC_THRESHOLD)
    rows = [[s, f"{train_return[s]:.1f}", f"{det[s]:.1f}"] for s in range(args.seeds)]
    rows.append(["mean", f"{train_return.mean():.1f}", f"{det.mean():.1f}"])
    table = _common.markdown_table(["seed", f"train return (last {tail:,} steps)", "deterministic return"], rows)
    table += (f"\n\nSAC Pendulum-v1, {cfg.total_timesteps:,} steps x {args.seeds} seeds (vmapped), bootstrap="
              f"{cfg.bootstrap}, CleanRL hyperparameters (learning_starts={cfg.learning_starts}); compile "
              f"{compile_s:.1f} s, run {run_s:.1f} s; reached (deterministic mean >= {SAC_THRESHOLD:g}): {ok}")
    results = dict(algo="sac", train_return=train_return.tolist(), deterministic_return=det.tolist(),
                   final_alpha=np.asarray(metrics.alpha[:, -1]).tolist(), compile_s=compile_s, run_s=run_s,
                   config=repr(cfg), hparams=hp._asdict(), reached=ok)
    return _common.report("offpolicy_learning", args, machine, results, table, _common.command_line())


def _td3(args, machine) -> dict:
    """TD3 on Pendulum-v1; --total-steps, --learning-starts, --lr, --tail default to 20,000, 1,000, 3e-4, 2,000."""
    from jaxrl_rollout.algorithms import td3

    steps = 20_000 if args.total_steps is None else args.total_steps
    starts = 1_000 if args.learning_starts is None else args.learning_starts
    lr = 3e-4 if args.lr is None else args.lr
    threshold = -200.0
    cfg = td3.TD3Config(total_timesteps=steps, buffer_size=steps, learning_starts=starts, bootstrap=args.bootstrap)
    hp = td3.TD3HParams(lr=lr)
    algo = td3.make_td3(cfg)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    run = jax.jit(jax.vmap(algo.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = run.lower(keys, hp).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = _common.block(compiled(keys, hp))
    run_s = time.perf_counter() - t0
    tail = max(1, (2_000 if args.tail is None else args.tail) // cfg.steps_per_update)  # 10 Pendulum episodes
    ret, n = np.asarray(metrics.episode_return)[:, -tail:], np.asarray(metrics.num_episodes)[:, -tail:]
    train_return = np.nansum(np.nan_to_num(ret) * n, axis=1) / np.maximum(n.sum(axis=1), 1)
    eval_keys = jax.random.split(jax.random.key(1), args.seeds)
    greedy = np.asarray(jax.jit(jax.vmap(lambda p, k: evaluate(algo.env, algo.env_params, algo.eval_policy_fn, p, k,
                                                               args.eval_episodes).returns.mean()))(
        state.actor_params, eval_keys))
    rows = [[s, f"{train_return[s]:.1f}", f"{greedy[s]:.1f}"] for s in range(args.seeds)]
    rows.append(["mean", f"{train_return.mean():.1f}", f"{greedy.mean():.1f}"])
    solved = bool(greedy.mean() >= threshold)
    table = _common.markdown_table(["seed", "train return (last tail)", "deterministic return"], rows)
    table += (f"\n\nTD3 Pendulum-v1, {steps:,} steps x {args.seeds} seeds (vmapped), bootstrap={cfg.bootstrap}, "
              f"lr={lr}, learning_starts={starts}, hidden {cfg.hidden_sizes}, batch {cfg.batch_size}; compile "
              f"{compile_s:.1f} s, run {run_s:.1f} s; solved (deterministic mean >= {threshold:g}): {solved}")
    results = dict(algo="td3", train_return=train_return.tolist(), greedy_return=greedy.tolist(), compile_s=compile_s,
                   run_s=run_s, config=repr(cfg), hparams=hp._asdict(), threshold=threshold, solved=solved)
    return _common.report("offpolicy_learning", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
