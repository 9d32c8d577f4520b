"""`boundary serve --uds`'s socket (app.web.unix_socket) and the app served on it by uvicorn
as `serve` configures it, in this process: the socket's permissions, a stale socket
replaced and a live one refused; over the socket every process is one local client for
admission and the connection caps, unless a proxy the settings trust names the client in
X-Forwarded-For; the header deadline and the per-client cap hold there as over TCP; the
clients every `--server` option makes (workers.export.server_address) reach it."""

from __future__ import annotations

import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.cli import _uvicorn_config
from app.settings import Settings
from app.web.clients import UNIX_PEER
from app.web.unix_socket import SocketRefused, listen_unix, parse_mode
from tests.app.bench_fakes import MATMUL
from tests.app.built import build_app, state_of
from workers.export.server_address import ServerAddress


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder with a short path: a socket's path is at most 107 bytes, and a test's
    tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="bsock-") as name:
        yield Path(name)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_socket_is_its_owners_alone_unless_a_mode_says_otherwise(folder: Path) -> None:
    mine, _ = listen_unix(folder / "mine.sock")
    shared, _ = listen_unix(folder / "shared.sock", parse_mode("660"))
    try:
        assert mode_of(folder / "mine.sock") == 0o600
        assert mode_of(folder / "shared.sock") == 0o660
    finally:
        mine.remove()
        shared.remove()
    assert not (folder / "mine.sock").exists() and not (folder / "shared.sock").exists()
    assert parse_mode("0o640") == 0o640
    for wrong, says in (("rw", "octal"), ("1777", "at most 777"), ("060", "its owner")):
        with pytest.raises(ValueError, match=says):
            parse_mode(wrong)


def test_a_stale_socket_is_replaced_and_a_live_one_or_a_file_is_refused(folder: Path) -> None:
    path = folder / "b.sock"
    killed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    killed.bind(str(path))  # what a killed server leaves: the file, and nobody listening
    killed.close()
    live, stale = listen_unix(path)
    assert stale and path.exists()
    with pytest.raises(SocketRefused, match="a server is listening on it already"):
        listen_unix(path)
    assert live.sock.fileno() >= 0 and path.exists()  # the live server keeps its socket
    live.remove()
    other = folder / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(SocketRefused, match="exists and is not a socket"):
        listen_unix(other)
    assert other.read_text() == "keep me"
    # A server whose path another file has taken since leaves that file alone.
    again, _ = listen_unix(path)
    path.unlink()
    path.write_text("someone else's")
    again.remove()
    again.sock.close()
    assert path.read_text() == "someone else's"


@contextmanager
def served(folder: Path, **changes: Any) -> Iterator[tuple[ServerAddress, Any]]:
    """The app with `changes` to its settings, served by uvicorn as `boundary serve`
    configures it, on a unix socket in `folder`; yields its address and the app."""
    settings = Settings(
        DB=folder / "db.sqlite3", CACHE_DIR=folder / "cache", WORKER_TOKEN="w" * 16, **changes
    )
    app = build_app(settings)
    listener, _ = listen_unix(folder / "b.sock")
    server = uvicorn.Server(_uvicorn_config(app, "127.0.0.1", 0, settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener.sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield ServerAddress.parse(f"unix:{listener.path}"), app
    finally:
        server.should_exit = True
        thread.join(30)
        listener.remove()


def submit(server: ServerAddress, forwarded: str) -> int:
    with server.client() as client:
        answer = client.post("/api/v1/jobs", json=MATMUL, headers={"X-Forwarded-For": forwarded})
    return answer.status_code


def test_every_process_on_the_socket_is_one_client_whatever_it_forwards(folder: Path) -> None:
    with served(folder, MAX_QUEUE_PER_CLIENT=1) as (server, app):
        with server.client() as client:
            assert client.get("/healthz").json() == {"status": "ok"}
        assert submit(server, "198.51.100.1") == 202
        assert submit(server, "198.51.100.2") == 429  # no trusted proxy: the header is ignored
        (job,) = state_of(app).dispatcher.store.list_jobs()[0]
        assert job.client == UNIX_PEER


def test_behind_a_trusted_proxy_on_the_socket_the_forwarded_client_counts(folder: Path) -> None:
    with served(folder, MAX_QUEUE_PER_CLIENT=1, FORWARDED_ALLOW_UDS=True) as (server, app):
        assert submit(server, "198.51.100.1") == 202
        assert submit(server, "203.0.113.5, 198.51.100.2") == 202
        assert submit(server, "198.51.100.2") == 429  # that client's share is used
        jobs = state_of(app).dispatcher.store.list_jobs()[0]
        assert {j.client for j in jobs} == {"198.51.100.1", "198.51.100.2"}


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def test_the_header_deadline_and_the_per_client_cap_hold_on_the_socket(folder: Path) -> None:
    with served(folder, MAX_CONNECTIONS_PER_CLIENT=3, HEADER_TIMEOUT_S=1.5) as (server, _):
        assert server.socket is not None
        silent = [connect(Path(server.socket)) for _ in range(3)]
        time.sleep(0.3)  # stalled long enough to be displaced
        fourth = connect(Path(server.socket))
        # The cap counts the socket's connections as one client's: the oldest stalled one
        # is closed for the new one, before it sent a byte.
        assert silent[0].recv(1024) == b""
        fourth.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert fourth.recv(1024).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        late = silent[2].recv(1024)  # sent nothing: 408 at the header deadline
        assert late.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3
        for sock in (*silent, fourth):
            sock.close()
