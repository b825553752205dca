"""Checkpoints of an opaque pytree: a `.npz` of its leaves plus a JSON manifest.

The state is never read by field name: it is flattened with `jax.tree`, PRNG
key leaves are stored as their raw key data (`jax.random.key_data`) and
rewrapped on load, and the caller passes a template (e.g. `jax.eval_shape` of
its init) whose tree structure, leaf shapes and dtypes must match the saved
ones. So fields added to a state later (observation statistics, reward
normalisation) are saved and checked without any change here.

Layout of a checkpoint folder:

    checkpoint.json            the manifest: which npz is current, its sha256,
                               the tree structure and every leaf's shape/dtype
    checkpoint-000012.npz      the arrays of the checkpoint after 12 chunks

Saving writes the npz to a temporary file in the same folder, renames it into
place (`os.replace`), then replaces the manifest the same way; the manifest's
replacement is the commit point. A save that fails at any step leaves the
previous manifest and the npz it names untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any, Optional

import jax
import numpy as np

__all__ = ["CheckpointError", "MANIFEST", "flatten", "load", "save", "unflatten", "write_atomic"]

MANIFEST = "checkpoint.json"
FORMAT = "jaxrl_rollout.checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not match what the caller expects."""


def _is_key(leaf: Any) -> bool:
    return hasattr(leaf, "dtype") and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def flatten(tree: Any) -> tuple[list[Any], list[Optional[str]], Any]:
    """(leaves with PRNG keys replaced by their key data, key impl name or None per leaf, treedef)."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = [str(jax.random.key_impl(x)) if _is_key(x) else None for x in leaves]
    leaves = [jax.random.key_data(x) if _is_key(x) else x for x in leaves]
    return leaves, impls, treedef


def unflatten(treedef: Any, leaves: list[Any], impls: list[Optional[str]]) -> Any:
    """Inverse of `flatten`: rewraps key data as typed PRNG keys."""
    leaves = [x if impl is None else jax.random.wrap_key_data(x, impl=impl) for x, impl in zip(leaves, impls)]
    return jax.tree.unflatten(treedef, leaves)


def _leaf_specs(template: Any) -> tuple[str, list[dict]]:
    leaves, treedef = jax.tree.flatten(template)
    specs = []
    for x in leaves:
        if _is_key(x):
            data = jax.eval_shape(jax.random.key_data, x)
            specs.append({"shape": list(data.shape), "dtype": str(data.dtype), "key": str(x.dtype)})
        else:
            specs.append({"shape": list(np.shape(x)), "dtype": str(np.dtype(x.dtype)), "key": None})
    return str(treedef), specs


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(folder: pathlib.Path, name: str, write) -> pathlib.Path:
    """Writes via `write(file)` to a temporary file in `folder`, fsyncs, then renames it to `name`."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make checkpoints private
        os.replace(tmp, folder / name)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return folder / name


def save(folder, step: int, state: Any, extras: dict[str, np.ndarray], meta: dict) -> pathlib.Path:
    """Saves `state` (any pytree of host-fetchable arrays) and named extra arrays after `step` chunks.

    Args:
      folder: an existing directory.
      step: the chunk counter; names the npz file.
      state: the pytree to save; PRNG key leaves are stored as key data.
      extras: more arrays (e.g. the metrics so far), saved under their names.
      meta: JSON-serialisable information stored in the manifest under "meta".

    Returns:
      The manifest's path. Older npz files are removed once the new manifest is in place.
    """
    folder = pathlib.Path(folder)
    treedef_str, specs = _leaf_specs(state)
    leaves, impls, _ = flatten(state)
    arrays = {f"state/{i:05d}": np.asarray(x) for i, x in enumerate(leaves)}
    arrays.update({f"extra/{k}": np.asarray(v) for k, v in extras.items()})
    name = f"checkpoint-{step:06d}.npz"
    npz = write_atomic(folder, name, lambda f: np.savez(f, **arrays))
    manifest = {
        "format": FORMAT, "file": name, "sha256": _sha256(npz), "step": step, "treedef": treedef_str,
        "leaves": specs, "key_impls": impls, "extras": {k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)}
                                    for k, v in extras.items()},
        "meta": meta,
    }
    path = write_atomic(folder, MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    for old in folder.glob("checkpoint-*.npz"):
        if old.name != name:
            old.unlink()
    return path


def read_manifest(folder) -> dict:
    """The manifest of the checkpoint in `folder`, or a CheckpointError saying what is wrong."""
    path = pathlib.Path(folder) / MANIFEST
    if not path.exists():
        raise CheckpointError(f"no checkpoint in {folder}: {MANIFEST} is missing.")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"corrupt checkpoint manifest {path}: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} manifest.")
    return manifest


def load(folder, template: Any) -> tuple[Any, dict[str, np.ndarray], dict]:
    """Loads the checkpoint in `folder` and checks it against `template`.

    Args:
      folder: the checkpoint folder.
      template: a pytree with the expected structure, leaf shapes and dtypes
        (concrete or `jax.ShapeDtypeStruct`s, e.g. from `jax.eval_shape`).

    Returns:
      (state as numpy leaves with PRNG keys rewrapped, extras, manifest).

    Raises:
      CheckpointError: missing files, a sha256 that does not match (a
        truncated or altered file), or a structure, shape or dtype that differs
        from the template's (a checkpoint of another config or library version).
    """
    folder = pathlib.Path(folder)
    manifest = read_manifest(folder)
    npz = folder / manifest["file"]
    if not npz.exists():
        raise CheckpointError(f"corrupt checkpoint: {npz.name}, named by {MANIFEST}, is missing.")
    if _sha256(npz) != manifest["sha256"]:
        raise CheckpointError(f"corrupt checkpoint: the sha256 of {npz} does not match {MANIFEST}.")
    treedef_str, specs = _leaf_specs(template)
    if manifest["treedef"] != treedef_str:
        raise CheckpointError(
            f"checkpoint in {folder} has a different state structure than this config builds:\n"
            f"  saved:    {manifest['treedef'][:400]}\n  expected: {treedef_str[:400]}"
        )
    if manifest["leaves"] != specs:
        bad = next(i for i, (a, b) in enumerate(zip(manifest["leaves"], specs)) if a != b)
        raise CheckpointError(
            f"checkpoint in {folder}: state leaf {bad} is {manifest['leaves'][bad]}, this config expects {specs[bad]}."
        )
    try:
        with np.load(npz) as data:
            leaves = [data[f"state/{i:05d}"] for i in range(len(specs))]
            extras = {k: data[f"extra/{k}"] for k in manifest["extras"]}
    except (OSError, KeyError, ValueError) as error:
        raise CheckpointError(f"corrupt checkpoint {npz}: {error}") from None
    for i, (x, spec) in enumerate(zip(leaves, specs)):
        if list(x.shape) != spec["shape"] or str(x.dtype) != spec["dtype"]:
            raise CheckpointError(f"corrupt checkpoint {npz}: leaf {i} is {x.shape} {x.dtype}, expected {spec}.")
    _, treedef = jax.tree.flatten(template)
    return unflatten(treedef, leaves, manifest["key_impls"]), extras, manifest
