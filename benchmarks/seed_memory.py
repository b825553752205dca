"""The most vmapped PPO seeds of the reference config whose compiled program fits a memory budget (default 8 GiB).

For S seeds, `jax.jit(jax.vmap(train)).lower(keys).compile().memory_analysis()`
gives XLA's own figures for the whole training program: arguments, outputs,
temporaries (the peak of live intermediate buffers) and generated code. The
program's footprint is arguments + outputs + temporaries - aliased bytes. A
bisection over S (compile only, nothing runs) finds the largest S whose
footprint plus the process's own resident memory after compiling one seed
(Python, XLA, the libraries) stays within the budget.

Both sides use the reference CartPole-v1 config (4 envs x 128 steps, 5e5
steps). PureJaxRL's `ppo.py` is compiled in its own venv (see
`benchmarks.vs_purejaxrl` for the paths); it returns every step's episode
info ([updates, 128, 4] per field and seed), we return per-update metrics, so
most of the difference is in the outputs. The figure is XLA's estimate from
the compiled program, not a measured peak resident set.

Run: python -m benchmarks.seed_memory [--budget-gib 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common
from benchmarks.vs_purejaxrl import DEFAULT_ANCHOR, DEFAULT_PJR_PYTHON, anchor_problem

GIB = 1024**3


def _train(side: str, anchor_dir: str):
    if side == "ours":
        from jaxrl_rollout.algorithms import ppo

        return ppo.make_train(ppo.PPOConfig())
    sys.path.insert(0, anchor_dir)
    from ppo import make_train  # the anchor's module, on its own path

    return make_train({
        "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False,
    })


def child(side: str, anchor_dir: str, budget: float, start: int) -> dict:
    """Bisects S for one side in this process; prints and returns a JSON record."""
    import jax

    train = _train(side, anchor_dir)

    def footprint(seeds: int) -> dict:
        keys = jax.random.split(jax.random.PRNGKey(30), seeds)
        m = jax.jit(jax.vmap(train)).lower(keys).compile().memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
        return {"seeds": seeds, "arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
                "temporaries": m.temp_size_in_bytes, "code": m.generated_code_size_in_bytes, "total": total}

    one = footprint(1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    found = _common.search_seeds(footprint, budget - rss, start, 0.01, one)  # to 1% of S
    if found["max_seeds"] == 0:
        raise SystemExit(f"{side}: one seed does not fit in {budget / GIB:g} GiB")
    record = dict(found, side=side, process_rss_bytes=rss)
    print(json.dumps(record))
    return record


def main(argv=None) -> dict:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--budget-gib", type=float, default=8.0)
    p.add_argument("--start", type=int, default=64, help="seed count of the first probe after one (then aimed along the footprint's line)")
    p.add_argument("--no-purejaxrl", action="store_true", help="bisect our side only")
    p.add_argument("--purejaxrl-dir", default=DEFAULT_ANCHOR)
    p.add_argument("--purejaxrl-python", default=DEFAULT_PJR_PYTHON)
    p.add_argument("--child", choices=("ours", "purejaxrl"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    budget = args.budget_gib * GIB
    if args.child:
        return child(args.child, args.purejaxrl_dir, budget, args.start)

    import jax  # for the machine record only

    del jax
    machine = _common.machine_info()
    problem = "--no-purejaxrl" if args.no_purejaxrl else anchor_problem(args.purejaxrl_dir, args.purejaxrl_python)
    if problem:
        print(f"PureJaxRL skipped: {problem}.", file=sys.stderr)
    env = _common.child_env()
    results, rows = [], []
    for side in ["ours"] + ([] if problem else ["purejaxrl"]):
        python = sys.executable if side == "ours" else args.purejaxrl_python
        cmd = [python, os.path.abspath(__file__), "--child", side, "--budget-gib", str(args.budget_gib),
               "--start", str(args.start), "--purejaxrl-dir", args.purejaxrl_dir]
        out = subprocess.run(cmd, cwd=_common.REPO_ROOT, env=env, capture_output=True, text=True)
        if out.returncode != 0:  # the child's own last line ("ours: one seed does not fit in 0.1 GiB"), not a
            # CalledProcessError that hid it
            sys.exit(f"seed_memory: the {side} side failed (exit {out.returncode}): "
                     + (out.stderr.strip().splitlines() or ["no output"])[-1])
        record = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(record)
        at = record["at_max"]
        rows.append([side, f"**{record['max_seeds']}**", _common.fmt_bytes(record["per_seed_total_bytes"]),
                     _common.fmt_bytes(at["outputs"]), _common.fmt_bytes(at["temporaries"]),
                     _common.fmt_bytes(at["total"]), _common.fmt_bytes(record["process_rss_bytes"])])
    table = _common.markdown_table(
        ["side", f"max seeds in {args.budget_gib:g} GiB", "program at 1 seed", "outputs at max",
         "temporaries at max", "program at max", "process RSS (1 seed compiled)"],
        rows,
    )
    if len(results) == 2:
        table += f"\n\nRatio ours / PureJaxRL: {results[0]['max_seeds'] / results[1]['max_seeds']:.2f}x the seeds."
    if problem:
        table += f"\n\nPureJaxRL skipped: {problem}."
    return _common.report("seed_memory", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
