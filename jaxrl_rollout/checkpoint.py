"""Checkpoints of an opaque pytree with Orbax, checked against a template and a content digest.

The state is never read by field name: it is flattened with `jax.tree`, PRNG
key leaves are stored as their raw key data (`jax.random.key_data`) and
rewrapped on load, and the caller passes a template (e.g. `jax.eval_shape` of
its init) whose tree structure, leaf shapes and dtypes must match the saved
ones. So fields added to a state later (observation statistics, reward
normalisation) are saved and checked without any change here.

Layout of a run folder's checkpoints (an `orbax.checkpoint.CheckpointManager`
directory that keeps the latest step):

    checkpoints/12/            the checkpoint after 12 chunks
        state/                 the state's leaves (Orbax PyTree, OCDBT), one
                               shard per process in a multi-process run
        extras/                named host arrays (the metrics so far)
        manifest/              JSON: format, tree structure, every leaf's
                               shape, dtype and content digest, the caller's meta,
                               and the shapes the leaves saved without their axes
                               of size 1 have on disk (on a CPU: spares a copy)

Every process of a multi-process run calls `save` with its global (possibly
cross-process sharded) arrays; Orbax writes each process's shards and process
0 the rest. Orbax writes a step into a temporary directory and renames it into
place when every item is written (the commit point), and deletes the previous
step only after that, so a save that fails or is killed midway leaves the
previous checkpoint usable.

`load` checks the structure, shapes and dtypes against the template before
reading any array, and every leaf's digest (two 32-bit weighted sums of its
words: any single changed word is always detected) after, so a corrupt,
truncated or mismatched checkpoint is a `CheckpointError`, never a silently
wrong state.

Run folders in the first, pre-Orbax format (`checkpoint.json` naming a
`checkpoint-NNNNNN.npz`) are still read, with their sha256 check; the next save
writes the Orbax layout and removes the old files once it has committed.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import os
import pathlib
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Collection
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_rollout import _checks, prng
from jaxrl_rollout._logs import filtered

__all__ = ["CheckpointError", "FORMAT", "SUBFOLDER", "exists", "flatten", "load", "read_manifest", "save",
           "unflatten", "write_atomic"]

FORMAT = "jaxrl_rollout.checkpoint/2"
SUBFOLDER = "checkpoints"
LEGACY_FORMAT = "jaxrl_rollout.checkpoint/1"
LEGACY_MANIFEST = "checkpoint.json"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not match what the caller expects."""


def flatten(tree: Any) -> tuple[list[Any], list[str | None], Any]:
    """(leaves with PRNG keys replaced by their key data, key impl name or None per leaf, treedef)."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = [str(jax.random.key_impl(x)) if prng.is_key(x) else None for x in leaves]
    leaves = [jax.random.key_data(x) if prng.is_key(x) else x for x in leaves]
    return leaves, impls, treedef


def unflatten(treedef: Any, leaves: list[Any], impls: list[str | None]) -> Any:
    """Inverse of `flatten`: rewraps key data as typed PRNG keys."""
    leaves = [x if impl is None or x is None else jax.random.wrap_key_data(x, impl=impl)  # (None: a leaf not read)
              for x, impl in zip(leaves, impls)]
    return jax.tree.unflatten(treedef, leaves)


def _leaf_specs(template: Any) -> tuple[str, list[dict]]:
    leaves, treedef = jax.tree.flatten(template)
    specs = []
    for x in leaves:
        if prng.is_key(x):
            data = jax.eval_shape(jax.random.key_data, x)
            specs.append({"shape": list(data.shape), "dtype": str(data.dtype), "key": str(x.dtype)})
        else:
            specs.append({"shape": list(np.shape(x)), "dtype": str(np.dtype(x.dtype)), "key": None})
    return str(treedef), specs


def _check_structure(folder, manifest: dict, template: Any) -> None:
    treedef_str, specs = _leaf_specs(template)
    inner = treedef_str[len("PyTreeDef("):-1]
    if manifest["treedef"] != treedef_str and manifest["treedef"].startswith(f"PyTreeDef(({inner}, "):
        raise CheckpointError(
            f"checkpoint in {folder} holds a pair (state, best policies), as a run with periodic evaluation saves "
            "it, and the template is its state alone: pass the template (state, best policies) (the best "
            "policies' structure is jax.eval_shape(jax.vmap(lambda s: periodic_eval.no_best(algorithm, s)), "
            "state)), or read the run with jaxrl_rollout.runner.load_run(folder) (its state) and "
            "runner.load_best_policies(folder).")
    if manifest["treedef"] != treedef_str:
        raise CheckpointError(
            f"checkpoint in {folder} has a different state structure than this config builds:\n"
            f"  saved:    {manifest['treedef'][:400]}\n  expected: {treedef_str[:400]}"
        )
    if manifest["leaves"] != specs:
        # (as many leaves on both sides: the treedefs are equal)
        differ = [(i, a, b) for i, (a, b) in enumerate(zip(manifest["leaves"], specs)) if a != b]
        bad = differ[0][0]
        _check_64_bit_mode(folder, differ)
        _check_prng_impl(folder, differ)
        raise CheckpointError(
            f"checkpoint in {folder}: state leaf {bad} is {manifest['leaves'][bad]}, this config expects {specs[bad]}"
            " (where the config is the run's own, the state this version builds for it differs: was the run written "
            "by an earlier jaxrl_rollout? network='auto' reads a NamedTuple observation's Discrete leaves one-hot "
            "since 2026-11-30, jumanji's step_count among them)."
        )


def _check_64_bit_mode(folder, differ: list[tuple]) -> None:
    """Refuses, naming jax's 64-bit mode, a checkpoint whose leaves differ from the template's only as that mode
    makes them: gymnax's env states (CartPole's) are float64 and int64 with it on, float32 and int32 off, so a
    run trained with JAX_ENABLE_X64=1 could not be read without it (and the reverse), and the message asked whether
    an earlier version wrote it. `differ`: (leaf index, saved spec, expected spec) of each leaf that differs."""
    def narrowed(spec: dict) -> dict:
        return {**spec, "dtype": _checks.NARROW_64.get(spec["dtype"], spec["dtype"])}

    if not all(narrowed(a) == narrowed(b) for _, a, b in differ):
        return
    on = bool(jax.config.jax_enable_x64)
    if all(a["dtype"] in _checks.NARROW_64 for _, a, _ in differ) and not on:
        i, a, b = differ[0]
        raise CheckpointError(
            f"checkpoint in {folder} was saved with jax's 64-bit mode on (JAX_ENABLE_X64=1, or jax.config.update("
            f"'jax_enable_x64', True)): its state leaf {i} is {a['dtype']}, where this process, with the mode off, "
            f"builds {b['dtype']}; read or resume it with the mode on again (e.g. JAX_ENABLE_X64=1 jaxrl-rollout "
            "...), as it was trained.")
    if all(b["dtype"] in _checks.NARROW_64 for _, _, b in differ) and on:
        i, a, b = differ[0]
        raise CheckpointError(
            f"checkpoint in {folder} was saved with jax's 64-bit mode off: its state leaf {i} is {a['dtype']}, "
            f"where this process, with the mode on (JAX_ENABLE_X64 or jax_enable_x64), builds {b['dtype']}; read "
            "or resume it with the mode off (unset JAX_ENABLE_X64), as it was trained.")


# jax's key dtype tags ("key<fry>") -> the names JAX_DEFAULT_PRNG_IMPL and jax_default_prng_impl take
_PRNG_NAMES = {"fry": "threefry2x32", "rbg": "rbg", "urbg": "unsafe_rbg"}


def _prng_name(key_dtype: str) -> str:
    tag = key_dtype.removeprefix("key<").removesuffix(">")
    return _PRNG_NAMES.get(tag, tag)


def _check_prng_impl(folder, differ: list[tuple]) -> None:
    """Refuses, naming jax's PRNG implementation, a checkpoint whose leaves differ from the template's only in
    their keys' implementation: a run trained with JAX_DEFAULT_PRNG_IMPL=rbg (its keys 4 words, threefry's 2) and
    read without it was refused as "state leaf 42 is ... key<rbg> ..., this config expects ... key<fry> ...
    (was the run written by an earlier jaxrl_rollout? ...)". `differ`: as `_check_64_bit_mode`'s."""
    if not all(a.get("key") and b.get("key") and a["key"] != b["key"] for _, a, b in differ):
        return
    i, a, b = differ[0]
    name, here = _prng_name(a["key"]), _prng_name(b["key"])
    how = ("unset JAX_DEFAULT_PRNG_IMPL (threefry2x32 is jax's default)" if name == "threefry2x32" else
           f"JAX_DEFAULT_PRNG_IMPL={name} (or jax.config.update('jax_default_prng_impl', '{name}'))")
    raise CheckpointError(
        f"checkpoint in {folder} holds PRNG keys of jax's {name} implementation (state leaf {i}: {a['key']}), "
        f"where this process makes {here} keys: read or resume it with the implementation it was trained with, "
        f"{how}.")


# ---------------------------------------------------------------------------------------------
# Content digests, computed where the arrays are (sharded arrays included) and compared on load.

def _words(x: jax.Array) -> jax.Array:
    """The leaf's bits as a flat uint32 vector (narrower types widened, 64-bit types split)."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    bits = jnp.dtype(x.dtype).itemsize * 8
    words = jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{bits}"))
    if bits == 64:
        words = jax.lax.bitcast_convert_type(words, jnp.uint32)
    return words.astype(jnp.uint32).ravel()


DIGEST_BLOCK = 1 << 20  # words summed at a time: a digest's scratch memory is a block's, not its leaf's


def _weighted_sums(words: jax.Array, first: jax.Array) -> jax.Array:
    """The two weighted sums of `words`, which are the leaf's words `first`, `first` + 1, ... (uint32, wrapping)."""
    i = first + jnp.arange(words.size, dtype=jnp.uint32)
    odd = (2 * i + 1) * jnp.uint32(0x9E3779B1)  # odd weights: one changed word always changes the sum
    mixed = (i ^ (i >> 16)) * jnp.uint32(0x85EBCA6B)
    mixed = ((mixed ^ (mixed >> 13)) * jnp.uint32(0xC2B2AE35)) | jnp.uint32(1)
    return jnp.stack([jnp.sum(words * odd, dtype=jnp.uint32), jnp.sum(words * mixed, dtype=jnp.uint32)])


def _digest_leaf(x: jax.Array) -> jax.Array:
    """Two uint32 weighted sums of the leaf's words, summed block by block.

    Sums mod 2**32 add up exactly in any grouping, so the blocks give the values one sum over the whole leaf
    gives. In one piece, XLA on a CPU turns a long sum into a tree of partial sums and keeps each weighted
    product whole first: scratch memory of twice the leaf (a checkpoint of a 1.3 GB replay buffer took
    2.6 GB more). The blocks are cut from the leaf itself and turned into words inside the loop, so that
    no word copy of the leaf is made either.
    """
    flat = x.ravel()
    per = 2 if jnp.dtype(x.dtype).itemsize == 8 else 1  # words per element
    size = DIGEST_BLOCK // per  # elements per block
    full, rest = divmod(flat.size, size)
    sums = jnp.zeros(2, jnp.uint32)
    if full:
        def block(b, sums):
            first = b.astype(jnp.uint32) * jnp.uint32(DIGEST_BLOCK)
            return sums + _weighted_sums(_words(jax.lax.dynamic_slice(flat, (b * size,), (size,))), first)

        sums = jax.lax.fori_loop(0, full, block, sums)
    if rest or not full:
        sums = sums + _weighted_sums(_words(flat[full * size:]), jnp.uint32(full * DIGEST_BLOCK))
    return sums


_digests = jax.jit(lambda leaves: [_digest_leaf(x) for x in leaves])


def _array_sha256(x: np.ndarray) -> str:
    """sha256 of a host array's dtype, shape and bytes (the extras: small, already on the host)."""
    x = np.ascontiguousarray(x)
    return hashlib.sha256(f"{x.dtype.str}{x.shape}".encode() + x.tobytes()).hexdigest()


HOST_DIGEST_WORDS = 1 << 16
"""The most words (256 kB) of a leaf whose digest is computed on the host, with numpy, from a copy of it; a larger
leaf's is computed where it is, by `_digests`. The same two sums either way (`_host_digest`). Compiling `_digests`
for every leaf of PPO's state took 0.6 s of each command that saved or read a checkpoint (the README's main job,
an `evaluate`, a `--resume`), against 5 ms to digest its 63 small leaves on the host (2 cores, 2026-12-07)."""


def _host_words(x: np.ndarray) -> np.ndarray:
    """`_words` on the host: the array's bits as a flat uint32 vector (64-bit values split low word first, as
    XLA's bitcast splits them on these little-endian machines)."""
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        x = x.view(np.uint8)
    bits = x.dtype.itemsize * 8
    words = x.view(np.dtype(f"uint{bits}"))
    if bits == 64:
        words = words.view(np.uint32)
    return words.astype(np.uint32).ravel()


def _host_digest(x: np.ndarray) -> tuple[int, int]:
    """`_digest_leaf` of a host array, with numpy's uint32 arithmetic, which wraps as XLA's does."""
    words = _host_words(x)
    i = np.arange(words.size, dtype=np.uint32)
    odd = (np.uint32(2) * i + np.uint32(1)) * np.uint32(0x9E3779B1)
    mixed = (i ^ (i >> np.uint32(16))) * np.uint32(0x85EBCA6B)
    mixed = ((mixed ^ (mixed >> np.uint32(13))) * np.uint32(0xC2B2AE35)) | np.uint32(1)
    return int(np.sum(words * odd, dtype=np.uint32)), int(np.sum(words * mixed, dtype=np.uint32))


def _on_host(x: Any) -> bool:
    """Whether `_digest_strings` digests `x` on the host: a numpy array, or a small array this process holds whole."""
    if isinstance(x, (np.ndarray, np.generic)):
        return True
    words = x.size * (2 if jnp.dtype(x.dtype).itemsize == 8 else 1)
    return x.is_fully_addressable and words <= HOST_DIGEST_WORDS


def _digest_strings(leaves: list[Any]) -> list[str]:
    """Every leaf's digest as 16 hex digits: a small leaf's computed on the host from a copy read through another
    array object (`_alias`, so no host copy stays on the leaf itself), a larger one's by `_digests` where it is."""
    host = [_on_host(x) for x in leaves]
    on_device = iter(_digests([x for x, h in zip(leaves, host) if not h]) if not all(host) else ())
    sums = [_host_digest(np.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else np.asarray(_alias(x))) if h
            else tuple(np.asarray(next(on_device))) for x, h in zip(leaves, host)]
    return [f"{int(a):08x}{int(b):08x}" for a, b in sums]


# ---------------------------------------------------------------------------------------------

def _absolute(folder) -> pathlib.Path:
    """`folder` as an absolute, normalised path (Orbax refuses relative ones), read against the current directory."""
    return pathlib.Path(os.path.abspath(os.fspath(folder)))


def _manager(folder: pathlib.Path, create: bool):
    import orbax.checkpoint as ocp

    folder = _absolute(folder)
    options = ocp.CheckpointManagerOptions(max_to_keep=1, create=create, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=create)
    return ocp.CheckpointManager(folder / SUBFOLDER, options=options)


@contextlib.contextmanager
def _quiet_failures():
    """Keeps Orbax's leftover asyncio tasks from printing tracebacks when a read fails.

    A corrupt file fails several concurrent reads; the first error becomes a
    CheckpointError, and the rest would otherwise reach stderr as "Task exception
    was never retrieved" and "coroutine was never awaited" noise around it.
    A call that succeeds leaves no such task, so only a failure pays for the
    garbage collection that finalises them (a full collection took ~0.24 s of
    each 0.5 s save of a small run's checkpoint, on every save).
    """
    asyncio_log = logging.getLogger("asyncio")
    level, hook = asyncio_log.level, sys.unraisablehook
    asyncio_log.setLevel(logging.CRITICAL)
    sys.unraisablehook = lambda unraisable: None
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNAWAITED, category=RuntimeWarning)
            yield
    except BaseException:
        _collect_quietly()  # finalise the failed tasks while the hooks are quiet
        raise
    finally:
        asyncio_log.setLevel(level)
        sys.unraisablehook = hook


_UNAWAITED = "coroutine .* was never awaited"


def _collect_quietly() -> None:
    """A garbage collection whose finalised Orbax coroutines print no "was never awaited" warning."""
    import gc

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_UNAWAITED, category=RuntimeWarning)
        gc.collect()


def _is_late_orbax_noise(unraisable) -> bool:
    """Leftovers of a failed Orbax read or write that Python reports later, at any moment, even at exit.

    Two kinds: a TensorStore read that completes after Orbax's event loop has
    closed ("Event loop is closed" when it posts its result), and one of Orbax's
    read coroutines, finalised without being awaited, that holds the read error.
    """
    value, obj = unraisable.exc_value, unraisable.object
    if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
        return True
    code = getattr(obj, "cr_code", None)
    return code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename


def _drop_late_orbax_noise() -> None:
    """From now on, keeps the leftovers of a failed Orbax call (see `_is_late_orbax_noise`) off stderr.

    The failure itself has become one CheckpointError line; only those leftovers
    are dropped: unraisable errors through `sys.unraisablehook` (every other one
    still reaches the hook that was installed before) and asyncio's late "exception
    was never retrieved" log records of TensorStore read errors (`_LateOrbaxFutures`,
    a filter on the "asyncio" logger). Installed once, after the first failure.
    """
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _LateOrbaxFutures) for f in asyncio_log.filters):
        asyncio_log.addFilter(_LateOrbaxFutures())
    previous = sys.unraisablehook
    if getattr(previous, "_jaxrl_rollout_orbax_noise", False):
        return

    def hook(unraisable):
        if not _is_late_orbax_noise(unraisable):
            previous(unraisable)

    hook._jaxrl_rollout_orbax_noise = True
    sys.unraisablehook = hook


class _LateOrbaxFutures(logging.Filter):
    """Drops asyncio's "Future/Task exception was never retrieved" for a failed TensorStore read.

    A corrupt file fails several of Orbax's concurrent reads; the first becomes the CheckpointError line, and
    a future that holds another, freed later (at any garbage collection, or at exit), is logged by asyncio.
    Every other asyncio record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if "exception was never retrieved" not in str(record.msg):
            return True
        error = record.exc_info[1] if record.exc_info else None
        text = f"{type(error).__module__} {error}".lower() if error is not None else ""
        return not ("tensorstore" in text or "ocdbt" in text)


class _StepsRemovedWhileListed(logging.Filter):
    """Drops Orbax's "Metadata file does not exist" warning while a reader's manager lists the steps.

    A `train` writing the folder removes its older steps as it saves; a reader (`evaluate`, no lock) whose
    manager lists the steps' metadata as one is removed got an absl warning for it, for every such step,
    although the read then goes to the latest step (and a missing one fails as the checkpoint's own error).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Metadata file does not exist")

    @classmethod
    def installed(cls) -> contextlib.AbstractContextManager:
        return filtered("absl", cls())


def _raise_after_failure(message: str) -> None:
    """Raises CheckpointError(message) once Orbax's error is gone, its abandoned coroutines finalised quietly.

    Called after the `except` block: the error's traceback kept Orbax's
    unawaited save or read coroutines alive there, and whichever garbage
    collection freed them later (in the next save, or in the user's code)
    printed "RuntimeWarning: coroutine ... was never awaited" for each.
    """
    _collect_quietly()
    raise CheckpointError(message)


class _HeldThreadFailures(logging.Filter):
    """Holds back Orbax's log of an exception in one of its save threads (absl's logger, with its traceback).

    Orbax logs such an exception where its thread catches it, then raises it from the save; there it becomes
    the save's one-line CheckpointError, so the log (a traceback per thread: two for a full disk) is dropped.
    Records held during a save that succeeds are logged after it (`release`). Every other record passes.
    """

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "_SignalingThread.run() raised an exception" in str(record.msg):
            self.records.append(record)
            return False
        return True

    def release(self) -> None:
        log = logging.getLogger("absl")
        for record in self.records:
            log.handle(record)
        self.records.clear()


def _os_error_code(error: BaseException) -> int | None:
    """The errno TensorStore puts in the message of a system error it met (`[os_error_code='28']`: a full disk),
    else None. (Its message names files inside Orbax's temporary folders, of no use to the reader.)"""
    found = re.search(r"os_error_code='?(\d+)", str(error))
    return (int(found.group(1)) or None) if found else None


def _one_line(error: BaseException) -> str:
    """An exception as one short line (Orbax and TensorStore errors can span pages)."""
    text = " ".join(str(error).split()) or type(error).__name__
    text = text.split(" See full TensorStore details")[0]  # then a repr of the whole TensorStore spec
    if isinstance(error, OSError) and error.strerror:
        text = f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return text[:300]


def _latest_step(folder: pathlib.Path) -> int | None:
    """The latest committed step, read without the manager's cross-process barriers (any process may call it)."""
    return max(_committed_steps(_absolute(folder)), default=None)


def _committed_steps(folder: pathlib.Path) -> tuple[int, ...]:
    """The committed steps in `folder`'s checkpoints, sorted (none: empty), listed without barriers."""
    import orbax.checkpoint as ocp

    for attempt in range(3):
        try:
            root = folder / SUBFOLDER
            return tuple(sorted(ocp.path.step.checkpoint_steps(root))) if root.is_dir() else ()
        except FileNotFoundError:  # a step removed while the folder was listed (a train writing it): list again
            if attempt == 2:
                raise


def _refuse_links(folder: pathlib.Path) -> None:
    """A CheckpointError if the checkpoints folder or any step in it is a symbolic link.

    Orbax would read a linked step from wherever it points and fail to delete
    it after the next save (rmtree refuses links): a run folder's checkpoints
    must lie inside it, so a link is refused before anything is read or written.
    """
    root = folder / SUBFOLDER
    links = [root] if root.is_symlink() else [p for p in root.iterdir() if p.is_symlink()] if root.is_dir() else []
    if links:
        raise CheckpointError(f"{links[0]} is a symbolic link to {os.readlink(links[0])}: a run's checkpoints must "
                              "lie inside its folder; replace the link with what it points to.")


def write_atomic(folder: pathlib.Path, name: str, write, *, to_path: bool = False) -> pathlib.Path:
    """Writes via `write(file)` to a temporary file in `folder`, fsyncs, then renames it to `name`.

    A failed write (a full disk, an error in `write`, a Ctrl-C) leaves any
    earlier file `name` whole and removes the temporary one
    (".<name>.<random>.tmp", the name cut to 200 bytes so that one near the
    255-byte limit still has a temporary name). The rename replaces a symbolic
    link at `name` itself, so a link pointing out of the folder is never
    written through. With `to_path`, `write` gets the temporary file's path
    instead of an open file, for a writer that opens it itself (ffmpeg).
    A system error (one with an errno) names the file written; an OSError of
    `write`'s own, without an errno, passes as it is.
    """
    folder = pathlib.Path(folder)
    prefix = "." + name.encode()[:200].decode("utf-8", "ignore") + "."
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    except OSError as error:  # no folder (or not one): it named the temporary file it could not make
        raise OSError(error.errno, error.strerror or str(error), str(folder / name)) from error
    try:
        if to_path:
            os.close(fd)
            write(pathlib.Path(tmp))
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make checkpoints private
        os.replace(tmp, folder / name)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        # a failed write() names no file, a failed rename the temporary one (gone now): name the file written
        if isinstance(error, OSError) and error.errno is not None and (not error.filename or
                                                                      str(error.filename) == tmp):
            raise OSError(error.errno, error.strerror or str(error), str(folder / name)) from error
        raise
    return folder / name


def save(folder, step: int, state: Any, extras: dict[str, np.ndarray], meta: dict) -> pathlib.Path:
    """Saves `state` and named extra host arrays as the checkpoint after `step` chunks.

    In a multi-process run every process calls this with the same arguments
    (global arrays, the same extras and meta).

    Args:
      folder: an existing directory (the run folder).
      step: the chunk counter; names the Orbax step.
      state: the pytree to save (numpy or jax arrays, sharded across processes
        or not); PRNG key leaves are stored as key data.
      extras: more arrays (e.g. the metrics so far), saved under their names.
      meta: JSON-serialisable information stored in the manifest under "meta".

    Returns:
      The step's directory. The previous step (and any pre-Orbax checkpoint files) are
      removed once the new step is committed.
    """
    import orbax.checkpoint as ocp

    if not _checks.is_int(step) or step < 0:
        raise ValueError(f"step must be a non-negative int (the chunks done), got {step!r}.")
    step = int(step)
    shown = pathlib.Path(folder)  # the messages name the folder as the caller gave it
    folder = _absolute(folder)
    _refuse_links(folder)
    treedef_str, specs = _leaf_specs(state)
    leaves, impls, _ = flatten(state)
    leaves = [_alias(x) if isinstance(x, jax.Array) else jnp.asarray(x) for x in leaves]
    extras = {k: np.asarray(v) for k, v in extras.items()}
    manifest = {
        "format": FORMAT, "step": step, "treedef": treedef_str, "leaves": specs, "key_impls": impls,
        "digests": _digest_strings(leaves),
        "extras": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in extras.items()},
        "extras_sha256": {k: _array_sha256(v) for k, v in extras.items()}, "meta": meta,
    }
    stored = {i: _without_unit_axes(x) for i, x in enumerate(leaves)}
    stored = {i: x for i, x in stored.items() if x is not None}
    if stored:  # (only written where there are some: a manifest without it is read as before)
        manifest["stored_shapes"] = {f"{i:05d}": list(x.shape) for i, x in stored.items()}
        leaves = [stored.get(i, x) for i, x in enumerate(leaves)]
    items = {"state": ocp.args.StandardSave({f"{i:05d}": x for i, x in enumerate(leaves)}),
             "manifest": ocp.args.JsonSave(manifest)}
    if extras:
        items["extras"] = ocp.args.StandardSave(extras)
    failure = None
    held = _HeldThreadFailures()
    try:
        manager = _manager(folder, create=True)
        try:
            with _quiet_failures(), filtered("absl", held):
                manager.save(step, args=ocp.args.Composite(**items), force=True)
                manager.wait_until_finished()
        finally:
            manager.close()
    except Exception as error:  # noqa: BLE001 - Orbax, TensorStore and the OS raise many types; one line says which
        _drop_late_orbax_noise()
        code = _os_error_code(error)
        failure = (f"could not save the checkpoint in {shown / SUBFOLDER}: "
                   + (f"{os.strerror(code)} (errno {code})" if code is not None else _one_line(error)))
    else:
        held.release()  # a thread's error that the save did not raise: logged as Orbax logs it
    if stored:
        # the device arrays made from views of the state's memory (`_without_unit_axes`) end in reference cycles of
        # Orbax's: until they are collected, jax 0.11 does not donate the state's leaves they view (a full
        # collection, ~0.15 s, beside the seconds a leaf of a MiB or more takes to save)
        del items, leaves, stored
        gc.collect()
    if failure is not None:
        _raise_after_failure(failure)
    if jax.process_index() == 0:
        for old in [folder / LEGACY_MANIFEST, *folder.glob("checkpoint-*.npz")]:
            old.unlink(missing_ok=True)
    return folder / SUBFOLDER / str(step)


def _alias(x: jax.Array) -> jax.Array:
    """Another `jax.Array` object over `x`'s own buffers (no copy), for Orbax to save. Orbax copies each array to
    the host (`copy_to_host_async`), and from jax 0.11 the array keeps that host copy, which holds its buffer:
    such an array is no longer donated (the runner's next chunk, given the state it just saved, copied it
    instead: twice the state's memory). The copy is kept on the alias, which ends with the save."""
    if x.is_deleted() or not x.is_fully_addressable and not x.addressable_shards:
        return x
    return jax.make_array_from_single_device_arrays(x.shape, x.sharding, [s.data for s in x.addressable_shards])


UNIT_AXES_MIN_BYTES = 1 << 20
"""The smallest leaf `_without_unit_axes` saves in another shape: a smaller one's copy costs little, and a
checkpoint of small leaves only is laid out as before (a version before 2026-12-05 reads it)."""


def _without_unit_axes(x: jax.Array) -> jax.Array | None:
    """The leaf without its axes of size 1, sharing its memory, where that spares the save a copy; else None.

    TensorStore writes an array with an axis of size 1 (a replay buffer's [runs, 1 env, ...]) by copying it
    whole first: saving a [2, 1, 400000, 400] float32 leaf (1.28 GB) peaked 1.4 GB above the array, and the same
    bytes as [2, 400000, 400] 0.15 GB (TensorStore's own `write`, and Orbax's save, 2026-12-05). On a CPU the
    host's view of a one-device array is the array's own memory, and a device array made from a view of it
    shares that memory too, so the leaf is saved in the shape without the unit axes and read back into its
    own (`_load_step`); on an accelerator the save copies the leaf to the host anyway, and a leaf spread over
    devices or processes is saved as it is.
    """
    shape = tuple(n for n in x.shape if n != 1) or (1,)
    if shape == x.shape or x.nbytes < UNIT_AXES_MIN_BYTES or jax.process_count() != 1 or len(x.sharding.device_set) != 1:
        return None
    (device,) = x.sharding.device_set
    if device.platform != "cpu":
        return None
    return jax.device_put(np.asarray(x).reshape(shape), device)


def exists(folder) -> bool:
    """Whether `folder` holds a committed checkpoint (an Orbax step, or a pre-Orbax checkpoint's manifest)."""
    folder = _absolute(folder)
    return _latest_step(folder) is not None or (folder / LEGACY_MANIFEST).exists()


READS = 5  # how many times a read is made while a train writing the folder keeps replacing the latest step


def _on_latest_step(folder: pathlib.Path, read: Callable[[int | None], Any]) -> Any:
    """`read(step)` of the latest committed step (None: none), made again while the run moves on under it.

    `evaluate` takes no lock: a `train` still writing the folder saves newer steps and removes older ones
    while it is read (Orbax's manager, opened to read, lists every step, the ones being removed too). A read
    that fails while the committed steps change is made again on the latest step, `READS` reads in all; a
    failure with the steps unchanged is the checkpoint's own and is raised as it is.
    """
    for attempt in range(READS):
        steps = _committed_steps(folder)
        try:
            return read(steps[-1] if steps else None)
        except (CheckpointError, OSError) as error:
            if not steps or _committed_steps(folder) == steps:
                raise
            if attempt == READS - 1:
                raise CheckpointError(
                    f"the run in {folder} saved a newer checkpoint during each of {READS} reads (a train is writing "
                    f"it; the last read: {_one_line(error)}); read it again, or once the train stops.") from None


def read_manifest(folder) -> dict:
    """The manifest of the latest checkpoint in `folder` (or of a pre-Orbax checkpoint), or a CheckpointError."""
    folder = _absolute(folder)
    _refuse_links(folder)
    return _on_latest_step(folder, lambda step: _manifest_at(folder, step))


def _manifest_at(folder: pathlib.Path, step: int | None) -> dict:
    """The manifest of committed step `step` (None: of a pre-Orbax checkpoint), or a CheckpointError."""
    import orbax.checkpoint as ocp

    if step is None:
        return _read_legacy_manifest(folder)
    try:  # the item's handler alone: no barrier, so process 0 can read it while the others wait
        manifest = ocp.JsonCheckpointHandler().restore(folder / SUBFOLDER / str(step) / "manifest")
    except Exception as error:  # noqa: BLE001 - Orbax and TensorStore raise many types; all mean unreadable
        raise CheckpointError(
            f"corrupt checkpoint manifest in {folder / SUBFOLDER / str(step)}: {_one_line(error)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{folder / SUBFOLDER / str(step)} holds no {FORMAT} manifest.")
    return manifest


def load(folder, template: Any, sharding: jax.sharding.Sharding | None = None, *,
         only: Collection[int] | None = None) -> tuple[Any, dict, dict]:
    """Loads the latest checkpoint in `folder` and checks it against `template`.

    A read that fails because the run moved on while it was read (a `train` still writing the folder saved a
    newer step, and Orbax removed the one being read: `evaluate` takes no lock) is made again on the newer
    step, `READS` reads in all; a failure with the committed steps unchanged is the checkpoint's own.

    Args:
      folder: the run folder.
      template: a pytree with the expected structure, leaf shapes and dtypes
        (concrete or `jax.ShapeDtypeStruct`s, e.g. from `jax.eval_shape`).
      sharding: where to place the state's arrays (e.g. a `NamedSharding` over
        a mesh that spans processes, each process then reads only its shards);
        None returns numpy arrays.
      only: the positions (in `jax.tree.flatten(template)`'s order) of the
        leaves to read, e.g. a policy's params without the replay buffer beside
        them: the others are not read from disk and come back as None, and the
        extras are not read ({}). The leaves read are checked as in a whole
        read (structure, shapes and dtypes of every leaf, digests of those
        read). None: every leaf and the extras.

    Returns:
      (state with PRNG keys rewrapped, extras as numpy arrays, manifest).

    Raises:
      CheckpointError: no checkpoint, unreadable or altered files (a digest
        that does not match), or a structure, shape or dtype that differs from
        the template's (a checkpoint of another config or library version).
    """
    folder = _absolute(folder)
    _refuse_links(folder)
    if only is not None:
        count = len(jax.tree.leaves(template))
        only = sorted(set(only))
        if not all(_checks.is_int(i) and 0 <= i < count for i in only):
            raise ValueError(f"only: positions of the template's {count} leaves (0 to {count - 1}), got {only}.")
    return _on_latest_step(folder, lambda step: _load_step(folder, step, template, sharding, only))


def _load_step(folder: pathlib.Path, step: int | None, template: Any, sharding: jax.sharding.Sharding | None,
               only: list[int] | None = None) -> tuple[Any, dict, dict]:
    """`load`'s one reading, of committed step `step` (None: a pre-Orbax checkpoint)."""
    manifest = _manifest_at(folder, step)
    if manifest["format"] == LEGACY_FORMAT:
        state, extras, manifest = _load_legacy(folder, manifest, template, sharding)
        if only is None:
            return state, extras, manifest
        leaves, treedef = jax.tree.flatten(state)  # (read whole: one .npz)
        return jax.tree.unflatten(treedef, [x if i in only else None for i, x in enumerate(leaves)]), {}, manifest
    _check_structure(folder, manifest, template)
    step_dir = folder / SUBFOLDER / str(manifest["step"])
    local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    place = sharding if sharding is not None else local
    stored = manifest.get("stored_shapes", {})  # leaves saved without their unit axes (`_without_unit_axes`)
    specs = {f"{i:05d}": s for i, s in enumerate(manifest["leaves"])}
    for name, shape in stored.items():
        if not (name in specs and isinstance(shape, list) and all(_checks.is_int(n) and n >= 0 for n in shape)
                and math.prod(shape) == math.prod(specs[name]["shape"])):
            raise CheckpointError(f"corrupt checkpoint manifest in {step_dir}: stored_shapes names {name!r} as "
                                  f"{shape!r}, not a shape of that leaf's {specs.get(name, {}).get('shape')} values.")
    abstract = {name: jax.ShapeDtypeStruct(tuple(stored[name]), jnp.dtype(s["dtype"]), sharding=local)
                if name in stored else jax.ShapeDtypeStruct(tuple(s["shape"]), jnp.dtype(s["dtype"]), sharding=place)
                for name, s in specs.items()}
    positions = range(len(specs)) if only is None else only
    names = [f"{i:05d}" for i in positions]
    if only is None:
        restored, extras = _restore_whole(folder, step_dir, manifest, abstract)
    else:
        restored, extras = _restore_some(step_dir, {name: abstract[name] for name in names}), {}
    # Restored with the manifest's shapes and dtypes (checked against the template above); the
    # digests check the values.
    read = [restored[name] for name in names]
    for i, digest in zip(positions, _digest_strings(read)):  # (of the words in order: the same whatever the shape)
        if digest != manifest["digests"][i]:
            raise CheckpointError(f"corrupt checkpoint {step_dir}: the content of state leaf {i} does not match the "
                                  "digest saved with it.")
    if only is None:
        for name, digest in manifest.get("extras_sha256", {}).items():  # absent in checkpoints before 2026-11-25
            if name not in extras or _array_sha256(extras[name]) != digest:
                raise CheckpointError(f"corrupt checkpoint {step_dir}: the content of extra {name!r} does not match "
                                      "the sha256 saved with it.")
    leaves: list[Any] = [None] * len(specs)  # (the leaves not read stay None)
    for i, name, x in zip(positions, names, read):
        if name in stored:  # read in its stored shape on this process's first device: into its own
            leaves[i] = _laid_out(np.asarray(x).reshape(specs[name]["shape"]), sharding)
        else:
            leaves[i] = np.asarray(x) if sharding is None else x
    _, treedef = jax.tree.flatten(template)
    return unflatten(treedef, leaves, manifest["key_impls"]), extras, manifest


def _restore_whole(folder: pathlib.Path, step_dir: pathlib.Path, manifest: dict, abstract: dict) -> tuple[dict, dict]:
    """Every leaf of a checkpoint's state item (`abstract`: their names to ShapeDtypeStructs) and its extras."""
    import orbax.checkpoint as ocp

    items = {"state": ocp.args.StandardRestore(abstract)}
    if manifest["extras"]:
        items["extras"] = ocp.args.StandardRestore(
            {k: np.zeros(s["shape"], s["dtype"]) for k, s in manifest["extras"].items()})
    with _StepsRemovedWhileListed.installed():  # the manager lists every step's metadata as it opens
        manager = _manager(folder, create=False)
    failure = None
    try:
        with _quiet_failures():
            restored = manager.restore(manifest["step"], args=ocp.args.Composite(**items))
    except Exception as error:  # noqa: BLE001 - Orbax and TensorStore raise many types; all mean unreadable
        _drop_late_orbax_noise()
        failure = f"corrupt checkpoint {step_dir}: {_one_line(error)}"
    finally:
        manager.close()
    if failure is not None:
        _raise_after_failure(failure)
    extras = {k: np.asarray(v) for k, v in restored.extras.items()} if manifest["extras"] else {}
    return restored.state, extras


def _restore_some(step_dir: pathlib.Path, wanted: dict) -> dict:
    """The leaves `wanted` (names to ShapeDtypeStructs) of a checkpoint's state item alone: Orbax's partial
    restore, which reads nothing of the other leaves."""
    import orbax.checkpoint as ocp

    if not wanted:
        return {}
    failure = None
    try:
        with _quiet_failures(), ocp.PyTreeCheckpointer() as reader:
            restored = reader.restore(step_dir / "state", args=ocp.args.PyTreeRestore(
                item=wanted, restore_args=ocp.checkpoint_utils.construct_restore_args(wanted), partial_restore=True))
    except Exception as error:  # noqa: BLE001 - as _restore_whole's
        _drop_late_orbax_noise()
        failure = f"corrupt checkpoint {step_dir}: {_one_line(error)}"
    if failure is not None:
        _raise_after_failure(failure)
    return restored


def _laid_out(host: np.ndarray, sharding: jax.sharding.Sharding | None) -> Any:
    """A leaf read whole on the host, as `load` returns it: itself (sharding None), or laid out over `sharding`
    (which may span processes: each takes its own shards)."""
    return host if sharding is None else jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


# ---------------------------------------------------------------------------------------------
# The first, pre-Orbax format: checkpoint.json naming an .npz with its sha256 (read only).

def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_legacy_manifest(folder: pathlib.Path) -> dict:
    path = folder / LEGACY_MANIFEST
    if not path.exists():
        raise CheckpointError(f"no checkpoint in {folder}: {SUBFOLDER}/ holds no committed step.")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"corrupt checkpoint manifest {path}: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != LEGACY_FORMAT:
        raise CheckpointError(f"{path} is not a {LEGACY_FORMAT} manifest.")
    return manifest


def _load_legacy(folder: pathlib.Path, manifest: dict, template: Any, sharding) -> tuple[Any, dict, dict]:
    npz = folder / manifest["file"]
    if not npz.exists():
        raise CheckpointError(f"corrupt checkpoint: {npz.name}, named by {LEGACY_MANIFEST}, is missing.")
    if _sha256(npz) != manifest["sha256"]:
        raise CheckpointError(f"corrupt checkpoint: the sha256 of {npz} does not match {LEGACY_MANIFEST}.")
    _check_structure(folder, manifest, template)
    specs = manifest["leaves"]
    try:
        with np.load(npz) as data:
            leaves = [data[f"state/{i:05d}"] for i in range(len(specs))]
            extras = {k: data[f"extra/{k}"] for k in manifest["extras"]}
    except (OSError, KeyError, ValueError) as error:
        raise CheckpointError(f"corrupt checkpoint {npz}: {error}") from None
    for i, (x, spec) in enumerate(zip(leaves, specs)):
        if list(x.shape) != spec["shape"] or str(x.dtype) != spec["dtype"]:
            raise CheckpointError(f"corrupt checkpoint {npz}: leaf {i} is {x.shape} {x.dtype}, expected {spec}.")
    leaves = [_laid_out(x, sharding) for x in leaves]
    _, treedef = jax.tree.flatten(template)
    return unflatten(treedef, leaves, manifest["key_impls"]), extras, manifest
