"""Test-run set-up: the slowest test files are handed out first.

`--dist loadfile` gives a worker one test file at a time, in the order the
controller queues them. xdist queues the files with the most tests first; the
suite's slowest files (command-line runs of every README suite row, the user's
walks, the notebooks) have few tests, came late, and one of them alone kept a
worker busy for minutes after the other had finished. They go first instead,
slowest first (worker seconds measured with `--durations=0`), and the rest
follow in the usual order to fill the gaps.

(Tried and left out: pinning each worker to a core of its own, so that the
command line in a test's subprocess made one CPU device instead of two. The
suite took 29:38 against 27:37 unpinned on the same machine: an unpinned
worker's XLA threads use the core the other worker leaves idle while it waits.)

(Tried and left out too, 2026-12-03: XLA_FLAGS=--xla_backend_optimization_level=0 for the whole run, since XLA's
compile is over half the suite's CPU. Compile-bound tests got faster (tests/test_own_env_and_network.py 89.5 -> 73.1
user CPU-s; a craftax `train` of the suite table 91 -> 56), run-bound ones slower (test_learning.py with test_sac.py
177 -> 249), and the whole suite used as much CPU as at the default level (2,615 + 184 s in 1,520 s, against 2,625 +
183 s in 1,452 s the evening before), while five exact checks failed: a vmapped sweep's run, a jitted rollout or a
resumed distributed run equals its counterpart bit for bit at the default level only.)

The suite's processes compile with XLA's CPU fusion emitters off (`_faster_cpu_compiles`), except the
tests that run commands in a user's shell (tests/test_user_paths.py `run_as_user`).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

# Slowest first (worker seconds of a `-n 2 --dist loadfile` run on a 2-core machine, 2026-12-03: the order that
# `python -m benchmarks.suite_costs` prints). xdist hands each worker one file at a time, in this order, then the
# rest in path order, and a long file handed out late kept one worker busy after the other had finished. Over that
# run's test times, each varied by +-30% in 200 trials, the script's simulation of xdist's queue ended the run on
# average 4 s after an even split of the work with these 15 files first, 33 s with the six slowest first.
SLOWEST_FILES = (
    "tests/test_user_suites.py",
    "tests/test_notebooks.py",
    "tests/test_offpolicy_runs.py",
    "tests/test_user_paths.py",
    "tests/test_distributed.py",
    "tests/test_rollout.py",
    "tests/test_guard.py",
    "tests/test_auto_network.py",
    "tests/test_video.py",
    "tests/test_own_env_and_network.py",
    "tests/test_sac.py",
    "tests/test_files.py",
    "tests/test_learning.py",
    "tests/test_networks.py",
    "tests/test_envs_host.py",
)


# Set by pytest_configure on the process that made the compilation cache (the controller, or a lone run).
_OWN_CACHE_DIR = None
_CACHE_PREFIX = "jaxrl-rollout-tests-xla-cache-"


def _share_compilation_cache():
    """One persistent XLA compilation cache for the whole run, in a fresh temporary folder.

    Many tests compile the same program: the README's main job, the Ctrl-C walk
    and the CartPole row of the suite table all run `jaxrl-rollout train` on the
    default config in a subprocess of their own, and a module's tests rebuild
    the same small configs. JAX's persistent cache
    (`JAX_COMPILATION_CACHE_DIR`) lets every later compile of a program that
    was compiled once in this run (in any worker or subprocess, which inherit
    the variable) load the executable instead. The folder is new for each run,
    so a test never reads anything made before it started, and a cache hit
    gives the executable that compiling gives (same program, same options).
    The size limit turns on JAX's file lock (the `filelock` package; without
    it there is no shared cache), so two workers never read an entry while the
    other is still writing it. A folder set by the user is kept. The command
    line's own default cache (`jaxrl_rollout.compile_cache`, `auto`) takes
    this folder too, so no test writes to the user's `~/.cache`.

    Programs that compile in 0.05 s or more are kept (JAX's default is 1 s, and
    this was 0.5 s): the suite compiles about 1,700 programs of 0.05 to 0.5 s,
    a quarter of them again in a later test or subprocess (52 s in all, on 2
    cores, 2026-12-01), and loading one takes about 20 ms against 100 ms to
    compile a 0.1 s one. Writing an entry costs little once `_no_eviction_scans`
    (below) has taken away JAX's scan of the whole folder before each write,
    which grew with every entry. Keeping every program (a threshold of 0) saved
    nothing: eight test files of eager code (test_networks, test_rollout,
    test_stepping and five more), `-n 2`, took 322 + 16 CPU-s at 0 against 309 +
    14 at 0.05 (one run each, 2026-12-03): the compiles under 0.05 s are mostly a
    worker's own eager ops, 25 ms each on average, which the other rarely repeats.
    """
    global _OWN_CACHE_DIR
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return  # the user's own, or the controller's (xdist workers inherit it)
    if importlib.util.find_spec("filelock") is None:
        return  # no lock, no shared cache (JAX needs filelock for the size limit; a dependency of the package)
    _OWN_CACHE_DIR = tempfile.mkdtemp(prefix=_CACHE_PREFIX)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE_DIR
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.05")
    os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))


# The XLA flag the suite's processes compile with (`_faster_cpu_compiles`), and the variable that says it was added
# by this file (tests/test_user_paths.py `_env` takes it away again: a user's shell has no such flag).
TEST_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"
ADDED_XLA_FLAG_VAR = "JAXRL_TESTS_ADDED_XLA_FLAG"


def _faster_cpu_compiles():
    """The suite's processes compile CPU programs with XLA's CPU fusion emitters off (XLA's older emitter instead).

    XLA's compile is most of the suite's CPU time on CI's 2 cores (the module docstring), and
    `--xla_cpu_use_fusion_emitters=false` cuts it by about a third: PPO's default CartPole program compiled in
    1.41 s against 2.18 s, DQN's in 1.30 against 2.01 s (jaxlib 0.10.2, 2 cores, 2026-12-06). The programs run
    slower (PPO's 0.64 against 0.38 s), so a test that trains for long can get slower (tests/test_learning.py
    alone, 44.9 -> 57.3 s; it compiles its programs as by default, `run_with_xla_defaults`), but over the whole
    suite the worker-seconds inside tests fell 27% with it in every process (BENCHMARKS.md, section 14). The
    values are the same to float32 rounding, and the suite's exact checks (a vmapped sweep's run against a single
    run, a resume against an uninterrupted run, jit against eager) held with it, each comparing two programs
    compiled under the same flags, but one: tests/test_networks.py's check that a CNN's batched init is
    module.init, two copies of one init in one program, which XLA rounded apart in the last bit of 2 of 128
    entries with it; that check now allows such rounding. It is a flag of XLA's CPU backend only: an
    accelerator's programs are compiled as they would be anyway.

    The commands that tests/test_user_paths.py runs in a user's shell (the README's main job, the Ctrl-C walk,
    every row of the README's suite table) run without it, with XLA's defaults, as a user's would.

    Set only where the user's XLA_FLAGS does not name the option (`XLA_FLAGS=--xla_cpu_use_fusion_emitters=true`
    runs the whole suite with XLA's default emitters), and only when this jaxlib accepts it: XLA ends the
    process at its first use of the CPU on a flag it does not know, so a short subprocess tries it first (once
    per run: xdist's workers and every subprocess inherit the variables).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags or os.environ.get(ADDED_XLA_FLAG_VAR):
        return
    with_flag = (flags + " " + TEST_XLA_FLAG).strip()
    try:
        tried = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"], capture_output=True,
                               timeout=120, env={**os.environ, "XLA_FLAGS": with_flag, "JAX_PLATFORMS": "cpu"})
    except (OSError, subprocess.TimeoutExpired):
        return
    if tried.returncode == 0:
        os.environ["XLA_FLAGS"] = with_flag
        os.environ[ADDED_XLA_FLAG_VAR] = TEST_XLA_FLAG


def xla_flags_with_devices(count: int) -> str:
    """XLA_FLAGS for a subprocess that needs `count` CPU devices: the suite's flags (the user's and
    `_faster_cpu_compiles`'), then `--xla_force_host_platform_device_count=count`."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}".strip()


def run_with_xla_defaults(fn, *args):
    """`jax.jit(fn)(*args)`, compiled with XLA's CPU fusion emitters on again where `_faster_cpu_compiles` put them off.

    For tests that run a program far longer than it takes to compile: the flag makes programs slower, and the
    per-compile option (one of XLA's debug options, over the process's XLA_FLAGS) gives this one program XLA's
    default emitters back. tests/test_learning.py, which uses it, took 51.9 and 50.2 s with it against 68.3 and
    60.6 s without (`-n 0`, alternated, 2 cores, 2026-12-06). The other learning checks (brax PPO, DQN, SAC and
    TD3 "learns quickly") compile more than they run: the four took 43.2 s with it against 38.7 s without, so
    they keep the suite's flag.
    """
    import jax

    options = None
    if os.environ.get(ADDED_XLA_FLAG_VAR) and jax.default_backend() == "cpu":
        options = {"xla_cpu_use_fusion_emitters": True}
    return run_compiled(fn, *args, compiler_options=options)


def run_compiled(fn, *args, compiler_options=None):
    """`jax.jit(fn)(*args)`, its program compiled with XLA's per-compile `compiler_options` (None: the process's)."""
    import jax

    return jax.jit(fn).lower(*args).compile(compiler_options=compiler_options)(*args)


def _no_eviction_scans():
    """In this process, JAX adds entries to the suite's cache folder without first reading every entry there.

    With a size limit set (which the lock needs, above), JAX's cache (`jax._src.lru_cache.LRUCache.put`) reads
    the size and last-use time of every entry in the folder, under the lock, before it writes a new one, to
    evict the least recently used if the limit would be passed. The suite writes a few thousand entries, so
    each write took longer than the last: 34, 76, 104 and 152 ms with 500, 1,000, 2,000 and 3,000 entries
    in the folder (2 cores, 2026-12-02). A whole run leaves 2,959 entries, 95 MB (counted 2026-12-02), so that
    is some minutes of reading, an estimate from those figures, with the other worker waiting on the lock
    meanwhile. The suite's folder is fresh, removed after the run and far under its 8 GiB limit, so no
    entry would ever be evicted: here, for that folder
    only, the scan is skipped; the lock is kept. (The command line's subprocesses, which load no conftest,
    still scan before each of their writes. A user's own folder is not touched.) A JAX without this private
    method keeps its own behaviour.
    """
    try:
        from jax._src import lru_cache
    except ImportError:
        return
    scan = getattr(lru_cache.LRUCache, "_evict_if_needed", None)
    if scan is None or getattr(scan, "_skips_the_suites_folder", False):
        return

    def evict_if_needed(self, *args, **kwargs):
        if pathlib.PurePath(str(self.path)).name.startswith(_CACHE_PREFIX):
            return None
        return scan(self, *args, **kwargs)

    evict_if_needed._skips_the_suites_folder = True
    lru_cache.LRUCache._evict_if_needed = evict_if_needed


def pytest_unconfigure(config):
    if _OWN_CACHE_DIR is not None:
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)


def pytest_configure(config):
    _share_compilation_cache()
    _faster_cpu_compiles()
    if not config.pluginmanager.hasplugin("dsession"):  # xdist's controller runs no test: it need not import jax
        _no_eviction_scans()
    # The file order below is the queue's order: xdist's own reordering (most tests first) would undo it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep order
