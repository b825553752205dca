"""End-to-end PPO on CartPole-v1: compile time and run time for 1, 8 and 64 vmapped seeds.

`train = algorithms.ppo.make_train(PPOConfig(total_timesteps=N))` with the
reference config otherwise (CleanRL's CartPole hyperparameters). One seed is
`jax.jit(train)(key)`; S seeds are `jax.jit(jax.vmap(train))(keys)`, one
program. For each seed count:

- compile time: `jax.jit(...).lower(args)` (trace + lowering) and
  `.compile()` (XLA), timed separately, on a fresh function object so no
  cache is reused;
- run time: the compiled call, blocked until ready, median of `--repeats`
  calls (each call retrains from scratch on the same keys);
- steps/s: S * env steps per seed / run time (num_updates whole batches:
  499,712 for 5e5, as CleanRL runs);
- the final return (mean over seeds of the last update's mean episode
  return), so a fast but broken run would show.

Run: python -m benchmarks.ppo_e2e [--seeds 1,8,64] [--total-steps 500000]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from benchmarks import _common

COMPILE_TARGET_S = 15.0


def build(num_seeds: int, total_steps: int):
    """(jitted fn, args, env steps per seed) for `num_seeds` seeds; a new closure each call, so nothing is cached."""
    from jaxrl_rollout.algorithms import ppo

    config = ppo.PPOConfig(total_timesteps=total_steps)
    train = ppo.make_train(config)
    # num_updates whole batches: 976 x 512 = 499,712 steps for 5e5, as in CleanRL.
    steps = config.num_updates * config.batch_size
    if num_seeds == 1:
        return jax.jit(lambda key: train(key)), (jax.random.key(0),), steps
    keys = jax.random.split(jax.random.key(0), num_seeds)
    return jax.jit(jax.vmap(lambda key: train(key))), (keys,), steps


def compile_and_run(num_seeds: int, total_steps: int, repeats: int) -> dict:
    """Times trace+lower, compile and `repeats` runs of one seed count."""
    fn, args, steps = build(num_seeds, total_steps)
    t0 = time.perf_counter()
    lowered = fn.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    runs, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - start)
    _, metrics = out
    # An update can end no episode (NaN), so average the last 10 updates.
    last_return = np.nanmean(np.asarray(metrics.episode_return)[..., -10:], axis=-1)
    return {
        "seeds": num_seeds, "total_steps": total_steps, "env_steps_per_seed": steps, "lower_s": t1 - t0, "compile_s": t2 - t1,
        "compile_total_s": t2 - t0, "run_s": statistics.median(runs), "runs_s": runs,
        "steps_per_s": num_seeds * steps / statistics.median(runs),
        "final_return_mean": float(np.nanmean(last_return)), "final_return_min": float(np.nanmin(last_return)),
    }


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=_common.int_list, default=[1, 8, 64], help="seed counts, one vmapped call each")
    p.add_argument("--total-steps", type=int, default=500_000, help="env steps per seed")
    p.add_argument("--repeats", type=int, default=1, help="timed runs per seed count (median)")
    args = p.parse_args(argv)

    machine = _common.machine_info(here=True)
    results, rows = [], []
    for s in args.seeds:
        r = compile_and_run(s, args.total_steps, args.repeats)
        r["loadavg"] = _common.loadavg()
        results.append(r)
        rows.append([
            s, f"{r['env_steps_per_seed']:,}", f"{r['lower_s']:.2f} s", f"{r['compile_s']:.2f} s",
            f"{r['run_s']:.2f} s", f"{r['compile_total_s'] + r['run_s']:.2f} s",
            f"{r['steps_per_s']:,.0f}", f"{r['final_return_mean']:.1f} (min {r['final_return_min']:.1f})",
            r["loadavg"],
        ])
        print(f"seeds={s}: compile {r['compile_total_s']:.2f} s, run {r['run_s']:.2f} s", file=sys.stderr)
    table = _common.markdown_table(
        ["seeds", "steps per seed", "trace+lower", "XLA compile", "run (median)", "compile + run", "env steps/s",
         "final return (last 10 updates), mean over seeds", "load avg"],
        rows,
    )
    return _common.report("ppo_e2e", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
