"""Runs every benchmark and rewrites the result sections of BENCHMARKS.md.

Each script runs in its own fresh process, one at a time, and writes
`benchmarks/results/<name>.json`. Then every section of BENCHMARKS.md between
`<!-- BEGIN results:<name> -->` and `<!-- END results:<name> -->` is replaced
by that JSON's command, date, machine, load averages and table. Text outside
the markers (the discussion) is left alone: re-read it after a rerun.

Run: python -m benchmarks.run_all            # full sizes (the figures in BENCHMARKS.md; ~20 min on 2 cores)
     python -m benchmarks.run_all --quick    # tiny sizes, a minute or two: checks that everything runs
     python -m benchmarks.run_all --only gae_throughput,rollout_memory
     python -m benchmarks.run_all --no-run   # only rewrite BENCHMARKS.md from the existing JSON
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common

# name -> (full options, quick options)
BENCHMARKS = {
    "rollout_overhead": ([], ["--sizes", "4,64", "--steps", "32", "--rounds", "3", "--min-sample", "0.01"]),
    "gae_throughput": ([], ["--shapes", "128x64,256x16", "--rounds", "3", "--min-sample", "0.01"]),
    "rollout_memory": ([], ["--sizes", "64x128,64x1024"]),
    "profile_rollout": ([], ["--total-steps", "2048"]),
    "kernel_trace": ([], ["--seeds", "1", "--updates", "4"]),
    "ppo_e2e": ([], ["--seeds", "1,2", "--total-steps", "4096", "--repeats", "1"]),
    "speedup": ([], ["--total-steps", "4096"]),
    "torch_ppo_baseline": ([], ["--total-steps", "4096"]),
    # Every comparison of issue #14 in one run (PPO on CartPole and Pendulum-v1, A2C).
    "vs_purejaxrl": (["--algo", "ppo,ppo-pendulum,a2c", "--rejax", "--algo-seeds", "ppo-pendulum=1:5,8:1",
                      "--algo-seeds", "a2c=1:5,8:1"],
                     ["--seeds", "1", "--rounds", "1", "--total-steps", "4096", "--no-purejaxrl"]),
    "seed_memory": ([], ["--budget-gib", "1", "--start", "16", "--no-purejaxrl"]),
    "shuffle_ab": ([], ["--seeds", "1", "--updates", "4", "--rounds", "2"]),
    "prng_ab": ([], ["--seeds", "1", "--updates", "4", "--rounds", "2"]),
}
# speedup already runs the baseline once; run it alone only when asked. vs_purejaxrl takes over
# an hour with its 64-seed round, so it too runs only when named (--only vs_purejaxrl), except in --quick.
DEFAULT = [name for name in BENCHMARKS if name not in ("torch_ppo_baseline", "vs_purejaxrl")]
RESULTS_DIR = os.path.join(_common.REPO_ROOT, "benchmarks", "results")
REPORT = os.path.join(_common.REPO_ROOT, "BENCHMARKS.md")


def section(record: dict) -> str:
    """The markdown that goes between one benchmark's markers."""
    m = record["machine"]
    versions = ", ".join(f"{k} {m[k]}" for k in ("jax", "torch") if k in m)
    backend = m.get("backend", "cpu")
    return "\n".join([
        f"Command: `{record['command']}`",
        "",
        f"Measured {m['date']} on {m['cpu']} ({m['cpu_count']} cores, backend {backend}, no GPU), "
        f"Python {m['python']}, {versions}. Load average (1/5/15 min) at start {m['loadavg_start']}, "
        f"at end {m['loadavg_end']}.",
        "",
        record["table"],
    ])


def rewrite_report(names) -> list[str]:
    """Replaces each named section of BENCHMARKS.md from its JSON; returns the names it rewrote."""
    with open(REPORT) as f:
        text = f.read()
    done = []
    for name in names:
        path = os.path.join(RESULTS_DIR, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            record = json.load(f)
        pattern = re.compile(rf"(<!-- BEGIN results:{name} -->).*?(<!-- END results:{name} -->)", re.S)
        text, n = pattern.subn(lambda m: m.group(1) + "\n" + section(record) + "\n" + m.group(2), text)
        if n:
            done.append(name)
    with open(REPORT, "w") as f:
        f.write(text)
    return done


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (writes to benchmarks/results/quick/, "
                   "leaves BENCHMARKS.md alone)")
    p.add_argument("--only", type=lambda s: s.split(","),
                   help=f"comma-separated names (default: {','.join(DEFAULT)}, plus vs_purejaxrl with --quick; "
                   "also: torch_ppo_baseline, vs_purejaxrl)")
    p.add_argument("--no-run", action="store_true", help="skip the runs, only rewrite BENCHMARKS.md")
    args = p.parse_args(argv)
    if args.only is None:
        args.only = DEFAULT + (["vs_purejaxrl"] if args.quick else [])
    unknown = set(args.only) - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmarks {sorted(unknown)}; known: {', '.join(BENCHMARKS)}")
    global RESULTS_DIR
    if args.quick:
        RESULTS_DIR = os.path.join(RESULTS_DIR, "quick")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    if not args.no_run:
        for name in args.only:
            full, quick = BENCHMARKS[name]
            options = (quick if args.quick else full) + ["--json", os.path.join(RESULTS_DIR, f"{name}.json")]
            print(f"== {name} {' '.join(options)}  (load {_common.loadavg()})", flush=True)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *options], cwd=_common.REPO_ROOT, check=True)
            print(f"== {name}: {time.perf_counter() - start:.0f} s\n", flush=True)
    if not args.quick:
        print("rewrote BENCHMARKS.md sections:", ", ".join(rewrite_report(args.only)) or "none")


if __name__ == "__main__":
    main()
