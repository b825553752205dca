"""Peak resident memory of whole `runner.train` runs of DQN, with a large and a small replay buffer, with and without
a run folder; one or more checkouts of this repository, each run in a fresh process, the sides alternated.

Each sample is a fresh Python process that imports its side's `jaxrl_rollout`, trains `--seeds` seeds of DQN
(CleanRL's config) on `--env` for `--steps` env steps with `buffer_size` transitions, in chunks of
`--chunk-updates` updates, checkpointing every `--checkpoint-every` chunks when it has a run folder (a temporary
one), and reports its peak resident set (`ru_maxrss`: the whole process, Python, XLA and the libraries included)
and the run's time (compile included). The replay buffers' size is the state's own (its obs and next_obs leaves);
the small buffer's run gives what the process takes besides them, so the peak over the buffers is
(peak - small run's peak) / buffers. Not in `run_all`: BENCHMARKS section 15.

    python -m benchmarks.run_memory --side before=/tmp/base --side after=. [--buffer 400000] [--rounds 1]
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import checkout_sides, command_line, fmt_bytes, machine_info, markdown_table, parser, report
from benchmarks.checkout_ab import run_child

CHILD = """
import json, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import jax
import jaxrl_rollout
from jaxrl_rollout import runner
from jaxrl_rollout.algorithms import dqn
env, seeds, steps, buffer, chunk, every, folder = sys.argv[2], *map(int, sys.argv[3:9])
config = dqn.DQNConfig(env_id=env, buffer_size=buffer, total_timesteps=steps)
spec = runner.RunSpec("dqn", config, (dqn.DQNHParams(),), seeds, chunk_updates=chunk)
t = time.perf_counter()
result = runner.train(spec, tempfile.mkdtemp() + "/run" if folder else None, checkpoint_every=every, progress=None)
seconds = time.perf_counter() - t
buffers = sum(x.nbytes for x in jax.tree.leaves(result.state.buffer))  # all its leaves, obs and next_obs the most
print(json.dumps({"src": jaxrl_rollout.__file__, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "seconds": seconds, "buffers": buffers, "jax": jax.__version__, "backend": jax.default_backend()}))
"""


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--side", action="append", required=True, metavar="NAME=PATH", help="a checkout (one or more)")
    p.add_argument("--env", default="Breakout-MinAtar")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--buffer", type=int, default=400_000, help="the large buffer, in transitions")
    p.add_argument("--small-buffer", type=int, default=2_000)
    p.add_argument("--chunk-updates", type=int, default=4)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    sides = checkout_sides(p, args.side)
    machine = machine_info()
    results, rows = [], []
    for folder in (0, 1):
        for buffer in (args.small_buffer, args.buffer):
            for r in range(args.rounds):
                for name, path in (sides if r % 2 == 0 else sides[::-1]):
                    record = run_child(path, CHILD, args.env, str(args.seeds), str(args.steps), str(buffer),
                                       str(args.chunk_updates), str(args.checkpoint_every), str(folder))
                    results.append(dict(record, side=name, buffer=buffer, folder=bool(folder)))
    machine.update(jax=results[0]["jax"], backend=results[0]["backend"])  # the children's
    for folder in (False, True):
        for name, _ in sides:
            mine = [x for x in results if x["side"] == name and x["folder"] == folder]
            small = min(x["peak"] for x in mine if x["buffer"] == args.small_buffer)
            large = [x for x in mine if x["buffer"] == args.buffer]
            peak, buffers = min(x["peak"] for x in large), large[0]["buffers"]
            rows.append([name, "yes" if folder else "no", fmt_bytes(buffers), fmt_bytes(peak), fmt_bytes(small),
                         f"{(peak - small) / buffers:.2f}", f"{min(x['seconds'] for x in large):.1f} s"])
    table = markdown_table(["side", "run folder", "replay buffers", "peak", f"peak, {args.small_buffer} transitions",
                            "(peak - small) / buffers", "run (compile included)"], rows)
    report("run_memory", args, machine, results, table, command_line())


if __name__ == "__main__":
    main()
