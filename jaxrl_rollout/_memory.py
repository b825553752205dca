"""How much host memory a run may still take, so that a CPU run whose train states cannot fit is refused in one
line before they are made.

On a CPU a state larger than the machine's free memory is not refused by XLA: the allocation is granted
(Linux overcommits) and the kernel's out-of-memory killer ends the process when the pages are filled, with no
message (exit 137). An accelerator's own allocator says RESOURCE_EXHAUSTED instead, which the command line
reports; this module is for the host.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any


def free_host_bytes() -> int | None:
    """Bytes of memory this process can still take: Linux's `MemAvailable` plus `SwapFree` (/proc/meminfo), or
    less where a cgroup (a container's limit) allows less; None where neither can be read (not Linux)."""
    try:
        fields = dict(line.split(":", 1) for line in pathlib.Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        free = (int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])) * 1024
    except (OSError, KeyError, ValueError):
        return None
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2, then v1
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap = pathlib.Path(limit).read_text().strip()
            used = int(pathlib.Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 2**60:  # "max", or v1's huge "no limit" figure
            free = min(free, max(int(cap) - used, 0))
        break
    return free


def tree_bytes(tree: Any) -> int:
    """The bytes of every array (or `jax.ShapeDtypeStruct`) in `tree`, typed PRNG keys included."""
    import jax

    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))
