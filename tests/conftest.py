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
"""

from __future__ import annotations

# Slowest first (worker seconds of a `-n 2 --dist loadfile --durations=0` run on a 2-core machine).
SLOWEST_FILES = (
    "tests/test_user_suites.py",
    "tests/test_user_paths.py",
    "tests/test_offpolicy_runs.py",
    "tests/test_notebooks.py",
    "tests/test_learning.py",
    "tests/test_cli.py",
)


def pytest_configure(config):
    # The file order below is the queue's order: xdist's own reordering (most tests first) would undo it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep order
