"""The test run's share of the machine's CPU cores.

Under pytest-xdist (`-n 2`, the README's test command) each worker process is
pinned to cores of its own, split evenly, and the processes a test starts
(the command line, notebook kernels) inherit that. Unpinned, two workers on a
2-core machine each ran XLA programs split over both cores (the command line
makes one CPU device per usable core), so the two fought over the same cores
and every command-line run compiled a 2-device program: with one core each a
worker sees what a user on a 1-core machine sees. Tests about the host's
cores (tests/test_devices.py) start their processes with `on_every_core`.
"""

from __future__ import annotations

import os

MACHINE_CORES: frozenset[int] = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def pin_xdist_worker() -> frozenset[int] | None:
    """Pins this process to its share of the cores when it is an xdist worker; returns that share (None: unpinned).

    Worker k of n gets the k-th of n equal slices of the cores this run may use;
    where there are fewer cores than workers nothing is pinned.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not (worker and count and worker.startswith("gw") and MACHINE_CORES):
        return None
    count = int(count)
    index = int(worker[2:]) % max(count, 1)  # a worker xdist restarts after a crash gets the next number
    cores = sorted(MACHINE_CORES)
    if count < 2 or len(cores) < count:
        return None
    per = len(cores) // count
    share = frozenset(cores[index * per:(index + 1) * per])
    os.sched_setaffinity(0, share)
    return share


def on_every_core() -> None:
    """A `preexec_fn` for subprocesses that must see the whole machine (undoes the worker's pinning)."""
    if MACHINE_CORES:
        os.sched_setaffinity(0, MACHINE_CORES)
