"""What PPO reaches from the command line on each suite of the README's table, with default flags.

Each row runs, from a fresh temporary folder outside the repository, exactly what a
user would type:

    jaxrl-rollout train --env ID --seeds S --total-steps N --out runs/x
    jaxrl-rollout evaluate runs/x

(every other option at its default: `--network auto`, the CleanRL CartPole
hyperparameters), and records the network the runner chose, the final training
return (the summary's episode-weighted mean over the last tenth of training, with
its 95% t-interval across seeds), the closing deterministic evaluation (win, draw
and loss rates for two-player games), and compile and run times. It is a record of
out-of-the-box behaviour, not tuned results: the budgets are small enough for
2 CPU cores. The README's suite table quotes the figures (issue #24).

    python -m benchmarks.suites_cli --json benchmarks/results/suites_cli.json
    python -m benchmarks.suites_cli --only navix/Navix-Empty-5x5-v0 --cli .venv-navix/bin/jaxrl-rollout
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # `python benchmarks/suites_cli.py`, as README says every script runs
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import REPO_ROOT, child_env, command_line, machine_info, markdown_table, parser, report

# env id -> (seeds, env steps per run). CartPole-v1 is the README's main job (8 seeds, 5e5 steps).
SUITES = {
    "CartPole-v1": (8, 500_000),
    "Breakout-MinAtar": (2, 200_000),
    "brax/inverted_pendulum": (2, 200_000),
    "jumanji/Snake-v1": (2, 200_000),
    "craftax/Craftax-Classic-Symbolic-v1": (2, 200_000),
    "xminigrid/MiniGrid-Empty-5x5": (2, 100_000),
    "pgx/tic_tac_toe": (2, 200_000),
    "navix/Navix-Empty-5x5-v0": (2, 100_000),
    "gymnasium/CartPole-v1": (8, 500_000),
    "envpool/CartPole-v1": (8, 500_000),
}
QUICK_STEPS = 2048


def _run(args, cwd) -> tuple[subprocess.CompletedProcess, float]:
    # The user's PYTHONPATH is not the run's; this checkout's package is: an entry point installed editable from
    # another checkout (the main one, from a clone or worktree) imported that one's code, and measured it.
    env = dict(child_env(), PYTHONPATH=REPO_ROOT)
    start = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    return result, time.perf_counter() - start


def _search(pattern: str, text: str, group: int = 1):
    found = re.search(pattern, text)
    return found.group(group) if found else None


def measure(cli: str, env_id: str, seeds: int, steps: int) -> dict:
    """Train then evaluate one env id from a fresh folder; the figures parsed from what the commands print."""
    with tempfile.TemporaryDirectory(prefix="suites-cli-") as work:
        folder = "runs/" + env_id.replace("/", "-")
        train, wall = _run([cli, "train", "--env", env_id, "--seeds", str(seeds), "--total-steps", str(steps),
                            "--out", folder], work)
        row = {"env_id": env_id, "seeds": seeds, "steps": steps, "train_exit": train.returncode,
               "train_wall_s": round(wall, 1)}
        if train.returncode != 0:
            row["error"] = (train.stderr.strip().splitlines() or ["?"])[-1]
            return row
        out, err = train.stdout, train.stderr
        row["network"] = _search(r"network ([\w-]+)", err)
        row["compile_s"] = float(_search(r"compile ([\d.]+) s, run", out))
        row["run_s"] = float(_search(r"compile [\d.]+ s, run ([\d.]+) s", out))
        summary = re.search(r"\n\s+0\s+default\s+(\S+)\s+\[\s*(\S+),\s*(\S+)\]", out)
        if summary:
            row["final_return"], row["interval"] = float(summary.group(1)), [float(summary.group(2)),
                                                                             float(summary.group(3))]
        row["eval"] = _search(r"deterministic evaluation, (.*)", out)
        wdl = _search(r"legal-move opponent \(seat drawn per game\): (win .*?); per run", out)
        if wdl:  # a two-player game: win, draw and loss rates against a random legal-move player
            row["eval"] = wdl
        evaluated, _ = _run([cli, "evaluate", folder], work)
        row["evaluate_exit"] = evaluated.returncode
        if evaluated.returncode != 0:
            row["error"] = (evaluated.stderr.strip().splitlines() or ["?"])[-1]
    return row


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--only", help="comma list of env ids (default: every row)")
    p.add_argument("--cli", default=str(pathlib.Path(sys.executable).parent / "jaxrl-rollout"),
                   help="the jaxrl-rollout entry point to run (default: this interpreter's)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per run: does every row run?")
    args = p.parse_args()
    if not os.access(args.cli, os.X_OK):
        p.error(f"--cli {args.cli}: no jaxrl-rollout entry point there (for navix: a Python >= 3.12 venv with "
                "pip install -e '.[navix]', then --cli VENV/bin/jaxrl-rollout)")
    ids = args.only.split(",") if args.only else list(SUITES)
    unknown = [i for i in ids if i not in SUITES]
    if unknown:
        p.error(f"--only: unknown env ids {unknown}; known: {', '.join(SUITES)}")
    machine = machine_info()
    rows = []
    for env_id in ids:
        seeds, steps = SUITES[env_id]
        row = measure(os.path.abspath(args.cli), env_id, seeds, QUICK_STEPS if args.quick else steps)
        rows.append(row)
        print(f"{env_id}: {row}", file=sys.stderr, flush=True)
    table = markdown_table(
        ["env id", "network", "seeds x steps", "final return [95% interval]", "deterministic evaluation",
         "compile / run", "evaluate"],
        [[f"`{r['env_id']}`", r.get("network") or "-", f"{r['seeds']} x {r['steps']:,}",
          f"{r['final_return']:.2f} [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}]" if "final_return" in r
          else r.get("error", "-"), r.get("eval") or "-",
          f"{r['compile_s']:.1f} / {r['run_s']:.1f} s" if "run_s" in r else "-",
          "ok" if r.get("evaluate_exit") == 0 else r.get("error", "-")] for r in rows])
    report("suites_cli", args, machine, rows, table, command_line())


if __name__ == "__main__":
    main()
