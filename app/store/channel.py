"""News between replicas: job status changes, live progress and queue wake-ups.

On PostgreSQL every replica LISTENs on one channel and sends with NOTIFY; on SQLite
there is one server, and the channel carries nothing (a replica always delivers its own
news to its own subscribers first, without the channel). A message is small JSON,
`{"o": origin, "k": kind, "j": job id, "d": data}`; each replica skips its own echo by
its origin. PostgreSQL refuses a payload of 8000 bytes or more (the limit counts UTF-8
bytes), so a message over MAX_PAYLOAD travels without its data, marked `"t": true`:
receivers re-read a status from the store, and a progress event is replaced by the next
one anyway. Progress is never stored: the channel is its only way to other replicas.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.store.dialect import Backend

log = logging.getLogger("boundary.store")

CHANNEL = "boundary"
"""The LISTEN/NOTIFY channel every replica listens on."""
MAX_PAYLOAD = 7999
"""Bytes: PostgreSQL's NOTIFY refuses 8000 and more."""


@dataclass(frozen=True)
class News:
    """One message from another replica."""

    kind: str
    """"status", "progress" or "wake"; "resync" when messages may have been lost."""
    job_id: str | None
    data: dict[str, Any]
    trimmed: bool = False
    """Its data was left out (too long for the channel)."""


def encode(origin: str, news: News) -> str:
    """The payload for `news`, its data left out when it would be too long."""
    body = {"o": origin, "k": news.kind, "j": news.job_id, "d": news.data}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= MAX_PAYLOAD:
        return text
    return json.dumps({"o": origin, "k": news.kind, "j": news.job_id, "d": {}, "t": True})


def status_news_sql(job_id: str, status: str, attempts: str) -> str:
    """PostgreSQL: the payload `encode` makes for a status change, built inside a
    statement for a job it picks itself (whose id the caller does not know beforehand);
    the origin is its parameter. Arguments are SQL expressions."""
    data = f"json_build_object('id', {job_id}, 'status', {status}, 'attempts', {attempts})"
    return f"json_build_object('o', ?::text, 'k', 'status', 'j', {job_id}, 'd', {data})::text"


def decode(payload: str) -> tuple[str, News]:
    """(origin, news) from a payload; ValueError or KeyError when it is not one."""
    body = json.loads(payload)
    data = body.get("d") or {}
    if not isinstance(data, dict):
        raise ValueError("data is not an object")
    return str(body["o"]), News(str(body["k"]), body.get("j"), data, bool(body.get("t")))


class Channel:
    """This replica's end of the news between replicas, over its store's backend."""

    def __init__(self, backend: Backend, origin: str) -> None:
        self.backend = backend
        self.origin = origin

    def payload(self, news: News) -> str:
        """`news` as this replica sends it (for a statement that sends it itself)."""
        return encode(self.origin, news)

    def send(self, news: News) -> None:
        """Tell every other replica (nothing happens on SQLite)."""
        self.send_payload(self.payload(news))

    def send_payload(self, payload: str) -> None:
        self.backend.notify(payload)

    async def listen(self, deliver: Callable[[News], None]) -> None:
        """Deliver other replicas' news until cancelled, and a `resync` after the channel
        was lost and is back (returns at once on SQLite)."""

        def heard(payload: str) -> None:
            try:
                origin, news = decode(payload)
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed message on the channel")
                return
            if origin != self.origin:
                deliver(news)

        await self.backend.listen(heard, lambda: deliver(News("resync", None, {})))
