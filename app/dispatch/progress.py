"""Live job news kept in memory: the latest progress of each running job and a
broadcast to server-sent-event subscribers.

Fine-grained progress (sampling k/N) is throttled here and never written to disk;
coarse status changes, which the store records, are broadcast too so a stream can end
when its job reaches a final status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from workers.protocol import FINAL_STATUSES, JobStatus, ProgressEvent

QUEUE_SIZE = 64


@dataclass(frozen=True)
class Notice:
    """One message to subscribers: a progress event or a status change."""

    kind: Literal["progress", "status"]
    data: dict[str, Any]

    @property
    def final(self) -> bool:
        return self.kind == "status" and self.data.get("status") in FINAL_STATUSES


class ProgressHub:
    """Latest progress per job and per-job subscriber queues.

    Progress for one job is passed on at most once per `interval` seconds unless its
    phase changes; a subscriber that falls behind loses its oldest messages, never a
    status change at the end of its queue.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._latest: dict[str, ProgressEvent] = {}
        self._sent_at: dict[str, float] = {}
        self._subscribers: dict[str, set[asyncio.Queue[Notice]]] = {}

    def latest(self, job_id: str) -> ProgressEvent | None:
        return self._latest.get(job_id)

    def publish_progress(self, job_id: str, event: ProgressEvent) -> bool:
        """Record `event`; True if it was passed on to subscribers now."""
        previous = self._latest.get(job_id)
        self._latest[job_id] = event
        now = time.monotonic()
        phase_changed = previous is None or previous.phase != event.phase
        if not phase_changed and now - self._sent_at.get(job_id, 0.0) < self.interval:
            return False
        self._sent_at[job_id] = now
        self._broadcast(job_id, Notice("progress", event.model_dump(exclude_none=True)))
        return True

    def publish_status(
        self, job_id: str, status: JobStatus, reason: str | None, attempts: int
    ) -> None:
        """Pass on a status change; a final one also forgets the job's progress."""
        notice = Notice(
            "status",
            {"id": job_id, "status": status.value, "reason": reason, "attempts": attempts},
        )
        self._broadcast(job_id, notice)
        if status in FINAL_STATUSES or status == JobStatus.QUEUED:
            self._latest.pop(job_id, None)
            self._sent_at.pop(job_id, None)

    def _broadcast(self, job_id: str, notice: Notice) -> None:
        for queue in self._subscribers.get(job_id, ()):
            if queue.full():
                queue.get_nowait()  # drop the oldest: a late reader wants the news
            queue.put_nowait(notice)

    @contextmanager
    def subscribe(self, job_id: str) -> Iterator[asyncio.Queue[Notice]]:
        """A queue receiving this job's notices while the context is open."""
        queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self._subscribers.setdefault(job_id, set()).add(queue)
        try:
            yield queue
        finally:
            subscribers = self._subscribers.get(job_id)
            if subscribers is not None:
                subscribers.discard(queue)
                if not subscribers:
                    del self._subscribers[job_id]

    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())
