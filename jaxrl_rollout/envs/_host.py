"""Host environments stepped from inside jitted code through `io_callback`.

`HostEnv` holds everything the gymnasium and envpool adapters share: the JAX
side (`reset`/`step` in the vectorized gymnax protocol, one ordered
`io_callback` per call) and the bookkeeping that keeps a stateful host env
from being silently misused (the tick check).

Runs axes: under `jax.vmap` (over seeds or hyperparameters, any number of
nested vmaps) the host env does not step once per run. Its vmap rule hands the
whole batch to one callback, so one host pool of R x B envs (R the product of
the vmapped axes) steps in one call per step. Each run's envs are seeded only
from that run's keys, so run r of a vmapped call meets the same episodes as a
call on its key alone.

Subclasses implement three host methods on numpy arrays with a leading runs
axis R (1 when nothing is vmapped): `_host_open(seeds [R, B]) -> obs [R, B,
...]`, `_host_step(action [R, B, ...]) -> (obs, final_obs, reward,
terminated, truncated)`, each [R, B, ...], with same-step auto-reset, and
`_host_close()`. Results may also come flat, [R * B, ...] (run-major).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import io_callback

from jaxrl_rollout import collect, prng
from jaxrl_rollout._logs import filtered

__all__ = ["HostEnv", "HostEnvError", "HostParams", "HostStats"]

_SEED_BOUND = 2**31 - 1


class Abandoned(RuntimeError):
    """Raised by a host env's reset or step after `HostEnv.abandon()`: the program still stepping it (a chunk an
    interruption left running in a helper thread) ends with this error, which no one reads."""


class _QuietAbandoned(logging.Filter):
    """Drops JAX's log of a host callback that raised `Abandoned`: the end of a program the run already left
    (the interruption was reported in one line), not a failure to show with a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, Abandoned))


# Installed for good: the abandoned program may call back after the `train` that abandoned it has returned.
logging.getLogger("jax._src.callback").addFilter(_QuietAbandoned())


class HostEnvError(RuntimeError):
    """A host env's own reset or step raised (a gymnasium env's code, a renderer, a worker process).

    Inside a compiled program the env's exception reaches the caller only as
    JAX's runtime error, its type lost; `run_interruptibly` (the runner's
    chunks, the command line's evaluations) and `runner.train`'s first
    program (its resets) raise this instead, naming the
    env, what it raised and the innermost frame it was raised in, with the
    env's own exception, and its whole traceback, as `__cause__`.
    """


# The last failure of any host env's own code in this process, until `take_failure` takes it.
_FAILURE: HostEnvError | None = None
_FAILURE_LOCK = threading.Lock()


def take_failure() -> HostEnvError | None:
    """The `HostEnvError` of the last host env failure since the last call, or None (and forgets it)."""
    global _FAILURE
    with _FAILURE_LOCK:
        failure, _FAILURE = _FAILURE, None
    return failure


def raised_text(error: BaseException) -> str:
    """An exception of an env's own code in one line: `KIND: MESSAGE (in FUNCTION, FILE:LINE)`, the innermost
    frame it was raised in (KIND with its module, unless a builtin)."""
    kind = type(error).__qualname__
    if type(error).__module__ != "builtins":
        kind = f"{type(error).__module__}.{kind}"
    text = " ".join(str(error).split())
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (in {frames[-1].name}, {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return kind + (f": {text}" if text else "") + where


class _QuietFailures(logging.Filter):
    """Drops JAX's log of a host callback whose env raised: `quiet_failures` reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = _FAILURE
        raised = record.exc_info[1] if record.exc_info else None
        return not (failure is not None and raised is not None and raised is failure.__cause__)


def quiet_failures() -> contextlib.AbstractContextManager:
    """Within it, JAX logs no traceback for a host env's failing reset or step: the caller reports the
    `HostEnvError` (the command line, in one line)."""
    return filtered("jax._src.callback", _QuietFailures())


def raise_kept_failure() -> None:
    """Raises the `HostEnvError` of a host env's own failure kept since the last `take_failure`, if there is one:
    for a caller whose program just failed with JAX's runtime error (the failure's exception, typed, as its
    cause)."""
    failure = take_failure()
    if failure is not None:
        raise failure from failure.__cause__


def _to_gymnax_space(space: Any, what: str) -> Any:
    from gymnasium import spaces as gym_spaces
    from gymnax.environments import spaces

    if isinstance(space, gym_spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"{what} is Discrete(n={space.n}, start={space.start}); only start=0 is supported.")
        return spaces.Discrete(int(space.n))
    if isinstance(space, gym_spaces.Box):
        dtype = _jax_dtype(space.dtype)
        low, high = np.asarray(space.low), np.asarray(space.high)
        if np.issubdtype(dtype, np.integer):  # int64 bounds past int32's range wrapped ([0, -1] for iinfo.max)
            info = np.iinfo(dtype)
            low, high = np.clip(low, info.min, info.max), np.clip(high, info.min, info.max)
        return spaces.Box(
            jnp.asarray(low.astype(dtype)), jnp.asarray(high.astype(dtype)), tuple(space.shape), dtype
        )
    raise ValueError(
        f"{what} is {space!r}; GymnasiumEnv supports Discrete (start=0) and Box spaces."
    )


def _jax_dtype(dtype: Any) -> np.dtype:
    """The dtype a host env's Box values take in JAX: float32 for floats, and 64-bit ints narrowed to 32 bits
    (JAX has no 64-bit arrays unless jax_enable_x64 is set; `Box(0, 10, (2,), dtype=int)` is int64 on Linux,
    and its step failed inside io_callback with "cannot specify 64-bit types")."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return np.dtype(np.float32)
    if np.issubdtype(dtype, np.integer) and dtype.itemsize > 4:
        return np.dtype(np.int32 if np.issubdtype(dtype, np.signedinteger) else np.uint32)
    return dtype


def _struct(space: Any, batch: Any) -> jax.ShapeDtypeStruct:
    """The [*batch, ...] array a gymnax Discrete/Box space's values stack to (`batch` an int or a shape)."""
    from gymnax.environments import spaces

    batch = (batch,) if isinstance(batch, int) else tuple(batch)
    if isinstance(space, spaces.Discrete):
        return jax.ShapeDtypeStruct(batch, jnp.int32)
    shape = (space.shape,) if isinstance(space.shape, int) else tuple(space.shape)
    return jax.ShapeDtypeStruct((*batch, *shape), space.dtype)


def _host_call(callback: Callable, result_fn: Callable, *args: jax.Array) -> Any:
    """`io_callback(callback, result_fn(args[0].shape), *args, ordered=True)`, one call under any vmap.

    `args[0]` is [*L, B] (L the runs axes, B the envs), the others [*L, B, ...].
    Under `jax.vmap` the rule moves the mapped axis in front of L (broadcasting
    unmapped arguments) and calls again, so nested vmaps add axes to L and the
    host still gets one call per step.
    """

    @jax.custom_batching.custom_vmap
    def call(*args):
        return io_callback(callback, result_fn(args[0].shape), *args, ordered=True)

    @call.def_vmap
    def _rule(axis_size, in_batched, *args):
        if len(args) > 1 and not in_batched[0] and any(in_batched[1:]):  # a step: one env state, a batch of actions
            env = getattr(callback, "__self__", "a host env")
            raise ValueError(
                f"{env!r} is stepped under jax.vmap with one env state for a batch of {axis_size} runs' actions: "
                "the runs would share the host envs that one reset opened, which is what a vmap over "
                "hyperparameters with the key unbatched gives (jax.vmap(train, in_axes=(None, 0))(key, grid)). "
                f"Give every run a key of its own, the same one at each grid point if you like "
                f"(jax.vmap(train)(jnp.stack([key] * {axis_size}), grid)), so that the reset opens the host envs "
                "of each run."
            )
        return collect.vmap_rule(functools.partial(_host_call, callback, result_fn), axis_size, in_batched, *args)

    return call(*args)


class HostStats(NamedTuple):
    """A host env's work since it was built (`HostEnv.stats()`), for throughput reports.

    Attributes:
      env_steps: env steps taken on the host (every step call counts R x B).
      seconds: wall seconds spent in the host's reset and step calls.
    """

    env_steps: int
    seconds: float


@struct.dataclass
class HostParams:
    """A host env's params: only its time limit, for `evaluate`'s default bound (None if it has none)."""

    max_steps_in_episode: Any = struct.field(pytree_node=False, default=None)


HOST_ENV_JAX = (0, 8, 2)
"""The lowest jax that steps a host env: before it, every trace of `_host_call` (an ordered `io_callback` inside
`custom_vmap`) failed with `KeyError: OrderedIOEffect`, vmapped or not (jax 0.6.1 to 0.8.1; 0.8.2, 0.8.3, 0.9.0,
0.10.0 and 0.10.2 trained). The `gymnasium` and `envpool` extras ask for it."""


def check_jax_runs_host_envs(name: str) -> None:
    """A `MissingExtra` naming the jax to install where this jax cannot step a host env (`HOST_ENV_JAX`)."""
    if tuple(jax.__version_info__[:3]) < HOST_ENV_JAX:
        from jaxrl_rollout._extras import MissingExtra

        need = ".".join(map(str, HOST_ENV_JAX))
        raise MissingExtra(f"{name} is a host env, stepped through jax's io_callback, which needs jax >= {need} "
                           f"(this is jax {jax.__version__}; the gymnasium and envpool extras ask for it). Install "
                           f"it with: pip install -U 'jax>={need}'")


class HostEnv:
    """B copies of a Python env in the vectorized gymnax>=1.0.1 protocol, stepped through `io_callback`.

    `reset(keys [B], params)` draws one int32 seed per env from its key and
    opens (or reopens) the host env with them; `step(keys [B], state,
    actions [B], params)` steps all B envs in one host call. `vectorized =
    True` tells the rollout to call these directly instead of vmapping them.
    Under `jax.vmap` over runs, all runs' envs form one host pool of R x B envs
    stepped in one call (see the module docstring). `params` (`HostParams`)
    only carry the time limit. The env state the rollout carries is an int32
    tick [B] compared with the host env's own at every step (see the
    `jaxrl_rollout.envs.gymnasium` docstring for why).

    Args:
      name: for messages.
      action_space, observation_space: the single env's gymnasium spaces
        (Discrete with start 0, or Box).
      max_steps_in_episode: the env's time limit if it has one (for
        `evaluate`'s default bound).
    """

    vectorized = True
    suite = ""
    """The suite's prefix of env ids ("gymnasium"), for messages that name the env as a user types it."""

    def __init__(self, name: str, action_space: Any, observation_space: Any, max_steps_in_episode: Any = None):
        from gymnasium import spaces as gym_spaces

        check_jax_runs_host_envs(f"{self.suite}/{name}" if self.suite else name)
        self._name = name
        self._params = HostParams(None if max_steps_in_episode is None else int(max_steps_in_episode))
        self._action_space = _to_gymnax_space(action_space, f"{name}'s action_space")
        self._observation_space = _to_gymnax_space(observation_space, f"{name}'s observation_space")
        self._discrete_actions = isinstance(action_space, gym_spaces.Discrete)
        self._shape: tuple = ()  # (*L, B) of the open host pool; () when closed
        self._tick = 0
        self._env_steps = 0
        self._seconds = 0.0
        self._abandoned = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if not self._shape:  # closed: nothing opened yet (at trace time), or closed since
            return f"{type(self).__name__}({self._name!r})"
        return f"{type(self).__name__}({self._name!r}, envs={' x '.join(map(str, self._shape))})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> HostParams:
        return self._params

    def action_space(self, params: Any = None) -> Any:
        return self._action_space

    def observation_space(self, params: Any = None) -> Any:
        return self._observation_space

    def stats(self) -> HostStats:
        """Env steps taken and seconds spent on the host so far (differences give throughput)."""
        with self._lock:
            return HostStats(self._env_steps, self._seconds)

    def close(self) -> None:
        """Closes the host env (the next reset opens it again)."""
        with self._lock:
            if self._shape:
                self._host_close()
            self._shape = ()

    def abandon(self) -> None:
        """Closes the host env for good: its next reset or step raises `Abandoned` (quietly: JAX logs no
        traceback for it). For a program left running after an interruption (`runner.train`'s chunk in its
        helper thread): it ends at its next step instead of stepping, or reopening, the pool.

        The flag is set before the lock is waited for: the step running holds the lock, and when it lets go the
        program's next step could take it first (a lock is not handed to the thread that waited longest), and
        then the next and the next, while this thread waits to be scheduled (seen on a loaded 2-core machine: a
        chunk stepped on to its end); with the flag set first, the next step raises whichever thread wins."""
        self._abandoned = True
        with self._lock:
            if self._shape:
                self._host_close()
            self._shape = ()

    def _keep_failure(self, what: str, error: Exception) -> None:
        """Keeps an exception of the env's own reset or step as a `HostEnvError` (`take_failure`); the caller
        raises it on."""
        global _FAILURE
        failure = HostEnvError(f"{type(self).__name__}({self._name!r})'s {what} raised {raised_text(error)}")
        failure.__cause__ = error
        with _FAILURE_LOCK:
            _FAILURE = failure

    def _check_abandoned(self) -> None:
        if self._abandoned:
            raise Abandoned(f"{self!r} was abandoned (its run was interrupted); make a new env to step.")

    # ---- host side, implemented by subclasses (numpy in, numpy out, leading runs axis R) ----

    def _host_open(self, seeds: np.ndarray) -> Any:
        """(Re)opens the host env with R x B envs, env [r, i] seeded by `seeds[r, i]`; returns obs [R, B, ...]."""
        raise NotImplementedError

    def _host_step(self, action: np.ndarray) -> tuple:
        """Steps all envs with `action` [R, B, ...]; returns (obs, final_obs, reward, terminated, truncated)."""
        raise NotImplementedError

    def _host_close(self) -> None:
        raise NotImplementedError

    # ---- host side, run inside io_callback ----

    def _reset_callback(self, seeds: Any) -> tuple:
        seeds = np.asarray(seeds)
        with self._lock:
            self._check_abandoned()
            start = time.perf_counter()
            if self._shape:
                self._host_close()
                self._shape = ()
            runs, batch = math.prod(seeds.shape[:-1]), seeds.shape[-1]
            try:
                obs = self._host_open(seeds.reshape(runs, batch).astype(np.int64))
            except Exception as error:  # the env's own code (a try, not a context manager: every step passes here)
                self._keep_failure("reset", error)
                raise
            self._shape = seeds.shape
            self._tick += 1
            self._seconds += time.perf_counter() - start
            return self._obs(obs), np.full(self._shape, self._tick, np.int32)

    def _step_callback(self, tick: Any, action: Any) -> tuple:
        tick, action = np.asarray(tick), np.asarray(action)
        with self._lock:
            self._check_abandoned()
            start = time.perf_counter()
            if not self._shape:
                raise RuntimeError(f"{self!r} was stepped before any reset (or after close); call rollout_init first.")
            if tick.shape != self._shape or np.any(tick != self._tick):
                raise RuntimeError(
                    f"{self!r} was stepped from a stale env state (tick {int(tick.flat[0]) if tick.size else '?'} "
                    f"for envs {list(tick.shape)}, the host env is at tick {self._tick} for envs "
                    f"{list(self._shape)}): a host env cannot be rewound or shared between two rollout states, "
                    "nor stepped under vmap by a loop whose runs stop at different steps (a finished run stops "
                    "advancing). Continue from the "
                    "latest RolloutState, use one env object per rollout, and step runs under vmap in lockstep "
                    "(jaxrl_rollout.evaluate does)."
                )
            if self._discrete_actions:
                n = self._action_space.n
                if action.size and (action.min() < 0 or action.max() >= n):
                    raise ValueError(
                        f"{self!r} was given actions from {action.min()} to {action.max()}, outside [0, n) for its "
                        f"Discrete(n={n}) action space."
                    )
                action = action.astype(np.int64)
            runs = math.prod(self._shape[:-1])
            action = action.reshape(runs, self._shape[-1], *action.shape[tick.ndim:])
            try:
                obs, final, reward, terminated, truncated = self._host_step(action)
            except Exception as error:  # the env's own code
                self._keep_failure("step", error)
                raise
            self._tick += 1
            self._env_steps += tick.size
            self._seconds += time.perf_counter() - start
            return (
                self._obs(obs),
                self._obs(final),
                np.asarray(reward, np.float32).reshape(self._shape),
                np.asarray(terminated, bool).reshape(self._shape),
                np.asarray(truncated, bool).reshape(self._shape),
                np.full(self._shape, self._tick, np.int32),
            )

    def _obs(self, obs: Any) -> np.ndarray:
        target = _struct(self._observation_space, self._shape)
        obs = np.asarray(obs)
        if (np.issubdtype(target.dtype, np.integer) and np.issubdtype(obs.dtype, np.integer)
                and not np.can_cast(obs.dtype, target.dtype)):
            info = np.iinfo(target.dtype)  # an int64 value past int32's range saturates, as the space's bounds do
            obs = np.clip(obs, info.min, info.max)
        return obs.astype(target.dtype, copy=False).reshape(target.shape)

    # ---- JAX side ----

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, jax.Array]:
        """Resets all B host envs; `key` holds one key per env. Returns (obs [B, ...], state)."""
        keys = jnp.asarray(key)
        typed = prng.is_key(keys)
        if (typed and keys.ndim != 1) or (not typed and (keys.ndim != 2 or keys.shape[1] != 2)):
            raise ValueError(
                f"{type(self).__name__}.reset takes one key per env (it is vectorized): typed keys [B] or raw "
                f"uint32 keys [B, 2], got shape {keys.shape}."
            )
        seeds = jax.vmap(lambda k: jax.random.randint(k, (), 0, _SEED_BOUND, dtype=jnp.int32))(keys)

        def result(shape):
            return _struct(self._observation_space, shape), jax.ShapeDtypeStruct(shape, jnp.int32)

        obs, tick = _host_call(self._reset_callback, result, seeds)
        return obs, tick

    def step(self, key: jax.Array, state: jax.Array, action: jax.Array, params: Any = None) -> tuple:
        """Steps all B host envs with `action` [B, ...]; `key` is unused (the host envs have their own RNGs)."""
        del key, params
        tick = jnp.asarray(state)
        action = jnp.asarray(action)
        expected = _struct(self._action_space, tick.shape[0] if tick.ndim == 1 else 0)
        if tick.ndim != 1 or tick.dtype != jnp.int32 or action.shape != expected.shape:
            raise ValueError(
                f"{type(self).__name__}.step takes the batched env state (int32 [B]) and actions of shape "
                f"[B, ...] = {expected.shape} for {self._action_space}; got state {tick.dtype}{list(tick.shape)} "
                f"and action shape {action.shape}."
            )

        def result(shape):
            obs = _struct(self._observation_space, shape)
            flag, tick = jax.ShapeDtypeStruct(shape, jnp.bool_), jax.ShapeDtypeStruct(shape, jnp.int32)
            return obs, obs, jax.ShapeDtypeStruct(shape, jnp.float32), flag, flag, tick

        obs, final_obs, reward, terminated, truncated, tick = _host_call(
            self._step_callback, result, tick, action.astype(expected.dtype)
        )
        return obs, tick, reward, terminated, truncated, {"final_observation": final_obs}


def host_env(env: Any) -> HostEnv | None:
    """The `HostEnv` that `env` is or wraps (through wrappers' `.env`), or None for a JAX env."""
    while env is not None and not isinstance(env, HostEnv):
        env = getattr(env, "env", None)
    return env


def run_interruptibly(fn: Callable[[], Any], *envs: Any) -> Any:
    """`fn()`, the dispatch of a compiled program that steps `envs`, in a way a signal's handler can interrupt.

    Where any of them is a host env, on a CPU the program runs inside its dispatch, in C++, where no handler
    runs: it is dispatched from a helper thread (`_signals.ran`) while this thread waits in Python, and if the
    wait is interrupted (a KeyboardInterrupt, `_signals.Interrupted`) the host envs are abandoned
    (`HostEnv.abandon`), so the program left running ends at its next step instead of stepping on. A program
    that failed has ended: its error is raised here (a `HostEnvError` where a host env's own reset or step
    raised), and the envs are left as they are. (A None in `envs` is
    skipped.) For a JAX env, `fn()` here: JAX dispatches it asynchronously, and the
    caller waits in Python (`_signals.wait_ready`).
    """
    from jaxrl_rollout import _signals

    hosts = [host for host in map(host_env, envs) if host is not None]
    if not hosts:
        return fn()
    take_failure()  # one of an earlier program, already reported
    try:
        return _signals.ran(fn)
    except KeyboardInterrupt:
        with _signals.shielded():  # the pools' workers end with them, even if the user presses Ctrl-C again
            for host in hosts:
                host.abandon()
        raise
    except Exception:
        raise_kept_failure()
        raise
