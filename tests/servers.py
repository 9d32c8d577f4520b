"""`boundary serve` in a real process on a free 127.0.0.1 port, for the tests that need a
real server, and what they ask of it.

`serve()` starts one and stops it; tests/conftest.py keeps one of each kind for the whole
test session (`reader_server`, `bench_server`). Under pytest-xdist every worker process
has its own session, hence its own servers, ports and folders: nothing is shared between
processes but the machine.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import loopback
from workers.export.server_address import ServerAddress

ROOT = Path(__file__).resolve().parents[1]
SERVER_WORKER_TOKEN = "test-server-worker-token"
"""The worker token of the session's servers: a test may play a worker on them."""

PORT_ATTEMPTS = 3
"""Ports tried before giving up: between free_port() and the server's bind, a process of
another test may take the port (it is free, not reserved)."""


class ServerExited(RuntimeError):
    """The server process ended before it answered."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until `url`/healthz answers 200; ServerExited if `proc` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerExited(f"server exited with {proc.returncode}")
        try:
            if loopback.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"server at {url} did not come up in {timeout:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _start(tmp: Path, workers: int, env: dict[str, str]) -> tuple[str, subprocess.Popen[bytes]]:
    """A server that answers, on the first free port it could bind."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        log = tmp / f"serve-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                 "--workers", str(workers)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(url, proc)
        except ServerExited:
            said = log.read_text(errors="replace")
            if "address already in use" in said.lower() and attempt < PORT_ATTEMPTS:
                continue
            raise ServerExited(f"boundary serve exited: {said[-3000:]}") from None
        except BaseException:
            _stop(proc)
            raise
        return url, proc
    raise AssertionError("unreachable")


def serve(tmp: Path, workers: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """`boundary serve` on a free loopback port with `workers` local workers, its database,
    cache and log in `tmp`; yields its URL, then stops it. `env` adds settings (BOUNDARY_*)
    to the server's environment."""
    url, proc = _start(
        tmp,
        workers,
        {
            **os.environ,
            "BOUNDARY_DB": str(tmp / "db.sqlite3"),
            "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
            "BOUNDARY_FILES_DIR": str(tmp / "files"),  # not a folder the shell may name
            **(env or {}),
        },
    )
    try:
        yield url
    finally:
        _stop(proc)


def wait_for_target(url: str, target: str) -> None:
    """Wait (up to 2 minutes) until a connected worker offers `target`: a local worker
    detects what it compiles for only after it started."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workers = loopback.get(url + "/api/v1/workers", timeout=5).json()["data"]
        if any(target in (w.get("targets") or []) for w in workers):
            return
        time.sleep(0.25)
    pytest.fail(f"the local worker never offered target {target}")


def upload_exported(url: str, data: bytes) -> str:
    """Upload a `boundary export-fn` artifact as the CLI does; its sha256."""
    r = loopback.post(
        f"{url}/api/v1/artifacts",
        params={"kind": "exported"},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


# --- a server on a unix socket (`serve --uds`), and the processes it and a worker start ------


def wait_until_answers(server: ServerAddress, proc: subprocess.Popen[bytes]) -> None:
    """Wait (up to a minute) until `server` answers /healthz; ServerExited if `proc` ends."""
    deadline = time.monotonic() + 60
    with server.client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerExited(f"server exited with {proc.returncode}")
            try:
                if client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
    raise RuntimeError(f"the server on {server} did not come up in a minute")


@contextlib.contextmanager
def serve_on_socket(
    path: Path, tmp: Path, workers: int, env: dict[str, str], *options: str
) -> Iterator[tuple[ServerAddress, subprocess.Popen[bytes], Path]]:
    """`boundary serve --uds PATH` with `workers` local workers and `options`, its database,
    cache, files and log in `tmp`; yields its address, its process and its log, then
    stops it."""
    log = tmp / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--uds", str(path),
             "--workers", str(workers), *options],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "BOUNDARY_DB": str(tmp / "db.sqlite3"),
                "BOUNDARY_CACHE_DIR": str(tmp / "jax-cache"),
                "BOUNDARY_FILES_DIR": str(tmp / "files"),
                **env,
            },
        )  # fmt: skip
    server = ServerAddress.parse(f"unix:{path}")
    try:
        wait_until_answers(server, proc)
        yield server, proc, log
    finally:
        _stop(proc)


def family(pid: int) -> list[int]:
    """`pid` and every process below it (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = [pid]
    for member in found:
        found.extend(child for child, parent in parents.items() if parent == member)
    return found


def inet_sockets(pids: list[int]) -> dict[int, int]:
    """How many TCP, UDP or raw IP sockets (listening or connected, IPv4 or IPv6) each of
    `pids` holds open, for those that hold any."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        with contextlib.suppress(OSError):
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
            inodes.update(row.split()[9] for row in rows)
    held: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
            mine = [s for s in links if s.startswith("socket:[") and s[8:-1] in inodes]
            if mine:
                held[pid] = len(mine)
    return held
