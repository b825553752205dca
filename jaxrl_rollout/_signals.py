"""SIGINT, SIGTERM and SIGHUP as a request to stop at the next safe point (standard library only).

SLURM and Kubernetes send SIGTERM before they kill a job; Ctrl-C sends SIGINT;
a terminal that goes away (an ssh connection dropped, the window closed) sends
SIGHUP. Python's default turns SIGINT into a KeyboardInterrupt raised wherever the main
thread happens to be, which can be inside a library that swallows it (a bare
`except:` around an optional import, Orbax's save threads) or leaves threads
hanging; SIGTERM and SIGHUP, by default, end the process with no save at all
(up to `--checkpoint-every` chunks lost). Inside
`StopSignals` each only sets `requested`, and the training loop stops at the
next chunk boundary, after saving the chunk in flight. A signal the process
was started ignoring stays ignored: `nohup` (SIGHUP) and a shell's background
job (SIGINT) keep running as they asked. A second SIGINT, outside
a save, raises KeyboardInterrupt at once for a user who does not want to wait.

Contexts nest: an inner `StopSignals` (the runner's) joins the outer one (the
command line's, entered before the slow imports), so a signal that arrives
while JAX is still importing is kept until the runner can act on it; during the
compile (`at_once`, `compiled`) it stops the run at once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from jaxrl_rollout._logs import filtered

__all__ = ["STOP_SIGNALS", "Interrupted", "StopSignals", "at_once", "compiled", "raise_at_once", "ready_time",
           "stopped_at_once"]

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals `StopSignals` turns into a stop at the next chunk boundary (Windows has no SIGHUP)."""

_ACTIVE: StopSignals | None = None


class Interrupted(KeyboardInterrupt):
    """Stopped by a signal, after the last whole chunk was saved.

    A KeyboardInterrupt, so code that handles Ctrl-C handles it too.

    Attributes:
      signal_name: "SIGINT", "SIGTERM" or "SIGHUP".
      exit_code: the shell's convention, 128 + the signal number (130, 143, 129).
    """

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_code = 128 + int(getattr(signal, signal_name))


class StopSignals:
    """Turns SIGINT, SIGTERM and SIGHUP into `requested` (the signal's name) while active.

    Args:
      say: prints one line (the notice that a stop was requested).

    Handlers are installed only from the main thread, and never over a signal
    the process ignores (a job started with SIGINT ignored keeps it so); the
    previous handlers come back on exit. `saving` set to True makes even a
    second SIGINT wait: a checkpoint save is never cut short.
    """

    def __init__(self, say: Callable[[str], None]):
        self.requested: str | None = None
        self.saving = False
        self.at_once = False  # set by `at_once`: no chunk boundary is left to wait for
        self.raised: str | None = None  # the signal that raised at once (`stopped_at_once`)
        self._say = say
        self._previous: dict = {}
        self._outer: StopSignals | None = None

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.at_once and not self.saving:
            self.raised = self.requested = name
            raise Interrupted(name)
        if self.requested is not None and signum == signal.SIGINT and not self.saving:
            self.raised = "SIGINT"
            raise KeyboardInterrupt
        if self.requested is None:
            self._say(f"  {name}: stopping at the next chunk boundary, after saving"
                      + (" (Ctrl-C again to stop at once)" if signum == signal.SIGINT else ""))
        self.requested = name

    def __enter__(self) -> StopSignals:
        global _ACTIVE
        if _ACTIVE is not None:  # join the outer context: one request, seen by both
            self._outer = _ACTIVE
            return _ACTIVE
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                previous = signal.getsignal(sig)
                if previous not in (signal.SIG_IGN, None):
                    self._previous[sig] = previous
                    signal.signal(sig, self._handle)
        _ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        if self._outer is not None:
            self._outer = None
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}
        _ACTIVE = None


def stopped_at_once() -> str | None:
    """The signal that raised at once (in `at_once`, `raise_at_once`, or a second Ctrl-C), or None.

    Raised where the main thread happened to be, the exception may have become
    another: inside a host env's step (where XLA runs its `io_callback` on the
    main thread) JAX reports it as a runtime error, and code that turns errors into
    one line (`evaluate --video`'s) may have turned that into a ValueError.
    The runner (to save the last whole chunk) and the command line (to
    report it in one line) ask this to treat such an error as the interruption it is.
    """
    return None if _ACTIVE is None else _ACTIVE.raised


class _InterruptedCallbacks(logging.Filter):
    """Drops JAX's log of a host callback that a signal interrupted (`quiet_interrupted_callbacks`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, KeyboardInterrupt))


@contextlib.contextmanager
def quiet_interrupted_callbacks():
    """Within it, JAX does not log a traceback for a host callback (a host env's step) that a Ctrl-C or a signal
    raised at once interrupted: the interruption is reported where it is handled, in one line, and the log
    printed a traceback from inside gymnasium's step above it. Other failures of a callback are logged as before."""
    with filtered("jax._src.callback", _InterruptedCallbacks()):
        yield


@contextlib.contextmanager
def shielded():
    """Within it, a signal only asks to stop (as during a checkpoint's save): for closing work that must not be
    cut short, such as a host env's pool being closed (a second Ctrl-C while gymnasium forked its workers left
    them running after the process ended). Nothing changes where no `StopSignals` is active."""
    active = _ACTIVE
    if active is None or active.saving:
        yield
        return
    active.saving = True
    try:
        yield
    finally:
        active.saving = False


@contextlib.contextmanager
def raise_at_once():
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` at once while active (a `StopSignals` in `at_once` mode from
    the start): for commands with no chunk boundary to stop at (`evaluate`, `rollout`), so a job scheduler's
    SIGTERM or a closed terminal's SIGHUP unwinds the command as Ctrl-C does (a video's temporary file removed,
    ffmpeg and host env workers ended, the exit status 128 + the signal's number), instead of ending the process
    where it stands. A signal the process was started ignoring stays ignored."""
    with StopSignals(lambda line: None) as stop:
        stop.at_once = True
        yield stop


@contextlib.contextmanager
def at_once():
    """Within it a signal raises `Interrupted` at once instead of waiting for a chunk boundary: for closing work
    after training (the command line's evaluation), when the run is complete and saved and no boundary is
    left. A signal that arrived before (during the last chunk, or the outputs' writing) raises on entry. The
    work must wait for JAX in Python (`wait_ready`), not in C++, for the handler to run. Outside
    `StopSignals` nothing changes."""
    active = _ACTIVE
    if active is None:
        yield
        return
    if active.requested:
        raise Interrupted(active.requested)
    active.at_once = True
    try:
        yield
    finally:
        active.at_once = False


def wait_ready(tree: Any, longest_sleep: float = 0.02) -> None:
    """Waits until every array of `tree` (dispatched asynchronously) is computed, in short sleeps.

    A wait inside XLA (`np.asarray`, `block_until_ready`) holds the main thread
    in C++, where Python runs no signal handler: a Ctrl-C during a chunk of an
    off-policy learner's default run (minutes on a CPU) would not even print
    its notice until the chunk ended. Sleeping in Python instead lets the
    handler print at once, and a second Ctrl-C raise KeyboardInterrupt here
    (the last whole chunk is then saved while the one in flight is dropped).
    The sleeps grow from 1 ms to `longest_sleep`, so a chunk ends at most that
    much later than it would have.
    """
    import jax  # here: the command line imports this module before it imports JAX

    leaves = [x for x in jax.tree.leaves(tree) if hasattr(x, "is_ready")]
    sleep = 0.001
    while not all(x.is_ready() for x in leaves):
        time.sleep(sleep)
        sleep = min(2 * sleep, longest_sleep)


def _in_helper(fn: Callable[[], Any], name: str) -> Any:
    """`fn()` run in a helper thread (a daemon) while the main thread waits on an event in Python, where a
    signal's handler runs: for calls that wait inside XLA, in C++, where none does. Its result is returned, its
    error raised here. Interrupted, the helper thread is left to finish (XLA's work cannot be stopped)."""
    done, outcome = threading.Event(), []

    def call() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=call, name=f"jaxrl_rollout-{name}", daemon=True).start()
    while not done.wait(0.1):
        pass
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def ready_time(tree: Any) -> float:
    """Waits until every array of `tree` is computed, in a way a signal's handler can interrupt, and returns the
    `time.perf_counter()` at which they were: for timing a computation (`rollout`'s figures).

    A helper thread waits inside XLA (`jax.block_until_ready`) and notes the time it returns, while the main
    thread waits on an event in Python, where handlers run: the time is exact, and no polling takes CPU from
    the computation (`wait_ready`'s sleeps cost a 2-core machine about 5% of a rollout's speed). An error of
    the computation is raised here. Interrupted, the helper thread (a daemon) is left waiting for the
    computation, which cannot be stopped.
    """
    import jax

    def block() -> float:
        jax.block_until_ready(tree)
        return time.perf_counter()

    return _in_helper(block, "ready")


def ran(fn: Callable[[], Any]) -> Any:
    """`fn()`, the dispatch of a program that runs to its end inside the call, waited for from a helper thread
    (`_in_helper`) in a way a signal's handler can interrupt.

    JAX dispatches a program asynchronously, and `wait_ready` then waits in Python. But on a CPU a program
    with host callbacks (a host env's steps, `io_callback`) runs in the dispatching thread, in C++, where no
    handler runs: a Ctrl-C during a chunk of a gymnasium run printed nothing until the chunk ended (seconds,
    or minutes for pixel envs), and a second one could not stop it at once. From a helper thread the main
    thread's handlers run at once; interrupted, the helper thread (a daemon) is left in the program, whose host
    env the caller then abandons (`envs._host.run_interruptibly`: its next step raises, which ends the
    program).
    """
    return _in_helper(fn, "chunk")


def compiled(jitted: Any, *args: Any) -> Any:
    """`jitted.lower(*args).compile()`, with XLA's compile waited for in a way a signal's handler can interrupt.

    The trace and the lowering run here, on the calling thread (Python, where handlers run, with the caller's
    JAX settings); only XLA's compile, which can take a minute for a large program on a CPU (craftax's) and
    during which no handler runs, is waited for from a helper thread (`_in_helper`). So a Ctrl-C or a SIGTERM
    during a compile is acted on at once, not when the compile ends. The compile itself cannot be stopped: an
    interrupted one goes on in the helper thread (a daemon) until the process exits.
    """
    lowered = jitted.lower(*args)
    return _in_helper(lowered.compile, "compile")
