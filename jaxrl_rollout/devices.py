"""A host's CPU cores as JAX devices, so that vmapped runs use every core.

XLA's CPU runtime executes one program's kernels mostly one after another on
one thread: it hands ready kernels to a second worker only when more than 8
are ready at once, and a PPO gradient step rarely has that many (BENCHMARKS.md,
section 9). A vmapped sweep of S seeds on one CPU device therefore keeps about
one core busy however many the host has. Splitting the host into N CPU devices
and sharding the runs axis over them runs N partitions of the program side by
side, one per core: on a 2-core host, 8 and 64 seeds of the reference PPO
config trained in 0.50x and 0.53x the time of one device (BENCHMARKS.md,
section 9, fifth pass).

    import jax
    from jaxrl_rollout import devices
    devices.use_host_cores()                       # first: before importing the rest (gymnax computes on import)
    from jaxrl_rollout.algorithms import ppo
    train = jax.jit(jax.vmap(ppo.make_train(ppo.PPOConfig())))
    keys = devices.shard_runs(jax.random.split(jax.random.key(0), 8))
    state, metrics = train(keys)                  # 4 seeds per core on a 2-core host

`jax.jit` partitions the program from its inputs' sharding, so nothing else
changes. Each run's numbers equal the one-device run's to float32 rounding,
not bit for bit (so over a long run they drift apart, as with any change in
float ordering): XLA compiles a partition for fewer runs, and the last bits of
its matmuls and reductions can differ. Over a short run the integer results
(episode counts, sampled actions) are the same. The command line does this by
default (`--host-devices`), and `runner.train` shards over whatever devices
exist.
On a GPU or TPU host the accelerator stays the default device and this only
changes the CPU backend.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["forced_host_device_count", "largest_dividing", "shard_runs", "usable_cores", "use_host_cores"]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def forced_host_device_count() -> int | None:
    """The CPU device count XLA_FLAGS sets with --xla_force_host_platform_device_count, or None."""
    forced = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(forced.group(1)) if forced else None


def use_host_cores(count: int | None = None) -> int:
    """Split the CPU backend into `count` JAX devices (default: `usable_cores()`).

    Call it before anything runs a JAX computation: XLA fixes the CPU device
    count when it first starts a backend. Calling it again with the count
    already in place is fine.

    Args:
      count: CPU devices to make, an int >= 1 (None: the count XLA_FLAGS
        already sets with --xla_force_host_platform_device_count, as the
        command line keeps it; else one per usable core).

    Returns:
      The CPU device count that will be (or already is) in place.

    Raises:
      ValueError: `count` is not an int >= 1.
      RuntimeError: JAX has already started its backends with another count.
    """
    if count is None:
        forced = forced_host_device_count()
        count = forced if forced is not None else usable_cores()  # a set count was silently replaced
    # Not _checks.is_int: _checks imports gymnax, whose import starts JAX's CPU backend, which this must precede.
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"use_host_cores: count must be an int >= 1 (or None for one per core), got {count!r}.")
    count = int(count)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        have = len(jax.devices("cpu"))
        if have != count:
            raise RuntimeError(
                f"use_host_cores({count}): JAX has already started its CPU backend with {have} device(s); "
                "call use_host_cores before any JAX computation, and before importing gymnax or the parts of "
                "jaxrl_rollout that import it (algorithms, networks, optim, ...), whose import computes with JAX: "
                "right after `from jaxrl_rollout import devices`; or set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before starting Python."
            ) from None
    return count


def largest_dividing(num_runs: int, available: Sequence[Any]) -> list:
    """The first d of `available` for the largest d that divides `num_runs` (at least one)."""
    return list(available[:max(d for d in range(1, len(available) + 1) if num_runs % d == 0)])


def shard_runs(tree: Any, devices: Sequence[Any] | None = None) -> Any:
    """`tree` with its leading (runs) axis sharded over devices, ready for a jitted vmapped call.

    Args:
      tree: a pytree of arrays that all share a leading axis of R runs (seed
        keys, stacked hyperparameters, a batched train state).
      devices: the devices to spread the runs over (default: `jax.devices()`).
        The largest number of them that divides R is used, so R = 6 on 4
        devices uses 3, and a prime R on 2 devices uses one.

    Returns:
      The same tree, each leaf a `jax.Array` with
      `NamedSharding(Mesh(devices, ("runs",)), PartitionSpec("runs"))`.

    Raises:
      ValueError: a leaf is a scalar, the leaves' leading axes differ, or
        `devices` is empty.
    """
    leaves = jax.tree.leaves(tree)
    sizes = sorted({np.shape(x)[0] if np.ndim(x) else None for x in leaves}, key=str)
    if not leaves or None in sizes or len(sizes) != 1:
        raise ValueError(
            "shard_runs: tree must be arrays that share a leading runs axis, got leading sizes "
            f"{[np.shape(x)[:1] for x in leaves]} (a scalar has none)."
        )
    if isinstance(devices, jax.Device):  # one device: "'Device' object is not iterable" before
        devices = [devices]
    available = list(jax.devices() if devices is None else devices)
    if not available:
        raise ValueError("shard_runs: devices is empty; pass at least one device (or None for jax.devices()).")
    if not all(isinstance(d, jax.Device) for d in available):  # [0, 1] was an AttributeError in Mesh
        raise TypeError(f"shard_runs: devices must be jax devices (e.g. jax.devices()[:2]), got "
                        f"{[type(d).__name__ for d in available]}.")
    mesh = Mesh(np.asarray(largest_dividing(sizes[0], available)), ("runs",))
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec("runs")))
