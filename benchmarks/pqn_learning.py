"""PQN solves CartPole-v1: the longer learning check that does not fit in CI (issue #27, item 5).

`pqn.make_train(PQNConfig())` is purejaxql's CartPole configuration
(https://github.com/mttga/purejaxql, `config/alg/pqn_cartpole.yaml`: 32 envs
x 64 steps, 4 epochs of 16 minibatches, a 2 x 256 LayerNorm MLP, RAdam at
1e-4 decayed linearly, lambda 0.95, epsilon 1 -> 0.2 over the first 20% of
updates, rewards scaled by 0.1, 500k env steps), vmapped over S seeds in
one jitted call. Each seed's final policy is then evaluated greedily
(epsilon 0, purejaxql's EPS_TEST) on `--eval-episodes` whole episodes
(`collect.evaluate`), which is purejaxql's test metric.

Solved: the mean over seeds of the greedy final return is at least 475
(`--threshold`). Also printed: the training return (with the epsilon = 0.2
exploration still on) over the last 10 updates, episodes weighted.

Measured 2026-11-25 on the 2-core CPU machine (shared, load average 4 to 5),
jax 0.10.2, the default config (499,712 env steps per seed): 8 vmapped seeds,
every seed's greedy final return 500.0 (mean 500.0, solved), training return
over the last 10 updates 455 to 494; compile 10.3 s, run 161 s; 4 seeds: all
500.0, run 55 s. With `--no-time-limit-bootstrap` (purejaxql's done-based
targets), 8 seeds: also all 500.0 greedy, training return over the last 10
updates 438 to 480 (one run each, so no claim that either is better; the run
times were taken under different load and are not a comparison).
`benchmarks/results/pqn_learning.json` and `pqn_learning_done_targets.json`
hold the two 8-seed runs.

Run: python -m benchmarks.pqn_learning [--seeds 4] [--total-steps 500000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from benchmarks import _common
from jaxrl_rollout.algorithms import pqn
from jaxrl_rollout.collect import evaluate


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--eval-episodes", type=int, default=128)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--no-time-limit-bootstrap", action="store_true",
                        help="bootstrap_on_truncation=False: purejaxql's done-based targets")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args(argv)

    config = pqn.PQNConfig(total_timesteps=args.total_steps,
                           bootstrap_on_truncation=not args.no_time_limit_bootstrap)
    alg = pqn.make_pqn(config)

    def run(key):
        train_key, eval_key = jax.random.split(key)
        state, metrics = alg.train(train_key)
        result = evaluate(alg.env, alg.env_params, alg.eval_policy_fn, alg.policy_params(state), eval_key,
                          args.eval_episodes)
        return metrics, result.returns.mean()

    keys = jax.random.split(jax.random.key(0), args.seeds)
    fn = jax.jit(jax.vmap(run))
    start = time.time()
    compiled = fn.lower(keys).compile()
    compile_s = time.time() - start
    start = time.time()
    metrics, greedy = jax.block_until_ready(compiled(keys))
    run_s = time.time() - start

    r, n = np.asarray(metrics.episode_return)[:, -10:], np.asarray(metrics.num_episodes)[:, -10:]
    train_final = np.nansum(np.nan_to_num(r) * n, 1) / np.maximum(n.sum(1), 1)
    greedy = np.asarray(greedy)
    out = {
        "machine": _common.machine_info(here=True),
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "hparams": pqn.PQNHParams()._asdict(),
        "seeds": args.seeds,
        "env_steps_per_seed": int(np.asarray(metrics.env_steps)[0, -1]),
        "compile_s": round(compile_s, 2),
        "run_s": round(run_s, 2),
        "greedy_final_return_per_seed": [round(float(x), 1) for x in greedy],
        "greedy_final_return_mean": round(float(greedy.mean()), 1),
        "train_return_last10_per_seed": [round(float(x), 1) for x in train_final],
        "nonfinite_updates": int(np.sum(np.asarray(metrics.nonfinite) != 0)),
        "solved": bool(greedy.mean() >= args.threshold),
        "threshold": args.threshold,
    }
    print(json.dumps({k: v for k, v in out.items() if k not in ("machine", "config", "hparams")}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return out


if __name__ == "__main__":
    main()
