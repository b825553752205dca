"""XLA compile time of several PPO programs, compared in one process (issue #14).

Compile times taken in separate processes move by about +-10% with the state of
this virtual machine, which hides a change of 5%. Here every side is traced and
lowered once, in one interpreter, and then each lowered program is compiled
`--reps` times, the sides alternating (the order flipped every rep). Each
compile passes its own value of an XLA option that does nothing without a dump
directory (`xla_dump_max_hlo_modules`), so that JAX's compile cache cannot hand
back the previous executable. A ratio is the median of the per-rep ratios
against the first side; the process CPU time of each compile (XLA compiles
kernels on several threads) gives a second ratio.

A side is NAME=SOURCE[:PROGRAM]:
- SOURCE is a checkout of this repository whose `jaxrl_rollout` is imported
  for that side, e.g. a `git worktree` of the commit before a change ("." is
  this one);
- PROGRAM is `ours` (default): the train of `vs_purejaxrl` for `--algo`, or
  `rejax`: rejax 0.1.3's PPO on the same config (`rejax_ppo.make_train`). rejax
  must be importable, so with a rejax side run this script with the PureJaxRL
  venv's interpreter (it has the same jax, flax and optax).

Trace + lower is printed too, but only the first side traces on a cold JAX;
the later ones reuse its warm caches, so compare those times across
processes (`vs_purejaxrl`), not here.

Run: python -m benchmarks.compile_ab --side before=/tmp/base --side after=. [--side rejax=.:rejax]
         [--algo ppo|ppo-pendulum] [--seeds 1] [--reps 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse_side(text: str) -> tuple[str, str, str]:
    """'name=source[:program]' -> (name, absolute source, program)."""
    name, sep, rest = text.partition("=")
    source, _, program = rest.partition(":")
    program = program or "ours"
    if not sep or not name or not source:
        raise argparse.ArgumentTypeError(f"--side takes NAME=SOURCE[:PROGRAM], got {text!r}")
    if program not in ("ours", "rejax"):
        raise argparse.ArgumentTypeError(f"--side program must be ours or rejax, got {program!r}")
    source = os.path.abspath(source)
    if not os.path.isdir(os.path.join(source, "jaxrl_rollout")):
        raise argparse.ArgumentTypeError(f"--side {name}: {source} has no jaxrl_rollout package")
    return name, source, program


def import_ours(source: str) -> None:
    """Loads `jaxrl_rollout` (and its algorithms) from `source`, with any other copy unloaded first."""
    for module in [m for m in sys.modules if m == "jaxrl_rollout" or m.startswith("jaxrl_rollout.")]:
        del sys.modules[module]
    sys.path.insert(0, source)
    try:
        import jaxrl_rollout.algorithms  # noqa: F401  (what the train imports, from `source`)
    finally:
        sys.path.remove(source)


def check_origin(name: str, source: str) -> None:
    """Every loaded `jaxrl_rollout` module came from `source` (an installed copy could shadow it)."""
    for module in [m for m in sys.modules if m == "jaxrl_rollout" or m.startswith("jaxrl_rollout.")]:
        path = getattr(sys.modules[module], "__file__", None)
        if path and not os.path.abspath(path).startswith(source + os.sep):
            raise RuntimeError(f"--side {name}: {module} was imported from {path}, not from {source}")


def build_train(source: str, program: str, algo: str, total_steps: int):
    """The side's `train(key)`: `vs_purejaxrl.make_train` on `source`'s package, or rejax's PPO."""
    from benchmarks import vs_purejaxrl

    if program == "rejax":
        from benchmarks import rejax_ppo

        return rejax_ppo.make_train("pendulum" if algo == "ppo-pendulum" else "cartpole")[0]
    import_ours(source)
    return vs_purejaxrl.make_train(algo, total_steps)


def main(argv=None) -> dict:
    p = _common.parser(__doc__.split("\n")[0])
    p.add_argument("--side", type=parse_side, action="append", required=True,
                   help="NAME=SOURCE[:PROGRAM] (program: ours or rejax); give two or more, the first is the reference")
    p.add_argument("--algo", choices=["ppo", "ppo-pendulum"], default="ppo")
    p.add_argument("--seeds", type=int, default=1, help="vmapped seeds (jax.jit(jax.vmap(train)) when > 1)")
    p.add_argument("--reps", type=int, default=10, help="compiles per side")
    p.add_argument("--total-steps", type=int, default=500_000)
    args = p.parse_args(argv)
    if len(args.side) < 2:
        p.error("give at least two --side")
    names = [name for name, _, _ in args.side]
    if len(set(names)) != len(names):
        p.error(f"--side names must differ, got {names}")
    if args.seeds < 1 or args.reps < 1:
        p.error("--seeds and --reps must be >= 1")
    if any(program == "rejax" for _, _, program in args.side):
        _common.require("rejax", _common.REJAX_HINT)

    import jax

    machine = _common.machine_info(here=True)
    key = jax.random.PRNGKey(30)
    arg = jax.random.split(key, args.seeds) if args.seeds > 1 else key
    lowered, trace_lower_s = {}, {}
    for name, source, program in args.side:
        train = build_train(source, program, args.algo, args.total_steps)
        fn = jax.jit(jax.vmap(train)) if args.seeds > 1 else jax.jit(train)
        t0 = time.perf_counter()
        lowered[name] = fn.lower(arg)
        trace_lower_s[name] = time.perf_counter() - t0
        if program == "ours":
            check_origin(name, source)  # after lowering, which may import more of the package

    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for rep in range(args.reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            c0, t0 = _cpu_s(), time.perf_counter()
            lowered[name].compile({"xla_dump_max_hlo_modules": -2 - rep})
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu_s() - c0)

    ref = names[0]
    rows, results = [], []
    for name, source, program in args.side:
        wall_ratio = statistics.median(w / r for w, r in zip(wall[name], wall[ref]))
        cpu_ratio = statistics.median(c / r for c, r in zip(cpu[name], cpu[ref]))
        results.append({"side": name, "source": source, "program": program, "trace_lower_s": trace_lower_s[name],
                        "compile_s": wall[name], "compile_cpu_s": cpu[name],
                        "wall_ratio": wall_ratio, "cpu_ratio": cpu_ratio})
        rows.append([name, program, f"{trace_lower_s[name]:.2f} s", f"{statistics.median(wall[name]):.2f} s",
                     f"{min(wall[name]):.2f}-{max(wall[name]):.2f} s", f"{statistics.median(cpu[name]):.2f} s",
                     f"**{wall_ratio:.3f}**", f"{cpu_ratio:.3f}"])
    print(f"{args.algo}, {args.seeds} seed(s), {args.reps} compiles per side, alternated in one process; "
          f"ratios against {ref}\n")
    table = _common.markdown_table(
        ["side", "program", "trace+lower (first side cold)", "XLA compile (median)", "range", "CPU time (median)",
         "compile ratio", "CPU-time ratio"], rows)
    results = {"algo": args.algo, "seeds": args.seeds, "reps": args.reps, "sides": results}
    return _common.report("compile_ab", args, machine, results, table, _common.command_line())


if __name__ == "__main__":
    main()
