"""The agent's side of the wire: one HTTP client carrying the worker token, a POST that
retries with backoff while the server is unreachable or restarting, progress sent in
batches, the stored files a job names fetched, and artifacts cut to what the server keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from workers.export.server_address import ServerAddress
from workers.files import FileCache, job_files

log = logging.getLogger("boundary.worker")

API = "/api/v1/worker"
MAX_BACKOFF_S = 10.0
PROGRESS_INTERVAL_S = 0.25
IDLE_PATHS = ("/register", "/lease")
"""Posts an idle agent makes: a stop request ends their retries at once."""


class Fatal(RuntimeError):
    """The server refused us for good (wrong token, incompatible versions)."""


@dataclass
class StopState:
    """Whether the agent was asked to stop (finish the job in hand) or to abort (give it
    back now). The link reads it to decide how long to keep retrying."""

    requested: asyncio.Event = field(default_factory=asyncio.Event)
    abort: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def stopping(self) -> bool:
        return self.requested.is_set()


class ServerLink:
    """The HTTP client of one agent, bound to its server (a URL or a unix socket) and token."""

    def __init__(self, server: ServerAddress, token: str | None, stop: StopState) -> None:
        self.client = server.async_client(token, timeout=30.0)
        self.stop = stop

    async def post(
        self, path: str, body: dict[str, Any], *, timeout: float | None = None, retry: bool = True
    ) -> httpx.Response:
        """POST, retrying with backoff while the server is unreachable or restarting."""
        delay = 0.25
        while True:
            try:
                response = await self.client.post(
                    f"{API}{path}", json=body, timeout=timeout or 30.0
                )
            except httpx.TransportError as exc:
                # Asked to stop while idle: nothing is owed to the server, so do not wait
                # for it to come back (results and releases still retry).
                idle = self.stop.stopping and path in IDLE_PATHS
                if not retry or self.stop.abort.is_set() or idle:
                    raise
                log.warning("server unreachable (%s); retrying in %.1f s", exc, delay)
            else:
                if response.status_code == 401:
                    raise Fatal(f"the server refused the worker token: {detail(response)}")
                if response.status_code not in (502, 503, 504) or not retry:
                    return response
                log.warning("server answered %d; retrying in %.1f s", response.status_code, delay)
            if path in IDLE_PATHS:
                # Idle: a stop request ends the wait at once.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.requested.wait(), delay)
            else:
                await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    async def fetch_files(self, spec: dict[str, Any], files: FileCache) -> str | None:
        """Fetch the stored files a job names that are not here yet; why not, or None.

        Each is streamed to disk as it arrives (never held whole) and kept only if its
        SHA-256 is the one asked for. The caller pins the files first (FileCache.pinned)."""
        for name, sha in job_files(spec).items():
            if files.has(sha):
                continue
            part = files.new_part()
            digest = hashlib.sha256()
            size = 0
            try:
                async with self.client.stream("GET", f"{API}/files/{sha}", timeout=120.0) as got:
                    if got.status_code != 200:
                        status = got.status_code
                        return f"params.{name}: the server has no file {sha[:12]}… ({status})"
                    with open(part, "wb") as handle:
                        async for piece in got.aiter_bytes():
                            digest.update(piece)
                            size += len(piece)
                            handle.write(piece)
            except httpx.TransportError as exc:
                return f"params.{name}: could not fetch file {sha[:12]}… from the server ({exc})"
            finally:
                if digest.hexdigest() != sha:
                    part.unlink(missing_ok=True)
            if digest.hexdigest() != sha:
                return f"params.{name}: file {sha[:12]}… arrived damaged (its SHA-256 differs)"
            files.commit(part, sha)
            log.info("fetched %s %s… (%d bytes)", name, sha[:12], size)
        return None

    async def aclose(self) -> None:
        await self.client.aclose()


class ProgressForwarder:
    """Batches a job's progress events and sends them at most every PROGRESS_INTERVAL_S.

    Within one phase only the latest event is kept (k/N counts supersede each other);
    every change of phase is sent.
    """

    def __init__(self, send: Callable[[list[dict[str, Any]]], Awaitable[None]]) -> None:
        self._send = send
        self._pending: list[dict[str, Any]] = []

    def add(self, event: dict[str, Any]) -> None:
        if self._pending and self._pending[-1].get("phase") == event.get("phase"):
            self._pending[-1] = event
        else:
            self._pending.append(event)
            del self._pending[:-50]

    async def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            await self._send(batch)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            await self.flush()


def cap_artifacts(result: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Cut IR text the server would not store anyway, so the upload stays small, and say
    which (`artifacts_cut`): a text cut to exactly the cap looks whole to the server."""
    artifacts = result.get("artifacts") or {}
    cut = list(result.get("artifacts_cut") or [])
    for name, text in list(artifacts.items()):
        if isinstance(text, str) and len(text) > max_bytes:
            data = text.encode()
            if len(data) > max_bytes:
                artifacts[name] = data[:max_bytes].decode(errors="ignore")
                cut += [] if name in cut else [name]
    if cut:
        result["artifacts_cut"] = cut
    return result


def detail(response: httpx.Response) -> str:
    """The server's reason for an answer, as text."""
    try:
        said = response.json().get("detail")
    except ValueError:
        return response.text[:500]
    return said if isinstance(said, str) else str(said)[:500]
