"""Where the test suite's time goes: XLA compiles, tracing and the compilation cache, per test file and test.

The suite is CPU-bound on CI's 2 cores, and most of its time is XLA compiling
programs (at 2026-12-03: about 2,000 of the ~3,850 worker-seconds that a
`-n 2 --dist loadfile` run spent inside tests, before counting the command-line
subprocesses that tests/test_user_paths.py starts). To cut it, one has to know
which tests compile what, and which programs the suite's shared compilation
cache (tests/conftest.py) already hands from one test to another. This script
runs pytest with a `sitecustomize` hook that listens to JAX's own monitoring
events (`jax._src.monitoring`: trace, lowering and XLA compile durations by
program name; persistent-cache hits and misses) in every Python process that
imports JAX, the pytest workers and the subprocesses they start, and writes
them, with the test that was running (`PYTEST_CURRENT_TEST`, inherited by
subprocesses), to one file per process. Then it adds them up, and simulates
xdist's queue of test files over the measured times (`queue_finish`): when
each of two workers would end with tests/conftest.py's `SLOWEST_FILES` first,
and with every file slowest first, so that list can be kept up to date.

Limits: a subprocess started with an environment of its own making
(tests/test_user_paths.run_as_user, a user's environment) does not see the
hook's PYTHONPATH, so its compiles are missing from the compile columns; its
time is still in the worker-seconds column (pytest's `--durations`, the wall
time of every test's setup, call and teardown: `--durations-min=0`). Compile
times are wall times of XLA's compile call, so on a loaded machine they grow
with the load.

Run: python -m benchmarks.suite_costs [--top 40] [--keep DIR] [--json PATH] [-- PYTEST ARGS]
     (default pytest arguments: the README's `-n 2 --dist loadfile`)
     python -m benchmarks.suite_costs --report DIR   (the table again from a kept run's records)
"""

from __future__ import annotations

import collections
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _common

LOG_VAR = "JAXRL_SUITE_COSTS_DIR"

# Written to a temporary folder put first on PYTHONPATH: Python imports it at every interpreter's start. It
# imports nothing heavy itself; it waits for `jax._src.monitoring` to be imported and then registers its listeners.
HOOK = r'''
import importlib.abc
import importlib.machinery
import os
import sys

_DIR = os.environ.get("JAXRL_SUITE_COSTS_DIR")


def _test():
    return os.environ.get("PYTEST_CURRENT_TEST", "-").split(" (")[0]


def _write(*fields):
    try:
        with open(os.path.join(_DIR, f"{os.getpid()}.tsv"), "a") as f:
            f.write("\t".join(str(x) for x in fields) + "\n")
    except OSError:
        pass


def _duration(event, seconds, **kwargs):
    kind = {"/jax/core/compile/backend_compile_duration": "compile",
            "/jax/core/compile/jaxpr_trace_duration": "trace",
            "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}.get(event)
    if kind:
        _write(kind, _test(), kwargs.get("fun_name", "-"), f"{seconds:.4f}")


def _event(event, **kwargs):
    if event.endswith(("/cache_hits", "/cache_misses")):
        _write("hit" if event.endswith("hits") else "miss", _test(), "-", "0")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "jax._src.monitoring":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.register_event_duration_secs_listener(_duration)
            module.register_event_listener(_event)

        spec.loader.exec_module = exec_module
        return spec


if _DIR:
    sys.meta_path.insert(0, _Finder())
'''

_DURATION = re.compile(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")


def hooked_env(hook_dir: str, log_dir: str) -> dict:
    """This process's environment with the hook written into `hook_dir` and first on PYTHONPATH, recording into
    `log_dir`: a Python process started with it records its JAX compiles there."""
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
        f.write(HOOK)
    env = dict(os.environ, **{LOG_VAR: log_dir})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [hook_dir, os.environ.get("PYTHONPATH")]))
    return env


def run_suite(pytest_args: list[str], log_dir: str) -> tuple[int, float, str]:
    """Runs pytest with the hook; returns its exit code, wall seconds and output (also printed as it comes)."""
    hook_dir = tempfile.mkdtemp(prefix="suite-costs-hook-")
    env = hooked_env(hook_dir, log_dir)
    command = [sys.executable, "-m", "pytest", *pytest_args, "--durations=0", "--durations-min=0", "-q"]
    print("running:", " ".join(command), flush=True)
    start = time.perf_counter()
    out = []
    try:
        with subprocess.Popen(command, cwd=_common.REPO_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as proc:
            for line in proc.stdout:
                out.append(line)
                sys.stdout.write(line)
        code = proc.returncode
    finally:
        shutil.rmtree(hook_dir, ignore_errors=True)
    wall = time.perf_counter() - start
    with open(os.path.join(log_dir, "pytest.out"), "w") as f:
        f.writelines(out)
    return code, wall, "".join(out)


def tally(log_dir: str, pytest_output: str) -> dict:
    """Per test and per test file: worker seconds (pytest --durations), compile, trace and lowering seconds,
    persistent-cache hits and misses, and the programs that took longest to compile."""
    tests: dict = collections.defaultdict(collections.Counter)
    programs: collections.Counter = collections.Counter()
    for line in pytest_output.splitlines():
        m = _DURATION.match(line)
        if m:
            tests[m.group(3)]["worker_s"] += float(m.group(1))
    for path in glob.glob(os.path.join(log_dir, "*.tsv")):
        with open(path) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if len(fields) != 4:  # a line cut short by a process killed while writing it
                    continue
                kind, test, name, seconds = fields
                if kind in ("hit", "miss"):
                    tests[test]["hits" if kind == "hit" else "misses"] += 1
                else:
                    tests[test][kind + "_s"] += float(seconds)
                    if kind == "compile":
                        programs[(test, name)] += float(seconds)
    files: dict = collections.defaultdict(collections.Counter)
    for test, counts in tests.items():
        files[test.split("::")[0]].update(counts)
    total = collections.Counter()
    for counts in files.values():
        total.update(counts)
    return {"tests": {k: dict(v) for k, v in tests.items()}, "files": {k: dict(v) for k, v in files.items()},
            "programs": [[t, n, round(s, 2)] for (t, n), s in programs.most_common()], "total": dict(total)}


def queue_finish(files: list[tuple[str, list[float]]], workers: int = 2, prefetch: int = 2) -> list[float]:
    """When each worker ends, by a simulation of pytest-xdist's `--dist loadfile` queue (xdist 3.8).

    xdist gives each worker one file, and another once a worker has no more
    than `prefetch` of its tests left to run; the files go out in the order
    given (tests/conftest.py orders them, with xdist's own reordering off).
    `files` is [(file, [seconds of each of its tests, in order])].
    """
    queue = collections.deque(files)
    pending: list[collections.deque] = [collections.deque() for _ in range(workers)]
    clock = [0.0] * workers

    def give(w):
        pending[w].extend(queue.popleft()[1])

    for w in range(workers):  # xdist: one file each, then a second to a worker whose first is nearly done
        if queue:
            give(w)
    for w in range(workers):
        if queue and len(pending[w]) <= prefetch:
            give(w)
    busy = {w for w in range(workers) if pending[w]}
    while busy:
        w = min(busy, key=lambda k: clock[k] + pending[k][0])  # the worker whose running test ends first
        clock[w] += pending[w].popleft()
        if queue and len(pending[w]) <= prefetch:
            give(w)
        if not pending[w]:
            busy.discard(w)
    return clock


def schedule(result: dict, first: tuple[str, ...]) -> dict:
    """The simulated ends of the two workers (`queue_finish`) with the files in `first` first and the rest in
    path order (tests/conftest.py's order), and with every file slowest first (the best such a list can do)."""
    by_file: dict = collections.defaultdict(list)
    for test in sorted(result["tests"]):
        if "::" in test:
            by_file[test.split("::")[0]].append(result["tests"][test].get("worker_s", 0.0))
    rank = {name: i for i, name in enumerate(first)}
    listed = sorted(by_file.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    slowest = sorted(by_file.items(), key=lambda kv: -sum(kv[1]))
    return {"listed_order": [round(t, 1) for t in queue_finish(listed)],
            "slowest_first": [round(t, 1) for t in queue_finish(slowest)],
            "slowest_files": [name for name, _ in slowest[:20]]}


def tables(result: dict, top: int) -> str:
    cols = ("worker_s", "compile_s", "trace_s", "lower_s", "hits", "misses")

    def row(name, c):
        return [name, *(f"{c.get(k, 0):.0f}" if k.endswith("_s") else c.get(k, 0) for k in cols)]

    by = sorted(((f, c) for f, c in result["files"].items() if f != "-" or any(c.values())),
                key=lambda kv: -kv[1].get("worker_s", 0))
    total = result["total"]
    parts = ["Per test file (worker_s: pytest's durations; compile/trace/lower: JAX's, in every process with the hook)",
             _common.markdown_table(("file", *cols), [row("all", total)] + [row(f, c) for f, c in by[:top]]),
             "", f"The {top} slowest tests",
             _common.markdown_table(("test", *cols), [row(t, c) for t, c in sorted(
                 result["tests"].items(), key=lambda kv: -kv[1].get("worker_s", 0))[:top]]),
             "", f"The {top} longest compiles (a test, a program name: seconds over every compile of that name)",
             _common.markdown_table(("test", "program", "compile_s"), result["programs"][:top])]
    if "schedule" in result:
        sched = result["schedule"]
        parts += ["", "xdist's `--dist loadfile` queue on 2 workers, simulated from these test times: the workers end at "
                  f"{' s and '.join(f'{t:.0f}' for t in sched['listed_order'])} s in tests/conftest.py's order "
                  f"(SLOWEST_FILES first), at {' s and '.join(f'{t:.0f}' for t in sched['slowest_first'])} s with "
                  "every file slowest first. The slowest files now: " + ", ".join(sched["slowest_files"])]
    return "\n".join(parts)


def main() -> None:
    argv = sys.argv[1:]
    pytest_args = ["-n", "2", "--dist", "loadfile"]
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1:]
    p = _common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--top", type=int, default=30, help="rows of each table (default: %(default)s)")
    p.add_argument("--keep", metavar="DIR", help="keep the per-process records (and pytest's output) in DIR")
    p.add_argument("--report", metavar="DIR", help="no run: the tables from the records a --keep run left in DIR")
    args = p.parse_args(argv)
    if args.top < 1:  # a negative one sliced the tables from their end
        p.error(f"--top {args.top}: the rows of each table, a positive number")
    machine = dict(_common.machine_info(), jax=importlib.metadata.version("jax"))
    if args.report and not os.path.isfile(os.path.join(args.report, "pytest.out")):
        p.error(f"--report {args.report}: no pytest.out there (the folder a --keep run writes its records to)")
    if args.keep and os.path.isdir(args.keep) and os.listdir(args.keep):
        p.error(f"--keep {args.keep}: not empty (a run's records would mix with what is there); give a new folder")
    if args.report:
        with open(os.path.join(args.report, "pytest.out")) as f:
            output = f.read()
        result = tally(args.report, output)
    else:
        log_dir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="suite-costs-")
        os.makedirs(log_dir, exist_ok=True)
        try:
            code, wall, output = run_suite(pytest_args, log_dir)
            result = tally(log_dir, output)
            result.update(pytest_exit=code, wall_s=round(wall, 1))
        finally:
            if not args.keep:
                shutil.rmtree(log_dir, ignore_errors=True)
        print(f"\npytest exited {code} after {wall:.0f} s")
    from tests.conftest import SLOWEST_FILES  # (its imports are the standard library's)

    result["schedule"] = schedule(result, SLOWEST_FILES)
    _common.report("suite_costs", args, machine, result, tables(result, args.top), _common.command_line())


if __name__ == "__main__":
    main()
