"""JAX PPO against the PyTorch baseline, in one run: wall time with compile included.

Each side runs in a fresh subprocess, one after the other, in this order per
round: JAX 1 seed, torch baseline, JAX 8 seeds (vmapped, one call). The JAX
figure is trace + lower + compile + run (`benchmarks.ppo_e2e --repeats 1`);
the torch figure is its training loop (`benchmarks.torch_ppo_baseline`),
env construction included. Both exclude the Python imports, which are also
reported (process wall time, launch to exit).

8 seeds are compared against 8 baseline runs. `--eight-runs extrapolate`
(default) takes 8 x the measured single baseline run; `--eight-runs measure`
runs the baseline 8 times in sequence at `--eight-steps` steps each and
scales linearly to `--total-steps` if that is shorter.

Run: python -m benchmarks.speedup [--total-steps 500000] [--rounds 1]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common

TARGET_ONE_SEED = 10.0
TARGET_EIGHT_SEEDS = 20.0


def run_script(module: str, options: list[str], out_dir: str, tag: str) -> dict:
    """Runs `python -m module options --json ...` in a fresh process; returns its record plus process wall time."""
    path = os.path.join(out_dir, f"{tag}.json")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, *options, "--json", path], cwd=_common.REPO_ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    with open(path) as f:
        record = json.load(f)
    record["process_wall_s"] = wall
    return record


def jax_total(record: dict) -> float:
    r = record["results"][0]
    return r["compile_total_s"] + r["run_s"]


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=500_000)
    p.add_argument("--rounds", type=int, default=1, help="rounds of (JAX 1 seed, torch, JAX 8 seeds)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the baseline")
    p.add_argument("--eight-runs", choices=("extrapolate", "measure"), default="extrapolate")
    p.add_argument("--eight-steps", type=int, default=0, help="steps per measured baseline run (0: --total-steps)")
    args = p.parse_args(argv)
    _common.require("torch", _common.TORCH_HINT)  # the baseline's, before our side compiles
    steps = str(args.total_steps)
    eight_steps = args.eight_steps or args.total_steps

    machine = _common.machine_info()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            entry = {"loadavg_before": _common.loadavg()}
            jax1 = run_script("benchmarks.ppo_e2e", ["--seeds", "1", "--total-steps", steps, "--repeats", "1"],
                              tmp, f"jax1_{r}")
            print(f"round {r}: JAX 1 seed {jax_total(jax1):.2f} s", file=sys.stderr)
            torch1 = run_script("benchmarks.torch_ppo_baseline",
                                ["--total-steps", steps, "--threads", str(args.threads), "--seed", str(1 + r)],
                                tmp, f"torch1_{r}")
            print(f"round {r}: torch 1 run {torch1['results'][0]['wall_s']:.2f} s", file=sys.stderr)
            jax8 = run_script("benchmarks.ppo_e2e", ["--seeds", "8", "--total-steps", steps, "--repeats", "1"],
                              tmp, f"jax8_{r}")
            print(f"round {r}: JAX 8 seeds {jax_total(jax8):.2f} s", file=sys.stderr)
            torch_one = torch1["results"][0]["wall_s"]
            if args.eight_runs == "measure":
                torch8 = run_script("benchmarks.torch_ppo_baseline",
                                    ["--total-steps", str(eight_steps), "--threads", str(args.threads),
                                     "--runs", "8", "--seed", "1"], tmp, f"torch8_{r}")
                measured = sum(x["wall_s"] for x in torch8["results"])
                torch_eight = measured * args.total_steps / eight_steps
                entry["torch8_record"] = torch8["results"]
            else:
                torch_eight = 8 * torch_one
            entry.update(
                loadavg_after=_common.loadavg(),
                jax1=jax1["results"][0], jax1_process_wall_s=jax1["process_wall_s"],
                jax8=jax8["results"][0], jax8_process_wall_s=jax8["process_wall_s"],
                torch1=torch1["results"][0], torch1_process_wall_s=torch1["process_wall_s"],
                torch8_wall_s=torch_eight, torch8_how=args.eight_runs,
                speedup_one_seed=torch_one / jax_total(jax1),
                speedup_eight_seeds=torch_eight / jax_total(jax8),
                speedup_one_seed_process=torch1["process_wall_s"] / jax1["process_wall_s"],
            )
            rounds.append(entry)
            machine.setdefault("torch", torch1["machine"].get("torch"))

    rows = []
    for i, e in enumerate(rounds):
        rows.append([
            i, f"{args.total_steps:,}",
            f"{e['jax1']['compile_total_s']:.2f} + {e['jax1']['run_s']:.2f} s",
            f"{e['torch1']['wall_s']:.2f} s", f"**{e['speedup_one_seed']:.1f}x**",
            f"{e['jax8']['compile_total_s']:.2f} + {e['jax8']['run_s']:.2f} s",
            f"{e['torch8_wall_s']:.2f} s ({e['torch8_how']})", f"**{e['speedup_eight_seeds']:.1f}x**",
            f"{e['speedup_one_seed_process']:.1f}x",
            f"{e['loadavg_before']} / {e['loadavg_after']}",
        ])
    table = _common.markdown_table(
        ["round", "steps per seed", "JAX 1 seed: compile + run", "torch 1 run", "1 seed speedup",
         "JAX 8 seeds: compile + run", "torch 8 runs", "8 seed speedup", "1 seed, whole process",
         "load avg before / after"],
        rows,
    )
    results = {
        "rounds": rounds, "threads": args.threads,
        "median_speedup_one_seed": statistics.median(e["speedup_one_seed"] for e in rounds),
        "median_speedup_eight_seeds": statistics.median(e["speedup_eight_seeds"] for e in rounds),
        "targets": {"one_seed": TARGET_ONE_SEED, "eight_seeds": TARGET_EIGHT_SEEDS},
    }
    return _common.report("speedup", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
