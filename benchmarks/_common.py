"""Shared pieces of the benchmark scripts: timing, machine record, tables, JSON.

Timing rules used by every script:
- Compared variants are timed in alternation (A B A B ..., the order flipped
  every round) and each figure is the median over rounds, so a burst of load
  from another process hits both sides of a ratio alike.
- Every timed call ends with `jax.block_until_ready`, so asynchronous dispatch
  is never mistaken for speed.
- A sample repeats a call until it has run for at least `min_sample_s`, so
  sub-millisecond calls are not lost in timer noise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The JAX platform of the timing subprocesses (`--platform`); the parent process that orders them keeps its own.
PLATFORM_VAR = "JAXRL_BENCH_PLATFORM"


def child_env() -> dict:
    """The environment of a timing subprocess: this one's, with JAX on the platform `--platform` chose.

    The default is the CPU. With `--platform gpu` the children run on the GPU, and the parent should be
    started with `JAX_PLATFORMS=cpu`, so that it holds no GPU memory while they run.
    """
    return dict(os.environ, JAX_PLATFORMS=os.environ.get(PLATFORM_VAR, "cpu"))


def gpu_names() -> list[str]:
    """`nvidia-smi -L`'s lines (one per GPU), or [] where there is none."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg prints them."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(here: bool = False) -> dict:
    """What the figures depend on: CPU, core count, JAX backend and versions, load.

    `timed_on` is where the timed code ran: the timing subprocesses' platform (`--platform`), or, with `here`
    (a script that times in its own process), this process's JAX backend; `--platform` said nothing about
    those, and a GPU run of one was recorded as timed on the CPU. JAX is only asked about its backend if the
    script already imported it (or with `here`), so the torch baseline never starts XLA's thread pool.
    """
    if here:
        import jax  # noqa: F401  (the script times JAX in this process: its backend is the platform)
    info = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": loadavg(),
        "timed_on": sys.modules["jax"].default_backend() if here else os.environ.get(PLATFORM_VAR, "cpu"),
    }
    if info["timed_on"] != "cpu":
        info["gpus"] = gpu_names()
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        info.update(jax=jax.__version__, backend=jax.default_backend(), devices=[str(d) for d in jax.devices()])
    if "torch" in sys.modules:
        info["torch"] = sys.modules["torch"].__version__
    return info


def block(x: Any) -> Any:
    import jax

    return jax.block_until_ready(x)


def anchor_protocol(train: Callable[[Any], Any], num_seeds: int,
                    place: Callable[[Any], Any] | None = None) -> tuple[float, float, float, Any]:
    """PureJaxRL's `time_ppo.py` protocol: (compile_s, run1_s, run2_s, run 2's output).

    `jax.jit(train)` on `PRNGKey(30)`, or `jax.jit(jax.vmap(train))` on its
    split into `num_seeds` keys; compile = lower + compile; then two calls of
    the compiled function, each blocked until ready. `place`, if given, lays
    the S keys out before lowering (e.g. `devices.shard_runs`), and jit
    partitions the program from their sharding.
    """
    import jax

    fn = jax.jit(jax.vmap(train)) if num_seeds > 1 else jax.jit(train)
    arg = jax.random.split(jax.random.PRNGKey(30), num_seeds) if num_seeds > 1 else jax.random.PRNGKey(30)
    if place is not None:
        arg = place(arg)
    t0 = time.time()
    compiled = fn.lower(arg).compile()
    t1 = time.time()
    jax.block_until_ready(compiled(arg))
    t2 = time.time()
    out = jax.block_until_ready(compiled(arg))
    t3 = time.time()
    return t1 - t0, t2 - t1, t3 - t2, out


def anchor_line(compile_s: float, run1_s: float, run2_s: float, final_return: float) -> str:
    """The line `time_ppo.py` prints, which `vs_purejaxrl` parses for every side."""
    return f"compile={compile_s:.2f}s run1={run1_s:.3f}s run2={run2_s:.3f}s mean_final_return={final_return:.1f}"


def sample_time(fn: Callable[[], Any], min_sample_s: float) -> float:
    """Seconds per call of `fn`, repeating it until `min_sample_s` has passed."""
    calls, start = 0, time.perf_counter()
    while True:
        block(fn())
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_sample_s:
            return elapsed / calls


def interleaved(fns: Mapping[str, Callable[[], Any]], rounds: int, min_sample_s: float = 0.05) -> dict:
    """Median seconds per call of each fn, timed in alternating order.

    Each fn is called once first (warm-up: compilation, caches). Then `rounds`
    rounds each take one sample of every fn; odd rounds run in reverse order.

    Returns:
      {name: {"median_s": float, "samples_s": [float]}}
    """
    names = list(fns)
    for name in names:
        block(fns[name]())
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(sample_time(fns[name], min_sample_s))
    return {n: {"median_s": statistics.median(s), "samples_s": s} for n, s in samples.items()}


def alternated_calls(fns: Mapping[str, Callable[[], Any]], rounds: int) -> dict:
    """{name: [seconds of one blocked call per round]}, the order flipped every round (no warm-up here)."""
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            start = time.perf_counter()
            block(fns[name]())
            times[name].append(time.perf_counter() - start)
    return times


def ab_main(name: str, doc: str, compare: Callable[[int, int, int], dict], columns: Sequence[str],
            row: Callable[[dict], list], argv=None) -> dict:
    """The main of the in-process PPO A/B scripts (shuffle_ab, prng_ab).

    Parses --seeds / --updates / --rounds (one value each per seed count),
    runs `compare(seeds, updates, rounds)` for each, and reports one table row
    per seed count.
    """
    p = parser(doc.splitlines()[0])
    p.add_argument("--seeds", type=int_list, default=[1, 8, 64])
    p.add_argument("--updates", type=int_list, default=[200, 60, 12], help="PPO updates per run, per seed count")
    p.add_argument("--rounds", type=int_list, default=[10, 10, 6], help="alternated pairs, per seed count")
    args = p.parse_args(argv)
    if not len(args.seeds) == len(args.updates) == len(args.rounds):
        p.error("--seeds, --updates and --rounds need one value per seed count")
    import jax  # before the machine record, which reads jax's version and backend

    del jax
    machine = machine_info()
    results = [compare(s, u, r) for s, u, r in zip(args.seeds, args.updates, args.rounds)]
    table = markdown_table(columns, [row(x) for x in results])
    return report(name, args, machine, results, table, command_line())


def paired_ratios(samples: dict, numerator: str, denominator: str) -> dict:
    """Ratios numerator/denominator: the median and range of the per-round ratios (same round,
    adjacent in time), and `fastest`, the ratio of each side's fastest sample (load only ever adds
    time, so the fastest samples are the least disturbed estimate of each side's own cost)."""
    num, den = samples[numerator]["samples_s"], samples[denominator]["samples_s"]
    ratios = [a / b for a, b in zip(num, den)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "fastest": min(num) / min(den)}


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; every cell is str()-ed."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parser(description: str) -> argparse.ArgumentParser:
    """An ArgumentParser with the options every script shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", metavar="PATH", help="also write the results (and machine record) as JSON here")
    p.add_argument("--platform", choices=("cpu", "cuda", "rocm", "tpu"), action=_PlatformAction, default="cpu",
                   help="JAX platform of the timing subprocesses (default cpu; with another, start this script with "
                   "JAX_PLATFORMS=cpu so that it holds no GPU memory itself). A script that times in its own process "
                   "runs on that process's platform: set JAX_PLATFORMS for it instead")
    return p


def backend_problem(platform: str) -> str | None:
    """Why JAX cannot start on `platform` here (the last line of a probe subprocess's error), or None."""
    import subprocess

    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True, text=True,
                           env=dict(os.environ, JAX_PLATFORMS=platform), timeout=300)
    return None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]


class _PlatformAction(argparse.Action):
    """Stores --platform and hands it to the timing subprocesses (`child_env`), after checking in a subprocess
    that JAX has that backend here (without one every child failed on JAX's bare `assert _default_backend`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        missing = backend_problem(values) if values != "cpu" else None
        if missing:
            parser.error(f"--platform {values}: JAX has no {values} backend here (no such device, or jax's plugin "
                         f"for it not installed, e.g. jax[cuda12]): {missing}")
        setattr(namespace, self.dest, values)
        os.environ[PLATFORM_VAR] = values


def require(module: str, hint: str) -> None:
    """Exits with one line when `module` is not importable here: "<script>: needs <module> (<hint>)", where a
    traceback (ModuleNotFoundError, after minutes of compiling the other side) said it before."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: needs {module}, which is not installed for {sys.executable} "
                 f"({hint}).")


REJAX_HINT = "pip install rejax==0.1.3 pyyaml there, or run this script with an interpreter that has it"
TORCH_HINT = "pip install torch==2.13.0 gymnasium (the CPU build)"


def checkout_sides(parser: argparse.ArgumentParser, sides: list[str]) -> list[tuple[str, str]]:
    """`--side NAME=PATH` values as (name, absolute path), each path a checkout with a jaxrl_rollout package (a
    missing one was "side X imported jaxrl_rollout from <this checkout>", a traceback, after the first side ran)."""
    out = []
    for text in sides:
        name, sep, path = text.partition("=")
        if not sep or not name or not path:
            parser.error(f"--side takes NAME=PATH, got {text!r}")
        path = os.path.abspath(path)
        if not os.path.isdir(os.path.join(path, "jaxrl_rollout")):
            parser.error(f"--side {name}: {path} has no jaxrl_rollout package")
        out.append((name, path))
    return out


def int_list(text: str) -> list[int]:
    """'4,64,1024' -> [4, 64, 1024] (for argparse)."""
    return [int(x) for x in text.split(",") if x]


def report(name: str, args: argparse.Namespace, machine: dict, results: Any, table: str, command: str) -> dict:
    """Prints the table with its machine line; writes JSON if asked. Returns the record."""
    machine = dict(machine, loadavg_end=loadavg())
    record = {"benchmark": name, "command": command, "machine": machine, "results": results, "table": table}
    print(table)
    versions = ", ".join(f"{k} {machine[k]}" for k in ("backend", "jax", "torch") if k in machine)
    gpus = f", timed on {'; '.join(machine['gpus']) or 'gpu (nvidia-smi found none)'}" if "gpus" in machine else ""
    print(
        f"\n{machine['cpu']}, {machine['cpu_count']} cores{gpus}, {versions}; "
        f"load average at start {machine['loadavg_start']}, at end {machine['loadavg_end']}"
    )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    return record


def command_line() -> str:
    """How this script was invoked, for the report."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    prog = f"python -m {spec.name}" if spec is not None else f"python {os.path.relpath(sys.argv[0], REPO_ROOT)}"
    args = [a.replace(REPO_ROOT + os.sep, "") for a in sys.argv[1:]]
    return " ".join([prog] + args)


def search_seeds(footprint, budget: float, start: int, precision: float, one: dict | None = None) -> dict:
    """The most seeds whose `footprint(seeds)["total"]` is at most `budget`, and the probes taken (the memory benchmarks' search).

    A probe at 1 seed (`one`, if already taken) and one at `start`; while those fit, the next probe goes just
    past where the straight line through the last two meets the budget; inside the bracket, at that crossing,
    and where a footprint bends so that such a probe fails to halve the bracket, a plain bisection next. It
    ends when the largest count that fits and the smallest that does not are within `precision` of the
    former: four probes for a straight line, never many more than a doubling and a bisection would take.
    """
    one = one or footprint(1)
    fits = lambda f: f["total"] <= budget  # noqa: E731
    if not fits(one):
        return {"max_seeds": 0, "per_seed_total_bytes": one["total"], "probes": [one]}

    def crossing(a: dict, b: dict) -> float | None:
        """Seeds where the line through probes a and b meets the budget (None if it does not rise)."""
        slope = (b["total"] - a["total"]) / (b["seeds"] - a["seeds"])
        return a["seeds"] + (budget - a["total"]) / slope if slope > 0 else None

    probes, lo_p, hi = [one], one, start
    while True:
        probes.append(footprint(hi))
        if not fits(probes[-1]):
            hi_p = probes[-1]
            break
        aim = crossing(lo_p, probes[-1])
        lo_p = probes[-1]
        hi = int(aim * (1 + precision / 2)) + 1 if aim is not None and aim > lo_p["seeds"] else 2 * lo_p["seeds"]
        hi = max(hi, lo_p["seeds"] + 1)
    bisect = False
    while hi_p["seeds"] - lo_p["seeds"] > max(1, int(lo_p["seeds"] * precision)):
        lo, hi = lo_p["seeds"], hi_p["seeds"]
        aim = None if bisect else crossing(lo_p, hi_p)
        probes.append(footprint((lo + hi) // 2 if aim is None else min(max(int(aim), lo + 1), hi - 1)))
        if fits(probes[-1]):
            lo_p = probes[-1]
        else:
            hi_p = probes[-1]
        bisect = not bisect and hi_p["seeds"] - lo_p["seeds"] > (hi - lo) / 2
    return {"max_seeds": lo_p["seeds"], "per_seed_total_bytes": one["total"], "at_max": lo_p, "probes": probes}
