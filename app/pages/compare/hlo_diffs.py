"""The server's HLO diffs of pairs of runs: each worked out once, in a child process of
its own, kept as its JSON in a cache bounded by bytes, and shared by every request that
asks for it while it is being worked out.

A diff of two 4 MiB modules builds about 100 MB of objects for a few seconds, and its
report is a few hundred kB to tens of MB of JSON. So the diff is worked out in a forked
child (`app.pages.compare.forked`), which gives all of it back when it exits; the cache
holds reports as the JSON bytes the API sends (`BOUNDARY_HLO_DIFF_CACHE_BYTES` of them in
all, the least recently used going first), never as objects; and identical requests wait
for one computation. Why, and what it measured: docs/design/hlo-diff-memory.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import threading
from collections import OrderedDict
from functools import partial
from typing import Any

import anyio

from app.pages.compare.forked import in_child
from app.pages.compare.hlo_changes import Key, key_of, report_json, side_of, stored_key
from app.store import Store

DIFFERS = anyio.CapacityLimiter(1)
"""Diffs worked out at once (each in a child process, waited for by a worker thread): one
holds about 100 MB while it works."""
READERS = anyio.CapacityLimiter(2)
"""Requests reading both stored texts (to know their key) at once: each holds both texts
while it reads them, so twenty requests at once do not hold forty."""


class DiffCache:
    """A thread-safe LRU of reports as JSON bytes, `max_bytes` of them at most in all; a
    report larger than that is not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Key, bytes] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes of the reports kept now."""
        return self._held

    def get(self, key: Key) -> bytes | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Key, report: bytes) -> None:
        with self._lock:
            self._held -= len(self._items.pop(key, b""))
            if len(report) > self.max_bytes:
                return
            self._items[key] = report
            self._held += len(report)
            while self._held > self.max_bytes:
                _, gone = self._items.popitem(last=False)
                self._held -= len(gone)


class HloDiffs:
    """One app's HLO diffs: its store's runs, the reports it keeps, and the diffs being
    worked out now (one each, whoever asks)."""

    def __init__(self, store: Store, cache_bytes: int) -> None:
        self.store = store
        self.cache = DiffCache(cache_bytes)
        self.worked_out = 0
        """Diffs worked out so far (a request answered from the cache or by another's
        computation adds none)."""
        self._flights: dict[Key, asyncio.Future[bytes]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def working(self) -> int:
        """Diffs waiting their turn, being worked out, or giving back their memory."""
        return len(self._tasks)

    async def report_json(self, a: str, b: str) -> bytes:
        """The report of job `a` against job `b` as JSON; HloDiffMissing, HloDiffUnreadable."""
        key = await anyio.to_thread.run_sync(stored_key, self.store, a, b, limiter=READERS)
        found = self.cache.get(key)
        if found is not None:
            return found
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._work_out(key, a, b, flight))
            self._tasks.add(task)  # held until it ends (the loop keeps only a weak reference)
            task.add_done_callback(self._tasks.discard)
        # A request that goes away (its client hung up) leaves the others theirs.
        return await asyncio.shield(flight)

    async def report(self, a: str, b: str) -> dict[str, Any]:
        """The report as objects, for the pages (read in a worker thread: a large one
        takes a while)."""
        found = await self.report_json(a, b)
        report: dict[str, Any] = await anyio.to_thread.run_sync(json.loads, found, limiter=READERS)
        return report

    async def _work_out(self, key: Key, a: str, b: str, flight: asyncio.Future[bytes]) -> None:
        """Work the diff out in its turn and answer every request waiting for it; then,
        still in its turn, give back the memory it took (the answers do not wait for that)."""
        try:
            async with DIFFERS:
                try:
                    done, found = await anyio.to_thread.run_sync(_diff_stored, self.store, a, b)
                except Exception as exc:  # noqa: BLE001 - every waiter's, whatever it is
                    flight.set_exception(exc)
                    flight.exception()  # retrieved: every waiter may have gone
                else:
                    self.worked_out += 1
                    self.cache.put(done, found)
                    flight.set_result(found)
                self._flights.pop(key, None)
                await anyio.to_thread.run_sync(give_back_memory)
        finally:
            self._flights.pop(key, None)
            if not flight.done():  # cancelled (the server stopping) before it answered
                flight.cancel()


def _diff_stored(store: Store, a: str, b: str) -> tuple[Key, bytes]:
    """The key and report of the texts stored now (read again: a request does not hold
    its texts while it waits its turn), the report worked out in a child process."""
    side_a, side_b = side_of(store, a), side_of(store, b)
    return key_of(side_a, side_b), in_child(partial(report_json, side_a, side_b))


def give_back_memory() -> None:
    """Return to the system what glibc kept free of the texts this process read (their
    pages are free memory, not objects; malloc_trim returns them where glibc is the
    allocator)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
