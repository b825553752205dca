"""The command line's persistent XLA compilation cache.

`jaxrl-rollout train` and `evaluate` keep the programs XLA compiles in a folder
(JAX's persistent compilation cache), so that the next command that builds the
same program (a `--resume`, a second `evaluate`, the same config trained
again) loads it in about a second instead of compiling it again. JAX keys each
entry by the program, the JAX and XLA versions, the backend and its flags, so a
program is only loaded where it was compiled for the same thing.

`--compile-cache` chooses the folder:
- `auto` (the default): `JAX_COMPILATION_CACHE_DIR` or JAX's own setting where
  the user has one, else `$XDG_CACHE_HOME/jaxrl_rollout/xla` (by default
  `~/.cache/jaxrl_rollout/xla`), kept under `DEFAULT_MAX_BYTES` (least recently
  used entries removed first) unless `JAX_COMPILATION_CACHE_MAX_SIZE` says
  otherwise;
- `off`: no cache, not even the user's `JAX_COMPILATION_CACHE_DIR`;
- a folder: that one.

JAX decides whether it uses the cache at the first compile of a process, so
`enable` must run before anything compiles; the command line calls it before it
imports gymnax. Called later in a process that has already compiled, it has no
effect on that process.
"""

from __future__ import annotations

import os
import pathlib

DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB
_HIT = "/jax/compilation_cache/cache_hits"
_counts = {"hits": 0}
_listening = False


def default_dir() -> pathlib.Path:
    """`$XDG_CACHE_HOME/jaxrl_rollout/xla`, or `~/.cache/jaxrl_rollout/xla`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "jaxrl_rollout" / "xla"


def _users_own() -> str | None:
    import jax

    # JAX reads the variable into its config when it is imported; the variable is read here as well for a
    # process that set it after importing JAX (a test harness), where the config has not seen it
    return os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir or None


def enable(choice: str) -> tuple[str | None, str | None]:
    """Turns the cache on for this process as `--compile-cache` says.

    Args:
      choice: "auto", "off" or a folder (created if missing).

    Returns:
      (folder, note): the folder in use (None when off) and, for `auto`, a
      one-line note when the default folder could not be used (None otherwise).

    Raises:
      ValueError: a folder given by name that cannot be created or written,
        naming `--compile-cache`.
    """
    import jax

    if not isinstance(choice, str) or not choice.strip():  # "" was the current folder, None a pathlib TypeError
        raise ValueError(f"--compile-cache must be 'auto', 'off' or a folder, got {choice!r}.")
    if choice.lower() in ("auto", "off") and choice not in ("auto", "off"):  # 'AUTO' made a folder of that name
        raise ValueError(f"--compile-cache {choice}: the choices are lower case, 'auto' or 'off' (or a folder "
                         f"such as ./{choice}).")
    if choice == "off":  # also over a folder the user set (JAX_COMPILATION_CACHE_DIR)
        jax.config.update("jax_enable_compilation_cache", False)
        return None, None
    if choice == "auto":
        own = _users_own()
        if own:
            _listen()
            return own, None
        folder = default_dir()
    else:
        folder = pathlib.Path(choice).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", str(folder))
    except OSError as error:
        why = "a file, not a folder" if folder.is_file() else error.strerror or error
        reason = f"{folder}: {why}"
        if choice == "auto":
            return None, f"compilation cache off ({reason}); --compile-cache FOLDER puts it elsewhere"
        raise ValueError(f"--compile-cache {choice}: cannot use {reason}") from None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ and jax.config.jax_compilation_cache_max_size == -1:
        jax.config.update("jax_compilation_cache_max_size", DEFAULT_MAX_BYTES)
    _listen()
    return str(folder), None


def _listen() -> None:
    """Counts the cache's hits from here on (JAX's monitoring events; one listener per process)."""
    global _listening
    if _listening:
        return
    import jax

    def on_event(event: str, **kwargs) -> None:
        if event == _HIT:
            _counts["hits"] += 1

    jax.monitoring.register_event_listener(on_event)
    _listening = True


def hits() -> int:
    """Programs loaded from the cache in this process since `enable` (JAX's cache-hit events)."""
    return _counts["hits"]


def summary(hits_before: int = 0) -> str:
    """", 2 programs loaded from the compilation cache" for the hits since `hits_before`, or ""."""
    n = hits() - hits_before
    if n <= 0:
        return ""
    return f", {n} program{'s' if n > 1 else ''} loaded from the compilation cache"
