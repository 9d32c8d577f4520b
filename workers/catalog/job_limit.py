"""The job limit: the most host memory a job's estimated peak (workers.catalog.peak) may
reach before the job is refused. No jax; the server, `boundary run` and a worker each read
it here, from BOUNDARY_MAX_JOB_BYTES or, when that is unset, from what their host has.

The default is HOST_SHARE of the memory this process may use: the host's physical memory,
or less where its control group caps it (a container), and never under FLOOR_BYTES. Half
leaves room for what runs beside the job: a runner may pass the job's estimate by the
allocator's slack and the runtime's own memory (workers.agent.memory: 1.25 × the limit +
1 GiB), and the agent, the server and the system live on the same host. On a TPU v5e
host with 40 GiB that is 20 GiB, where a 16384³ bfloat16 matmul is estimated at 10.7 GB
with ten calls alive (throughput mode). docs/design/product-check.md says why the server
judges with its own limit rather than its workers'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path, PurePosixPath

from workers.protocol.sizes import env_bytes

MAX_JOB_BYTES_ENV = "BOUNDARY_MAX_JOB_BYTES"
HOST_SHARE = 0.5
"""The share of this host's usable memory a job may take, unless a setting says otherwise."""
FLOOR_BYTES = 2 * 1024**3
"""The least default limit, whatever the host has (and the limit where its memory cannot
be read)."""
CGROUP_ROOT = Path("/sys/fs/cgroup")


def physical_memory() -> int | None:
    """The host's physical memory in bytes, None where the system does not say."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return pages * page if pages > 0 and page > 0 else None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_limit(own: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """The tightest memory limit of this process's control groups and their parents
    (cgroup v2's memory.max, v1's memory.limit_in_bytes); None when none is set or none
    can be read."""
    try:
        lines = own.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and not controllers:  # cgroup v2
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        group = PurePosixPath(path.strip() or "/")
        for folder in (group, *group.parents):
            limit = _read_limit(base / str(folder).lstrip("/") / name)
            if limit is not None:
                found.append(limit)
    return min(found) if found else None


def usable_memory() -> int | None:
    """The memory this process may use: physical memory, or its control group's limit
    where that is less; None when neither can be read."""
    known = [size for size in (physical_memory(), cgroup_limit()) if size is not None]
    return min(known) if known else None


def default_job_bytes(memory: int | None) -> int:
    """The job limit on a host whose usable memory is `memory` bytes: HOST_SHARE of it, at
    least FLOOR_BYTES (FLOOR_BYTES when it is unknown)."""
    if memory is None:
        return FLOOR_BYTES
    return max(FLOOR_BYTES, int(HOST_SHARE * memory))


@cache
def host_job_bytes() -> int:
    """The default job limit on this host (read once per process)."""
    return default_job_bytes(usable_memory())


def job_limit(env: Mapping[str, str]) -> int:
    """The job limit: BOUNDARY_MAX_JOB_BYTES as `env` sets it, else this host's default.
    ValueError naming the variable when it is not a positive whole number of bytes."""
    configured = env_bytes(env, MAX_JOB_BYTES_ENV)
    return configured if configured is not None else host_job_bytes()
