"""Test-session set-up: one JAX persistent compilation cache shared by the session's processes.

Many tests compile the same programs: the README's main job, the quickstart and
the command-line tests train the same default configs, and the CLI tests start
`jaxrl-rollout` subprocesses that would each compile again. A cache directory
made for this session (by the xdist controller before it starts its workers, so
workers and every subprocess they start inherit it) lets a program compiled once
be loaded from disk after that. What is computed is unchanged: a cache hit is
the same executable. The directory is removed when the session ends; a
JAX_COMPILATION_CACHE_DIR already set by whoever runs the tests is used as it is
and left alone.
"""

import os
import shutil
import sys
import tempfile

_ENV = "JAX_COMPILATION_CACHE_DIR"
_made: list[str] = []


def pytest_configure(config):
    if os.environ.get(_ENV):
        return
    path = tempfile.mkdtemp(prefix="jaxrl_rollout_tests_jax_cache_")
    os.environ[_ENV] = path
    _made.append(path)
    if "jax" in sys.modules:  # imported before this hook ran: its config has read the environment already
        sys.modules["jax"].config.update("jax_compilation_cache_dir", path)


def pytest_unconfigure(config):
    for path in _made:
        shutil.rmtree(path, ignore_errors=True)
    if _made:
        os.environ.pop(_ENV, None)
