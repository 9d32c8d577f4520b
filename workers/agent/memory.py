"""A runner's memory, bounded from the agent's side (Linux): the limit a job may not pass,
and a runner that keeps too much afterwards replaced.

The catalog refuses a job whose estimated peak passes BOUNDARY_MAX_JOB_BYTES
(workers.catalog.peak), but an estimate is not a bound. Each runner therefore runs its
jobs under BOUNDARY_RUNNER_MAX_MEMORY, in two layers set by the agent on its child:

1. `limit_data`: RLIMIT_DATA through prlimit(2) when a job starts (CPU-only runners).
   Private writable memory (the heap, anonymous mappings, XLA's CPU buffers) counts, so
   an allocation past it fails inside the job (XLA: "RESOURCE_EXHAUSTED: Out of memory
   allocating …"; NumPy: MemoryError) and the runner lives to report it. It is set
   from the runner's data size at that moment plus what the limit leaves: thread stacks
   (8 MiB of data each, however little is touched) are already counted then.
2. `MemoryWatch`: polls the runner's memory and kills it past the limit. Where
   RLIMIT_DATA is set it counts private memory (RssAnon + RssShmem: what the job holds
   and the system cannot take back), the same memory the limit bounds, so the limit
   fails an allocation before the watch would kill. Elsewhere (GPU runners, or where
   prlimit failed) it counts resident memory at its peak (VmHWM, which also catches a
   spike between two polls), a driver's mappings included.

File-backed pages are not the job's: the first compile in a runner maps in about 140 MB
more of jaxlib's code (measured here: RssFile 101 → 243 MiB over one elementwise job),
clean pages the kernel can drop at will. Counting them against the limit made the watch
kill a runner whose private memory was still under RLIMIT_DATA (a CI failure: 766 MB
resident against a 757 MB limit).

RLIMIT_AS is not used: XLA reserves address space it never touches (about 2 GB for a
CPU runner holding 0.4 GB; libtpu and CUDA far more), and a low RLIMIT_AS aborts JAX in
thread creation or libtpu's loader. After a job that leaves the runner holding more
than half of BOUNDARY_RUNNER_KEEP_BYTES over its ready size, the runner gives freed
memory back to the system (gc, malloc_trim) before it sends the result (after a small
job it does not: a full collection costs 60-90 ms once JAX is imported); one that still
keeps more than BOUNDARY_RUNNER_KEEP_BYTES over what it held when it became ready is
replaced.

Measured here (jax-cpu): a runner at ready 226 MB resident; after its first job (the CPU
client made) 390 MB; with libtpu loaded by a deviceless TPU compile 626 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from workers.protocol.sizes import byte_text, env_bytes

MAX_MEMORY_ENV = "BOUNDARY_RUNNER_MAX_MEMORY"
KEEP_BYTES_ENV = "BOUNDARY_RUNNER_KEEP_BYTES"
RUNTIME_BYTES = 1024**3
"""The runtime's own memory, budgeted beside the job's: JAX and XLA warm (390 MB on a
CPU), libtpu (626 MB with it), compiled programs and the compiler's workspace."""
ALLOCATOR_SLACK = 1.25
"""Measured peak over the catalog's estimate reached 1.30 for one sweep (glibc's heap
fragments as large blocks come and go); 1.14 or less for the rest."""
DEFAULT_KEEP_BYTES = 1024**3
POLL_S = 0.1
DATA_MARGIN = 64 * 1024 * 1024
"""RLIMIT_DATA stops this far below the limit: private memory can grow without data
growing where the job touches what was already counted (thread stacks, heap pages
malloc_trim gave back). A larger margin only moves the failure earlier: at 160 MiB (and
room reckoned from resident memory) an allocation inside XLA's compiler failed instead,
and the runner died by SIGSEGV."""
_FIELDS = {
    "VmRSS": "rss",
    "VmHWM": "hwm",
    "VmData": "data",
    "RssAnon": "anon",
    "RssShmem": "shmem",
}


def default_max_memory(max_job_bytes: int) -> int:
    """BOUNDARY_RUNNER_MAX_MEMORY when unset: the job's cap with the allocator's slack,
    plus the runtime's own (3.5 GiB for a 2 GiB cap; 26 GiB for 20 GiB, the default on a
    host of 40 GiB)."""
    return int(ALLOCATOR_SLACK * max_job_bytes) + RUNTIME_BYTES


@dataclass(frozen=True)
class MemoryPolicy:
    """How a worker bounds its runners' memory."""

    max_memory: int
    """A runner's resident memory may not pass this while it runs a job."""
    keep_bytes: int
    """A runner holding more than this over its ready size after a job is replaced."""
    limit_data: bool = True
    """Also set RLIMIT_DATA (CPU-only runners: untested with GPU drivers)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], max_job_bytes: int) -> MemoryPolicy:
        """From BOUNDARY_RUNNER_MAX_MEMORY and BOUNDARY_RUNNER_KEEP_BYTES (ValueError
        naming the variable when one is not a positive whole number)."""
        max_memory, keep_bytes = env_bytes(env, MAX_MEMORY_ENV), env_bytes(env, KEEP_BYTES_ENV)
        platforms = env.get("JAX_PLATFORMS", "cpu")
        return cls(
            max_memory=default_max_memory(max_job_bytes) if max_memory is None else max_memory,
            keep_bytes=DEFAULT_KEEP_BYTES if keep_bytes is None else keep_bytes,
            limit_data=platforms in ("", "cpu"),
        )


def read_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, VmData, RssAnon and RssShmem of `pid` in bytes, and `private`, the
    sum of the last two (OSError once it is gone, or a zombie whose memory is already
    freed)."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as lines:
        for line in lines:
            key, _, value = line.partition(":")
            name = _FIELDS.get(key)
            if name is not None:
                found[name] = int(value.split()[0]) * 1024
    if len(found) < len(_FIELDS):
        raise ProcessLookupError(f"process {pid} has exited")
    found["private"] = found["anon"] + found["shmem"]
    return found


def reset_peak(pid: int) -> None:
    """Reset `pid`'s VmHWM to its current resident size (Linux ≥ 4.0; a parent may)."""
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")


def limit_data(pid: int, limit: int) -> tuple[int, int]:
    """Cap `pid`'s private writable memory so that its private memory (what MemoryWatch
    counts then) stays under `limit`: its data size now plus what `limit` leaves over its
    private memory now, less DATA_MARGIN (the soft limit only). The previous limits, to
    restore after the job."""
    status = read_status(pid)
    previous = resource.prlimit(pid, resource.RLIMIT_DATA)
    soft = status["data"] + max(0, limit - status["private"] - DATA_MARGIN)
    hard = previous[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.prlimit(pid, resource.RLIMIT_DATA, (soft, hard))
    return previous


def restore_data(pid: int, previous: tuple[int, int]) -> None:
    with contextlib.suppress(OSError):
        resource.prlimit(pid, resource.RLIMIT_DATA, previous)


@dataclass(frozen=True)
class Overrun:
    """Why a runner was killed: the memory it reached and its limit."""

    reached: int
    limit: int
    private: bool = False

    def reason(self) -> str:
        kind = "private memory" if self.private else "memory"
        return (
            f"the job used {byte_text(self.reached)} of {kind}, over the runner's limit of "
            f"{byte_text(self.limit)} (BOUNDARY_RUNNER_MAX_MEMORY); the runner was killed"
        )


class MemoryWatch:
    """Polls a child's memory every `poll_s` and SIGKILLs it past `limit` bytes: its
    private memory when `private` (RLIMIT_DATA is set on it), else its peak resident
    memory.

    Start it when a job starts (its peak is reset first, so VmHWM is the job's own) and
    stop it when the job ends; `overrun` says whether it killed the child. `peak` is the
    job's peak resident memory either way.
    """

    def __init__(
        self, pid: int, limit: int, poll_s: float = POLL_S, *, private: bool = False
    ) -> None:
        self.pid = pid
        self.limit = limit
        self.poll_s = poll_s
        self.private = private
        self.overrun: Overrun | None = None
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        with contextlib.suppress(OSError):
            reset_peak(self.pid)
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(OSError):
            self.peak = max(self.peak, read_status(self.pid)["hwm"])

    async def _watch(self) -> None:
        while True:
            try:
                found = read_status(self.pid)
            except OSError:
                return  # gone: the agent learns why from its exit status
            self.peak = max(self.peak, found["hwm"])
            used = found["private"] if self.private else found["hwm"]
            if used > self.limit:
                self.overrun = Overrun(used, self.limit, self.private)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                return
            await asyncio.sleep(self.poll_s)


def keeps_too_much(pid: int, ready_rss: int, keep_bytes: int) -> bool:
    """Whether the runner holds more than `keep_bytes` over its resident size when it
    became ready (after a job it has given back what it could)."""
    try:
        return read_status(pid)["rss"] > ready_rss + keep_bytes
    except OSError:
        return False


OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED: Out of memory", "MemoryError", "std::bad_alloc")
"""How a failed allocation reads in an engine error under RLIMIT_DATA."""


def out_of_memory(error: str | None) -> bool:
    return error is not None and any(words in error for words in OUT_OF_MEMORY)
