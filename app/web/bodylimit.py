"""Every request body is read through one cap, before any route sees it.

FastAPI reads a body it parses into a model before it runs a route's dependencies, so a
token check in a dependency comes too late to spare the server a huge body, and a route
that reads `request.body()` holds all of it before it can say 413. This middleware sits
in front of every API route:

- a declared Content-Length over the route's cap is refused (413) before a byte is read;
- a body streamed without one is counted as it arrives, and refused as soon as it passes
  the cap (the route sees an HTTPException from its read, answered as 413);
- the worker endpoints need the worker token, checked here before their body is read;
- a body that stops arriving for BODY_TIMEOUT_S gets 408 (connection closed), and so
  does one that arrives too slowly: past its first BODY_TIMEOUT_S it must have averaged
  BODY_MIN_RATE bytes a second (a byte every two seconds restarts no timer). Only reads
  of the body are timed: once its last part arrived, `receive()` waits for the client
  to disconnect, which a streaming answer may do hours later.

Caps by route: a worker's result may carry IR text and a profiler trace; uploads their
file; everything else (job, matrix and form submissions) MAX_BODY_BYTES.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.settings import Settings
from app.web.tokens import bearer_of, token_matches
from workers.catalog.jaxexport import MAX_SOURCES_BYTES

WORKER_PREFIX = "/api/v1/worker/"
WORKER_BODY_BYTES = 1024 * 1024
"""Registration, heartbeats, progress and releases are small."""
PAGE_FORM_BYTES = 64 * 1024
"""A page's own form (the run form, a run's cancel button): a few fields, never a file."""
RESULT_SLACK_BYTES = 16 * 1024 * 1024
"""A result's samples, statistics and series beside its IR text and trace."""
FORM_SLACK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Caps:
    """The body cap of each kind of route, from the settings."""

    default: int
    result: int
    upload: int
    upload_form: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Caps:
        # Artifacts of five kinds at most, and the trace as base64 (4 bytes per 3).
        trace = math.ceil(settings.PROFILE_MAX_BYTES * 4 / 3)
        return cls(
            default=settings.MAX_BODY_BYTES,
            result=5 * settings.ARTIFACT_MAX_BYTES + trace + RESULT_SLACK_BYTES,
            upload=settings.UPLOAD_MAX_BYTES,
            # The form's function and two archives, and the source lines sent with it.
            upload_form=3 * settings.UPLOAD_MAX_BYTES + MAX_SOURCES_BYTES + FORM_SLACK_BYTES,
        )

    def for_path(self, path: str) -> int:
        if path == f"{WORKER_PREFIX}result":
            return self.result
        if path.startswith(WORKER_PREFIX):
            return WORKER_BODY_BYTES
        if path == "/api/v1/artifacts":
            return self.upload
        if path == "/artifacts":
            return self.upload_form
        return self.default


@dataclass(frozen=True)
class BodyRules:
    """One app's body rules, from its settings: the caps, the worker token, the timeouts."""

    caps: Caps
    worker_token: str | None
    body_timeout_s: float
    min_rate: int

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyRules:
        return cls(
            Caps.from_settings(settings),
            settings.WORKER_TOKEN,
            settings.BODY_TIMEOUT_S,
            settings.BODY_MIN_RATE,
        )


class BodyLimit:
    """ASGI middleware capping request bodies per route (see the module's docstring).
    `rules_of` finds the rules of the app a request is for: one BodyLimit serves every
    app of a process (app.main.shared_api)."""

    def __init__(self, app: ASGIApp, rules_of: Callable[[Scope], BodyRules]) -> None:
        self.app = app
        self.rules_of = rules_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        rules = self.rules_of(scope)
        path: str = scope["path"]
        headers = dict(scope["headers"])
        if path.startswith(WORKER_PREFIX) and not _worker_token_ok(headers, rules.worker_token):
            await _answer(send, 401, "worker endpoints: missing or wrong bearer token")
            return
        limit = rules.caps.for_path(path)
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _answer(send, 413, f"the body is over {limit:,} bytes")
            return
        seen = 0
        started = False
        body_done = False
        late = f"the request body stopped arriving for {rules.body_timeout_s:g} s"
        slow = (
            f"the request body arrived slower than {rules.min_rate:,} bytes a second "
            f"(BOUNDARY_BODY_MIN_RATE, after its first {rules.body_timeout_s:g} s)"
        )
        began: float | None = None

        async def counted() -> Message:
            nonlocal seen, body_done, began
            if body_done:  # then receive() waits for a disconnect, which may take hours
                return await receive()
            now = time.monotonic()
            began = now if began is None else began
            # By then the body must have arrived at the minimum rate, after a grace.
            due = began + rules.body_timeout_s + seen / rules.min_rate
            wait = min(rules.body_timeout_s, due - now)
            try:
                if wait <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), wait)
            except TimeoutError:
                why = late if wait >= rules.body_timeout_s else slow
                raise HTTPException(408, why, headers={"Connection": "close"}) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, f"the body is over {limit:,} bytes")
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except HTTPException as exc:  # raised by `counted` outside any route's handler
            if exc.status_code not in (408, 413) or started:
                raise
            await _answer(send, exc.status_code, str(exc.detail))


def _worker_token_ok(headers: dict[bytes, bytes], token: str | None) -> bool:
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    return token_matches(bearer_of(authorization), token)


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the rest of the body is not read
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
