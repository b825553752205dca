"""PPO train time of two checkouts of this repository, in fresh processes, alternated.

A quick guard that a change did not slow the compiled PPO program: each side is
a checkout (e.g. a `git worktree` of the commit before the change, and `.`),
each sample is a fresh Python process that imports that checkout's
`jaxrl_rollout`, compiles `jax.jit(ppo.make_train(PPOConfig()))` (vmapped for
more than one seed: trace, lower and XLA compile, timed together) and runs it
twice (the faster run counts). Sides alternate, and the order flips every
round, so drift of the machine hits both; a ratio is the median of per-round
ratios against the first side. For the figure against PureJaxRL itself use
`vs_purejaxrl`; this script only says whether our side moved.

    python -m benchmarks.checkout_ab --side before=/tmp/base --side after=. --seeds 1,8 --rounds 6
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import (
    checkout_sides,
    child_env,
    command_line,
    int_list,
    machine_info,
    markdown_table,
    parser,
    report,
)

CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jax
import jaxrl_rollout
from jaxrl_rollout.algorithms import ppo
seeds = int(sys.argv[2])
train = ppo.make_train(ppo.PPOConfig())
f = jax.jit(jax.vmap(train)) if seeds > 1 else jax.jit(train)
keys = jax.random.split(jax.random.key(0), seeds) if seeds > 1 else jax.random.key(0)
t = time.perf_counter(); c = f.lower(keys).compile(); comp = time.perf_counter() - t
runs = []
for _ in range(2):
    t = time.perf_counter(); jax.block_until_ready(c(keys)); runs.append(time.perf_counter() - t)
print(json.dumps({"src": jaxrl_rollout.__file__, "compile": comp, "run": min(runs)}))
"""


def sample_env() -> dict:
    """`child_env()` (JAX on --platform's platform) without the PYTHONPATH entries that hold a `jaxrl_rollout`,
    so that each side imports its own checkout; other entries (packages installed with --target) stay."""
    env = child_env()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
             if p and not os.path.isfile(os.path.join(p, "jaxrl_rollout", "__init__.py"))]
    env.pop("PYTHONPATH", None)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_child(source: str, child: str, *args: str) -> dict:
    """Runs `child` (Python source; its sys.argv[1] is the checkout `source`, then `args`) in a fresh process.

    Returns its last stdout line as JSON, whose "src" (the `jaxrl_rollout.__file__` it imported) must lie in `source`.
    """
    out = subprocess.run([sys.executable, "-c", child, source, *args], capture_output=True, text=True,
                         env=sample_env(), check=True).stdout
    record = json.loads(out.strip().splitlines()[-1])
    if not record["src"].startswith(source):
        raise RuntimeError(f"side {source} imported jaxrl_rollout from {record['src']}")
    return record


def sample(source: str, seeds: int) -> dict:
    return run_child(source, CHILD, str(seeds))


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--side", action="append", required=True, metavar="NAME=PATH", help="a checkout (two or more)")
    p.add_argument("--seeds", type=int_list, default=[1, 8], help="seed counts (default: 1,8)")
    p.add_argument("--rounds", type=int, default=6, help="rounds per seed count (default: 6)")
    args = p.parse_args()
    sides = checkout_sides(p, args.side)
    machine = machine_info()
    results, rows = {}, []
    for seeds in args.seeds:
        samples = {name: [] for name, _ in sides}
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for name, path in order:
                samples[name].append(sample(path, seeds))
        results[seeds] = samples
        base = sides[0][0]
        for name, _ in sides[1:]:
            ratio = {k: statistics.median(a[k] / b[k] for a, b in zip(samples[name], samples[base]))
                     for k in ("run", "compile")}
            rows.append([seeds, f"{name} / {base}", f"{ratio['run']:.3f}", f"{ratio['compile']:.3f}",
                         f"{statistics.median(s['run'] for s in samples[name]):.2f} / "
                         f"{statistics.median(s['run'] for s in samples[base]):.2f} s"])
    table = markdown_table(["seeds", "sides", "run ratio", "compile ratio", "median run"], rows)
    report("checkout_ab", args, machine, results, table, command_line())


if __name__ == "__main__":
    main()
