"""Wall time of one command line (`train`, `evaluate`, `rollout`) of two checkouts of this repository, alternated.

Where `main_job_ab` reads `train`'s closing line (its chunks and the host's work
between them), this times the whole process as a user waits for it: imports,
building the env, tracing, compiling and the work itself. Each sample is a
fresh process, `python -m jaxrl_rollout COMMAND --compile-cache off`, with the
side's checkout first on PYTHONPATH (checked: the command must import that
checkout), in a new temporary folder. `{run}` in the command stands for a run
folder that `--setup` trained once, with the first side, before the rounds
(e.g. to time `evaluate`). Sides alternate, and the order flips every round; a
ratio is the median of per-round ratios against the first side.

    git worktree add /tmp/base HEAD~1
    python -m benchmarks.command_ab --side before=/tmp/base --side after=. --rounds 4 \\
        --setup "train --env brax/inverted_pendulum --seeds 2 --total-steps 1024 --out {run}" \\
        --command "evaluate {run} --num-episodes 2"
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import checkout_sides, child_env, command_line, machine_info, markdown_table, parser, report


def side_env(source: str) -> dict:
    """`child_env()` (JAX on --platform's platform) with the checkout `source` first on PYTHONPATH."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_command(source: str, argv: list[str], cwd: str) -> subprocess.CompletedProcess:
    """`python -m jaxrl_rollout ARGV --compile-cache off` of the checkout `source`, in `cwd`; an error if it
    imports another checkout or fails."""
    env = side_env(source)
    check = subprocess.run([sys.executable, "-c", "import jaxrl_rollout; print(jaxrl_rollout.__file__)"],
                           capture_output=True, text=True, env=env, cwd=cwd, check=True).stdout.strip()
    if not check.startswith(os.path.abspath(source) + os.sep):
        raise RuntimeError(f"side {source} imports jaxrl_rollout from {check}")
    done = subprocess.run([sys.executable, "-m", "jaxrl_rollout", *argv, "--compile-cache", "off"],
                          capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"side {source}: {shlex.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def sample(source: str, command: str, run: str | None) -> float:
    """Seconds of one process of `command` (`{run}` replaced by the run folder) of the checkout `source`."""
    with tempfile.TemporaryDirectory() as work:  # (an empty folder: a command's own folder comes first)
        argv = shlex.split(command.replace("{run}", run or os.path.join(work, "run")))
        start = time.perf_counter()
        run_command(source, argv, work)
        return time.perf_counter() - start


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--side", action="append", required=True, metavar="NAME=PATH", help="a checkout (two or more)")
    p.add_argument("--rounds", type=int, default=4, help="rounds (default: 4)")
    p.add_argument("--command", required=True, help="the command line to time, without the program name; {run}: "
                   "--setup's run folder, else a new folder per sample")
    p.add_argument("--setup", default=None, help="a command line run once before the rounds, with the first side, "
                   "that makes {run} (e.g. a small train)")
    args = p.parse_args()
    sides = checkout_sides(p, args.side)
    machine = machine_info()
    samples: dict = {name: [] for name, _ in sides}
    with tempfile.TemporaryDirectory() as setup_dir:
        run = None
        if args.setup is not None:
            run = os.path.join(setup_dir, "run")
            run_command(sides[0][1], shlex.split(args.setup.replace("{run}", run)), setup_dir)
        for r in range(args.rounds):
            for name, path in sides if r % 2 == 0 else sides[::-1]:
                samples[name].append(sample(path, args.command, run))
                print(f"round {r} {name}: {samples[name][-1]:.2f} s", file=sys.stderr, flush=True)
    base, rows = sides[0][0], []
    for name, _ in sides:
        walls = samples[name]
        ratio = statistics.median(a / b for a, b in zip(walls, samples[base]))
        rows.append([name, f"{statistics.median(walls):.2f}", f"{min(walls):.2f} - {max(walls):.2f}", f"{ratio:.3f}"])
    table = markdown_table(["side", "median wall s", "range", f"wall / {base}'s"], rows)
    report("command_ab", args, machine, samples, table, command_line())


if __name__ == "__main__":
    main()
