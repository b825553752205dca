"""The README's main job (`python -m jaxrl_rollout`) of two checkouts of this repository, as a user runs it, alternated.

Where `checkout_ab` times the compiled PPO program alone, this times the whole
command: its closing line's `run` seconds cover the chunks and the host's work
outside them (TensorBoard event files, checkpoints, the progress lines, videos
when asked for), which the library's `make_train` never does. Each sample is a
fresh process, `python -m jaxrl_rollout train --out TMP --compile-cache off
ARGS...` with the side's checkout first on PYTHONPATH (checked: the command
must import that checkout), in a new temporary folder. Sides alternate, and
the order flips every round; a ratio is the median of per-round ratios
against the first side.

    git worktree add /tmp/base HEAD~3
    python -m benchmarks.main_job_ab --side before=/tmp/base --side after=. --rounds 5
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import checkout_sides, child_env, command_line, machine_info, markdown_table, parser, report

CLOSING = re.compile(r"^  compile (\d+\.\d) s, run (\d+\.\d) s \(", re.M)


def sample(source: str, extra: list[str]) -> dict:
    """One main job of the checkout `source`: {"compile": s, "run": s, "line": its closing line}."""
    env = child_env()  # JAX on --platform's platform
    env["PYTHONPATH"] = os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as work:  # (run in an empty folder: a command's own folder comes first)
        check = subprocess.run([sys.executable, "-c", "import jaxrl_rollout; print(jaxrl_rollout.__file__)"],
                               capture_output=True, text=True, env=env, cwd=work, check=True).stdout.strip()
        if not check.startswith(os.path.abspath(source) + os.sep):
            raise RuntimeError(f"side {source} imports jaxrl_rollout from {check}")
        done = subprocess.run([sys.executable, "-m", "jaxrl_rollout", "train", "--out", "run", "--compile-cache", "off",
                               *extra], capture_output=True, text=True, env=env, cwd=work)
    if done.returncode != 0:
        raise RuntimeError(f"side {source} exited {done.returncode}: {done.stderr[-2000:]}")
    found = CLOSING.search(done.stdout)
    if found is None:
        raise RuntimeError(f"side {source} printed no closing line:\n{done.stdout[-2000:]}")
    line = done.stdout[found.start():].splitlines()[0].strip()
    return {"compile": float(found.group(1)), "run": float(found.group(2)), "line": line}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--side", action="append", required=True, metavar="NAME=PATH", help="a checkout (two or more)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default: 5)")
    p.add_argument("--train-arg", action="append", default=[], metavar="ARG",
                   help="an argument for train after the defaults, repeated (e.g. --train-arg=--tensorboard "
                        "--train-arg=false)")
    args = p.parse_args()
    sides = checkout_sides(p, args.side)
    machine = machine_info()
    samples: dict = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        for name, path in sides if r % 2 == 0 else sides[::-1]:
            samples[name].append(sample(path, args.train_arg))
            print(f"round {r} {name}: {samples[name][-1]['line']}", file=sys.stderr, flush=True)
    base, rows = sides[0][0], []
    for name, _ in sides:
        runs = [s["run"] for s in samples[name]]
        ratio = statistics.median(a["run"] / b["run"] for a, b in zip(samples[name], samples[base]))
        rows.append([name, f"{statistics.median(runs):.1f}", f"{min(runs):.1f} - {max(runs):.1f}",
                     f"{ratio:.3f}", samples[name][-1]["line"]])
    table = markdown_table(["side", "median run s", "range", f"run / {base}'s", "last closing line"], rows)
    report("main_job_ab", args, machine, samples, table, command_line())


if __name__ == "__main__":
    main()
