"""Live job news: the latest progress of each running job, a broadcast to server-sent-
event subscribers, and the same news to and from every other replica.

Fine-grained progress (sampling k/N) is throttled here and never stored; coarse status
changes, which the store records, are broadcast too so a stream can end when its job
reaches a final status. With a channel (app.store.channel), everything published here
also goes to the other replicas, and what they publish arrives through `receive`: a run's
live page on one replica shows the progress of a job whose worker reports to another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from app.store import Channel, News
from workers.protocol import FINAL_STATUSES, JobStatus, ProgressEvent

log = logging.getLogger("boundary.dispatch")

QUEUE_SIZE = 64
MESSAGE_CHARS = 1000
"""A progress message longer than this is cut before it travels to other replicas."""
RELAY_BYTES = 6000
"""A report's events longer than this in JSON travel as its latest event alone."""


@dataclass(frozen=True)
class ProgressOut:
    """What one report's progress events pass on (see `ProgressHub.progress_out`)."""

    job_id: str
    events: tuple[ProgressEvent, ...]
    sent: list[dict[str, Any]]
    """The data of each event passed on now (the others are throttled)."""
    at: float
    payload: str | None
    """The message for the other replicas; None when none goes."""


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

    def __init__(self, interval: float = 0.2, channel: Channel | None = None) -> None:
        self.interval = interval
        self.channel = channel
        self._latest: dict[str, ProgressEvent] = {}
        self._sent_at: dict[str, float] = {}
        self._subscribers: dict[str, set[asyncio.Queue[Notice]]] = {}
        self._wake: list[Callable[[], None]] = []

    def latest(self, job_id: str) -> ProgressEvent | None:
        return self._latest.get(job_id)

    def on_wake(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever the queue may have changed, here or on another replica."""
        self._wake.append(callback)

    def _send(self, news: News) -> None:
        if self.channel is not None:
            self.channel.send(news)

    def progress_out(self, job_id: str, events: Sequence[ProgressEvent]) -> ProgressOut:
        """What publishing one report's `events` would pass on now (unless throttled), and
        the message for the other replicas; changes nothing."""
        previous = self._latest.get(job_id)
        last_sent = self._sent_at.get(job_id, 0.0)
        now = time.monotonic()
        sent: list[dict[str, Any]] = []
        for event in events:
            phase_changed = previous is None or previous.phase != event.phase
            previous = event
            if not phase_changed and now - last_sent < self.interval:
                continue
            last_sent = now
            data = event.model_dump(exclude_none=True)
            if isinstance(data.get("message"), str):
                data["message"] = data["message"][:MESSAGE_CHARS]
            sent.append(data)
        relayed = sent if len(json.dumps(sent)) <= RELAY_BYTES else sent[-1:]  # it fits
        payload = None
        if relayed and self.channel is not None:
            payload = self.channel.payload(News("progress", job_id, {"events": relayed}))
        return ProgressOut(job_id, tuple(events), sent, now, payload)

    def publish_progress_out(self, out: ProgressOut, *, relayed: bool = False) -> bool:
        """Record a report's events and pass on what `out` says, here and (unless the
        store already `relayed` its payload) to every replica; True if any went."""
        if out.events:
            self._latest[out.job_id] = out.events[-1]
        if not out.sent:
            return False
        self._sent_at[out.job_id] = out.at
        for data in out.sent:
            self._broadcast(out.job_id, Notice("progress", data))
        if out.payload is not None and not relayed and self.channel is not None:
            self.channel.send_payload(out.payload)
        return True

    def publish_progress(self, job_id: str, *events: ProgressEvent) -> bool:
        """Record `events` (one report's, in order); True if any was passed on to
        subscribers now. Those passed on go to the other replicas in one message."""
        return self.publish_progress_out(self.progress_out(job_id, events))

    def publish_status(
        self,
        job_id: str,
        status: JobStatus,
        reason: str | None,
        attempts: int,
        *,
        relayed: bool = False,
    ) -> None:
        """Pass on a status change, here and to every replica (unless the store already
        `relayed` it with the change); a final one also forgets the job's progress, and a
        job queued again wakes lease requests everywhere."""
        data = {"id": job_id, "status": status.value, "reason": reason, "attempts": attempts}
        self._status(job_id, data)
        if status == JobStatus.QUEUED:
            self._wake_here()
        if not relayed:
            self._send(News("status", job_id, data))

    def receive(self, news: News) -> None:
        """News from another replica."""
        if news.kind == "progress" and news.job_id:
            for data in news.data.get("events") or []:  # none when cut on the way
                try:
                    event = ProgressEvent.model_validate(data)
                except ValidationError:
                    continue
                self._latest[news.job_id] = event
                self._broadcast(news.job_id, Notice("progress", data))
        elif news.kind == "status" and news.job_id:
            self._status(news.job_id, news.data)
            if news.data.get("status") in (JobStatus.QUEUED.value, None):
                self._wake_here()  # re-queued there: a worker here may take it
        elif news.kind == "wake":
            self._wake_here()
        elif news.kind == "resync":  # news may have been lost: everyone looks again
            self._wake_here()
            for job_id in list(self._subscribers):
                self._broadcast(job_id, Notice("status", {"id": job_id}))

    def _status(self, job_id: str, data: dict[str, Any]) -> None:
        self._broadcast(job_id, Notice("status", data))
        status = data.get("status")
        if status in FINAL_STATUSES or status == JobStatus.QUEUED.value:
            self._latest.pop(job_id, None)
            self._sent_at.pop(job_id, None)

    def _wake_here(self) -> None:
        for callback in self._wake:
            callback()

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

    async def relay(self) -> None:
        """Receive other replicas' news until cancelled (nothing to do without a channel)."""
        if self.channel is not None:
            await self.channel.listen(self.receive)
