"""Raw-socket load for the connection tests and the soak: slow (slowloris) requests, open
event streams and timed /healthz, each from a chosen source address (127.0.0.2 … are
all loopback on Linux), and `boundary serve` started for them.

    python bench/netload.py PORT SECONDS   # time /healthz every 0.5 s; JSON on stdout
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def raise_nofile(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward `wanted` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(target, soft)


@contextlib.contextmanager
def serve(port: int, data: Path, **settings: str) -> Iterator[subprocess.Popen[bytes]]:
    """`boundary serve --workers 0` on `port` with its database in `data` and BOUNDARY_*
    `settings`; stopped (and reaped) after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDARY_")}
    env["BOUNDARY_DB"] = str(data / "db.sqlite3")
    env.update({f"BOUNDARY_{k}": v for k, v in settings.items()})
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "0"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        # One client for the whole wait: httpx loads the CA bundle into every client it
        # builds (about 22 ms of CPU), and a start takes some twenty polls.
        with httpx.Client(timeout=2) as client:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"http://{HOST}:{port}/readyz").status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    tail = (data / "server.log").read_bytes()[-2000:]
                    raise RuntimeError(f"the server did not start: {tail!r}")
                time.sleep(0.1)
        yield proc
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT, wait_s: float = 15) -> None:
    """Ask `proc` to stop with `sig`, kill it if it has not after `wait_s`, and reap it."""
    proc.send_signal(sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def queued_job(port: int) -> str:
    """A job that stays queued (no worker), whose live stream stays open: its id."""
    job = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 8, "n": 8, "k": 8}}
    r = httpx.post(f"http://{HOST}:{port}/api/v1/jobs", json=job, timeout=10)
    r.raise_for_status()
    job_id: str = r.json()["id"]
    return job_id


async def connect(
    port: int, source: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    local = (source, 0) if source else None
    return await asyncio.open_connection(HOST, port, local_addr=local, limit=1 << 16)


async def read_status(reader: asyncio.StreamReader, timeout: float = 10.0) -> int:
    """The status code of a response's first line (0 when the connection closed first)."""
    line = await asyncio.wait_for(reader.readline(), timeout)
    return int(line.split()[1]) if line else 0


async def read_response(reader: asyncio.StreamReader, timeout: float = 10.0) -> tuple[int, bytes]:
    """A whole response with a Content-Length: (status, body)."""
    status = await read_status(reader, timeout)
    length = 0
    while True:
        line = await asyncio.wait_for(reader.readline(), timeout)
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
    return status, body


async def healthz(port: int, source: str | None = None) -> tuple[int, float]:
    """GET /healthz on a fresh connection: (status, seconds); status 0 if it was closed."""
    started = time.perf_counter()
    reader, writer = await connect(port, source)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        await writer.drain()
        status, _ = await read_response(reader)
    except (ConnectionError, asyncio.IncompleteReadError):
        status = 0
    finally:
        writer.close()
    return status, time.perf_counter() - started


@dataclass
class Slow:
    """A slowloris connection: a request whose headers never end."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    opened: float
    dripped: int = 0
    """Header bytes sent so far by `drip`."""

    def close(self) -> None:
        self.writer.transport.abort()


async def slowloris(port: int, source: str | None = None) -> Slow:
    reader, writer = await connect(port, source)
    return Slow(reader, writer, time.monotonic())


async def drip(slow: Slow, every_s: float) -> float | None:
    """Send one header byte every `every_s` until the server closes the connection; the
    seconds it stayed open."""
    slow.writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n")
    try:
        while True:
            slow.writer.write(b"X")
            await slow.writer.drain()
            slow.dripped += 1
            try:
                data = await asyncio.wait_for(slow.reader.read(4096), every_s)
            except TimeoutError:
                continue
            if not data or data.startswith(b"HTTP/1.1 408"):
                return time.monotonic() - slow.opened
    except ConnectionError:
        return time.monotonic() - slow.opened


@dataclass
class Stream:
    """An open event stream (its status read, its events unread)."""

    status: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.transport.abort()


async def open_stream(port: int, job: str, source: str | None = None, extra: str = "") -> Stream:
    reader, writer = await connect(port, source)
    request = (
        f"GET /runs/{job}/live HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{extra}\r\n"
    )
    writer.write(request.encode("latin-1"))
    await writer.drain()
    try:
        status = await read_status(reader)
    except (ConnectionError, asyncio.IncompleteReadError):
        status = 0
    return Stream(status, reader, writer)


def server_rss(pid: int) -> int:
    """The resident memory of process `pid`, in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as lines:
        return next(int(x.split()[1]) * 1024 for x in lines if x.startswith("VmRSS:"))


async def probe(port: int, seconds: float, every_s: float = 0.5) -> list[tuple[int, float]]:
    """/healthz every `every_s` for `seconds`: (status, seconds) each; (0, 10.0) on failure."""
    found: list[tuple[int, float]] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        await asyncio.sleep(every_s)
        try:
            found.append(await asyncio.wait_for(healthz(port), 10))
        except (OSError, TimeoutError):
            found.append((0, 10.0))
    return found


if __name__ == "__main__":
    # Its own process and event loop, so a busy load generator does not delay the timing.
    print(json.dumps(asyncio.run(probe(int(sys.argv[1]), float(sys.argv[2])))))
