"""What every client of Boundary's HTTP API shares: how a refusal reads, and the one wait
for a job or a fit search to end.

`boundary run --server`, `boundary fit`, `export-fn --upload` and the MCP tools all say a
refusal with `refusal_text` ("HTTP 422: params.m: …; target: … (retry after 5 s)") and wait with
`wait_ended`. A server restart loses no job and no search (the store holds them), so the
wait rides one out: a connection refused, or a 502, 503 or 504 from a proxy in front, is
retried with a growing pause for as long as `patience_s`, and the wait goes on where it
was once the server answers again.

Light, like the rest of this package: the standard library, httpx and anyio (httpx's own).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

LIVE = frozenset({"queued", "running"})
"""The statuses of a job or a fit search that has not ended."""
RESTARTING = frozenset({502, 503, 504})
"""Answers of a proxy (or a server starting) while the server itself is away."""
PATIENCE_S = 300.0
"""How long a wait rides out a server that does not answer."""
FIRST_PAUSE_S = 0.2
MOST_PAUSE_S = 2.0
ERROR_TEXT_CHARS = 500
"""The most of an error body that is not JSON repeated in a refusal."""


class Refused(Exception):
    """The API refused a request: its status, and its message in the API's own words."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(refusal_text(response))
        self.status = response.status_code


class ServerLost(Exception):
    """The server did not answer for longer than a wait rides out (or past its end)."""


def refusal_text(response: httpx.Response) -> str:
    """What the API said when it refused: "HTTP 422: " and each problem as "field:
    message" (a message that names its field already is not prefixed twice), and when to
    try again where the answer says (a 429 or a 503)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text[:ERROR_TEXT_CHARS] or response.reason_phrase
    said = "; ".join(_problem(p) for p in detail) if isinstance(detail, list) else str(detail)
    retry = response.headers.get("retry-after")
    later = f" (retry after {retry} s)" if retry else ""
    return f"HTTP {response.status_code}: {said}{later}"


def _problem(problem: Any) -> str:
    if not isinstance(problem, dict) or "message" not in problem:
        return str(problem)
    field, message = problem.get("field"), str(problem["message"])
    return f"{field}: {message}" if field and not message.startswith(f"{field}:") else message


async def wait_ended(
    client: httpx.AsyncClient,
    path: str,
    *,
    timeout_s: float | None = None,
    seen: Callable[[dict[str, Any]], None] | None = None,
    between: Callable[[], Awaitable[None]] | None = None,
    lost: Callable[[str], None] | None = None,
    patience_s: float = PATIENCE_S,
    pauses_s: tuple[float, float] = (FIRST_PAUSE_S, MOST_PAUSE_S),
) -> dict[str, Any]:
    """GET `path` (a job or a fit search) until its status is no longer live, or
    `timeout_s` passed; the last answer. `seen` is told each answer, `between` is awaited
    between two (a job's event stream, say, which ends with the job) before a short
    pause, `lost` is told each time the server does not answer; the pause grows from the
    first of `pauses_s` to the second. Refused for any other refusal; ServerLost once the
    server stayed away longer than `patience_s` (or past `timeout_s`)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause, away_since = pauses_s[0], None
    while True:
        try:
            answer = await _answer(client, path)
            if seen is not None:
                seen(answer)
            if answer.get("status") not in LIVE or _past(deadline):
                return answer
            away_since = None
            if between is not None:
                await between()
        except (httpx.TransportError, _Away) as exc:
            away_since = away_since or time.monotonic()
            if time.monotonic() - away_since > patience_s or _past(deadline):
                raise ServerLost(f"the server did not answer: {exc}") from exc
            if lost is not None:
                lost(str(exc))
        await anyio.sleep(_left(pause, deadline))
        pause = min(pauses_s[1], pause * 1.5)


class _Away(Exception):
    """The server answered as one that is away (a proxy's 502, 503 or 504)."""


async def _answer(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    response = await client.get(path)
    if response.status_code in RESTARTING:
        raise _Away(f"HTTP {response.status_code}")
    if not response.is_success:
        raise Refused(response)
    body: dict[str, Any] = response.json()
    return body


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _left(pause: float, deadline: float | None) -> float:
    return pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic()))
