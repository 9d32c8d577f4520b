"""Connections against `boundary serve` in a real process (app.web.connections, app.web.
streams, the body timeout in app.web.bodylimit): stalled connections are closed at the
header deadline, the connection cap answers 503 or displaces stalled connections, event
streams are capped per client, a stalled body gets 408, and /healthz keeps answering.

Before: uvicorn had no header deadline and nothing capped connections or streams;
19,990 half-open connections used up the server's 20,000 file descriptors (/healthz, the
API and worker registration refused), and 19,800 event streams took it to 1.43 GB. The
last test shows the uvicorn fact behind the design (docs/design/hardening.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.web.connections import DISPLACE_AFTER_S
from bench.netload import (
    connect,
    drip,
    free_port,
    healthz,
    open_stream,
    queued_job,
    raise_nofile,
    read_response,
    read_status,
    serve,
    slowloris,
    stop,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BODY_TIMEOUT_S = 1.0


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until `condition()` holds (asked every 20 ms); fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.fixture(autouse=True)
def _files() -> None:
    raise_nofile(8192)


def test_healthz_answers_within_a_second_under_slowloris_and_a_full_stream_quota(
    tmp_path: Path,
) -> None:
    port = free_port()

    async def scenario(job: str) -> tuple[list[int], int, list[tuple[int, float]]]:
        slow = [await slowloris(port) for _ in range(50)]
        drips = [asyncio.create_task(drip(s, 1.0)) for s in slow]
        streams = [await open_stream(port, job) for _ in range(100)]
        one_more = await open_stream(port, job)
        dripping = lambda: all(s.dripped >= 2 for s in slow)  # noqa: E731
        await until(dripping, 10, "every slow connection to send header bytes a while")
        checks = [await healthz(port) for _ in range(5)]
        for task in drips:
            task.cancel()
        await asyncio.gather(*drips, return_exceptions=True)
        for s in slow:
            s.close()
        for st in (*streams, one_more):
            st.close()
        return [s.status for s in streams], one_more.status, checks

    with serve(port, tmp_path):
        statuses, extra, checks = asyncio.run(scenario(queued_job(port)))
    assert statuses == [200] * 100
    assert extra == 429  # the client's 101st stream
    assert [status for status, _ in checks] == [200] * 5
    assert max(seconds for _, seconds in checks) < 1.0


def test_a_slowloris_connection_is_closed_at_the_header_deadline(tmp_path: Path) -> None:
    port = free_port()

    async def scenario() -> tuple[float | None, float, int]:
        dripping = await slowloris(port)
        silent = await slowloris(port)
        opened = time.monotonic()
        closed_after = await asyncio.wait_for(drip(dripping, 0.25), 10)
        status, _ = await read_response(silent.reader)  # the silent one gets 408 too
        return closed_after, time.monotonic() - opened, status

    with serve(port, tmp_path, HEADER_TIMEOUT_S="2"):
        dripping_s, silent_s, silent_status = asyncio.run(scenario())
    assert dripping_s is not None and 1.9 <= dripping_s < 3.5
    assert 1.9 <= silent_s < 3.5
    assert silent_status == 408


def test_a_kept_alive_connection_has_a_deadline_for_its_next_request_too(
    tmp_path: Path,
) -> None:
    port = free_port()

    async def scenario() -> tuple[int, float]:
        reader, writer = await connect(port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        first, _ = await read_response(reader)
        started = time.monotonic()
        writer.write(b"GET /healthz HTTP/1.1\r\n")  # the next request starts, then stalls
        while True:
            try:
                writer.write(b"X")
                await writer.drain()
                data = await asyncio.wait_for(reader.read(4096), 0.25)
            except TimeoutError:
                continue
            except ConnectionError:
                break
            if not data or data.startswith(b"HTTP/1.1 408"):
                break
        return first, time.monotonic() - started

    with serve(port, tmp_path, HEADER_TIMEOUT_S="2"):
        first, seconds = asyncio.run(scenario())
    assert first == 200
    assert 1.5 <= seconds < 3.5


def test_past_the_cap_a_connection_gets_503_before_its_request_is_read(tmp_path: Path) -> None:
    port = free_port()

    async def scenario(job: str) -> tuple[list[int], int, bytes, int]:
        # Twenty open streams: requests past their headers, which nothing displaces.
        streams = [await open_stream(port, job) for _ in range(20)]
        reader, writer = await connect(port)  # the 21st connection; it sends nothing
        status, body = await read_response(reader)
        writer.close()
        for s in streams[:5]:
            s.close()
        await asyncio.sleep(0.3)
        after = (await healthz(port))[0]
        for s in streams[5:]:
            s.close()
        return [s.status for s in streams], status, body, after

    with serve(port, tmp_path, MAX_CONNECTIONS="20"):
        statuses, status, body, after = asyncio.run(scenario(queued_job(port)))
    assert statuses == [200] * 20
    assert status == 503
    assert "maximum of 20 connections" in json.loads(body)["detail"]
    assert after == 200


def test_at_the_cap_a_new_request_displaces_the_longest_stalled_connection(
    tmp_path: Path,
) -> None:
    port = free_port()

    async def scenario() -> tuple[list[int], int]:
        held = [await slowloris(port) for _ in range(49)]
        # The server takes connections in order: one answered after them says it holds them.
        assert (await healthz(port))[0] == 200
        held.append(await slowloris(port))
        held_since = time.monotonic()
        # All of them wait for their headers past the age at which one may be displaced.
        aged = lambda: time.monotonic() - held_since >= 2 * DISPLACE_AFTER_S  # noqa: E731
        await until(aged, 10, "the held connections to age")
        checks = [(await healthz(port))[0] for _ in range(5)]
        await asyncio.sleep(0.2)
        closed = sum([1 for h in held if await _closed(h.reader)])
        for h in held:
            h.close()
        return checks, closed

    with serve(port, tmp_path, MAX_CONNECTIONS="50", HEADER_TIMEOUT_S="30"):
        checks, closed = asyncio.run(scenario())
    assert checks == [200] * 5
    assert 1 <= closed <= 5  # each /healthz past the cap closed one stalled connection


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        data = await asyncio.wait_for(reader.read(1), 0.05)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return data == b""


def test_streams_are_capped_per_client_and_given_back_when_they_close(tmp_path: Path) -> None:
    port = free_port()

    async def scenario(job: str) -> tuple[list[int], int, int, int, int]:
        first = [await open_stream(port, job) for _ in range(3)]
        spoofed = await open_stream(port, job, extra="X-Forwarded-For: 10.9.9.9\r\n")
        other = await open_stream(port, job, source="127.0.0.2")
        for s in first:
            s.close()
        await asyncio.sleep(0.3)
        again = await open_stream(port, job)
        api = await open_stream(port, job, source="127.0.0.3")
        for s in (spoofed, other, again, api):
            s.close()
        return [s.status for s in first], spoofed.status, other.status, again.status, api.status

    # The peer (127.0.0.1) is no trusted proxy here, so its X-Forwarded-For is ignored.
    settings = {"MAX_STREAMS_PER_CLIENT": "3", "FORWARDED_ALLOW_IPS": "127.0.0.9"}
    with serve(port, tmp_path, **settings):
        first, spoofed, other, again, api = asyncio.run(scenario(queued_job(port)))
    assert first == [200] * 3
    assert spoofed == 429  # X-Forwarded-For from an untrusted peer changes nothing
    assert other == 200 and api == 200  # other addresses have quotas of their own
    assert again == 200  # closed streams gave their slots back


def test_a_stalled_body_gets_408_and_a_stream_outlives_the_body_timeout(tmp_path: Path) -> None:
    port = free_port()

    async def scenario(job: str) -> tuple[int, float, int, bytes, bool]:
        reader, writer = await connect(port)
        started = time.monotonic()
        writer.write(
            b"POST /api/v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"workload"'
        )
        status, _ = await read_response(reader)
        took = time.monotonic() - started
        writer.close()
        opened = time.monotonic()
        stream = await open_stream(port, job)
        past = lambda: time.monotonic() - opened >= 1.5 * BODY_TIMEOUT_S  # noqa: E731
        await until(past, 10, "the stream to outlive the body timeout")
        data = await asyncio.wait_for(stream.reader.read(65536), 5)
        try:
            more = await asyncio.wait_for(stream.reader.read(1), 0.5)
            still_open = more != b""
        except TimeoutError:
            still_open = True
        stream.close()
        return status, took, stream.status, data, still_open

    with serve(port, tmp_path, BODY_TIMEOUT_S=str(BODY_TIMEOUT_S)):
        status, took, stream_status, data, still_open = asyncio.run(scenario(queued_job(port)))
    assert status == 408
    assert 0.9 <= took < 3
    assert stream_status == 200 and b"data:" in data and still_open


def test_serve_refuses_more_connections_than_it_may_open_files(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--workers", "0", "--port", "9"],
        env={"BOUNDARY_DB": str(tmp_path / "db.sqlite3"), "BOUNDARY_MAX_CONNECTIONS": "10000000"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "BOUNDARY_MAX_CONNECTIONS=10,000,000 needs more open files" in done.stderr


UVICORN_ONLY = textwrap.dedent(
    """
    import sys, uvicorn
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), limit_concurrency=10,
                log_level="error", http="httptools")
    """
)


def test_uvicorn_limit_concurrency_reads_headers_first_and_stalled_connections_lock_it() -> None:
    """Why a protocol class and not uvicorn's own setting: with limit_concurrency=10, ten
    stalled connections make every request get 503, and a connection past the cap is held
    open, unread, for as long as it sends nothing (no deadline)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", UVICORN_ONLY, str(port)])

    async def scenario() -> tuple[int, bool, int]:
        for _ in range(200):
            try:
                if (await healthz(port))[0] == 200:
                    break
            except OSError:
                await asyncio.sleep(0.1)
        held = [await slowloris(port) for _ in range(10)]
        await asyncio.sleep(0.3)
        status = (await healthz(port))[0]
        past, writer = await connect(port)
        try:
            await read_status(past, timeout=2.0)
            answered = True
        except TimeoutError:
            answered = False
        writer.close()
        for h in held:
            h.close()
        await asyncio.sleep(0.3)
        return status, answered, (await healthz(port))[0]

    try:
        status, answered, after = asyncio.run(scenario())
    finally:
        stop(proc)
    assert status == 503
    assert answered is False
    assert after == 200
