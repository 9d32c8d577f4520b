"""A client that hangs up in the middle of its request body is no fault of the server's: no
500, no traceback in the log, on the routes that queue work and on a worker's progress."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.settings import Settings
from tests.app.bench_fakes import AUTH
from tests.app.built import build_app

pytestmark = pytest.mark.anyio


async def hang_up_mid_body(app: Any, path: str, headers: dict[str, str]) -> list[int]:
    """POST to `path` a body that stops after its first part, the client then gone (as a
    server's ASGI receive says it); the statuses the app answered with."""
    parts: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"workload": "mat', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop(0)
        await asyncio.Event().wait()  # nothing more will come
        raise AssertionError("unreachable")

    answered: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"400"), *raw],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)
    return answered


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/api/v1/jobs", {}), ("/api/v1/fits", {}), ("/api/v1/worker/progress", AUTH)],
)
async def test_a_client_hanging_up_mid_body_is_no_500_and_no_traceback(
    bench_settings: Settings,
    caplog: pytest.LogCaptureFixture,
    path: str,
    headers: dict[str, str],
) -> None:
    app = build_app(bench_settings)
    with caplog.at_level(logging.INFO):
        answered = await hang_up_mid_body(app, path, headers)
    assert answered and 500 not in answered
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    said = [r.getMessage() for r in caplog.records if r.name == "boundary.errors"]
    assert said == [f"POST {path}: the client hung up before its body arrived"]
