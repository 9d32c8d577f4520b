"""Uploads against `boundary serve` in a real process: a tokenless form is refused before
its body is read, a large upload and its download by a worker leave the server's memory
flat, and a full disk (a real 1 MiB tmpfs, mounted by the test: CI runs as root) answers
507 "the server's disk is full" on a connection that lives on.

Before: the upload form read a whole 47 MB tokenless body first (2.2 GB for 24.5 s);
the raw upload, the store and the worker's file route each held a file whole in memory;
a full disk gave a 500 and reset the connection."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.netload import connect, free_port, read_response, serve
from tests import loopback
from tests.app.test_multipart import BOUNDARY, CONTENT_TYPE, reset_peak, vm

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MiB = 1024 * 1024
TOKEN = "an-upload-token-0123456789"
WORKER_TOKEN = "a-worker-token-0123456789"


def big_npz(path: Path, size: int) -> None:
    """An .npz at `path` whose arg0 holds `size` bytes (uint8), written piece by piece."""
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({size},), }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    with (
        zipfile.ZipFile(path, "w") as archive,
        archive.open("arg0.npy", "w", force_zip64=True) as m,
    ):
        m.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header)
        block = bytes(range(256)) * 4096
        for _ in range(size // len(block)):
            m.write(block)


async def post_file(port: int, path: Path) -> tuple[int, bytes]:
    """POST the file at `path` to /api/v1/artifacts?kind=npz, streamed from disk."""
    reader, writer = await connect(port)
    writer.write(
        (
            "POST /api/v1/artifacts?kind=npz HTTP/1.1\r\nHost: t\r\n"
            "Content-Type: application/octet-stream\r\n"
            f"Content-Length: {path.stat().st_size}\r\nConnection: close\r\n\r\n"
        ).encode()
    )
    with open(path, "rb") as handle:
        while block := handle.read(256 * 1024):
            writer.write(block)
            await writer.drain()
    answer = await read_response(reader, timeout=120)
    writer.close()
    return answer


def test_a_large_upload_and_its_download_by_a_worker_leave_memory_flat(tmp_path: Path) -> None:
    port = free_port()
    source = tmp_path / "big.npz"
    big_npz(source, 128 * MiB)
    data = tmp_path / "server"
    data.mkdir()
    settings = {"UPLOAD_MAX_BYTES": str(256 * MiB), "WORKER_TOKEN": WORKER_TOKEN}
    with serve(port, data, **settings) as proc:
        small = loopback.post(
            f"http://127.0.0.1:{port}/api/v1/artifacts?kind=npz",
            content=_small_npz(),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert small.status_code == 201  # a warm server: imports done
        reset_peak(proc.pid)
        before = vm(proc.pid, "VmRSS")
        status, body = asyncio.run(post_file(port, source))
        stored = vm(proc.pid, "VmHWM") - before
        assert status == 201, body
        sha = json.loads(body)["sha256"]
        reset_peak(proc.pid)
        before = vm(proc.pid, "VmRSS")
        got = 0
        url = f"http://127.0.0.1:{port}/api/v1/worker/files/{sha}"
        auth = {"Authorization": f"Bearer {WORKER_TOKEN}"}
        with loopback.stream("GET", url, headers=auth, timeout=60) as response:
            assert response.status_code == 200
            for piece in response.iter_bytes():
                got += len(piece)
        served = vm(proc.pid, "VmHWM") - before
    assert got == source.stat().st_size
    assert stored < 32 * MiB, f"storing 128 MiB grew the server by {stored / MiB:.1f} MiB"
    assert served < 32 * MiB, f"serving 128 MiB grew the server by {served / MiB:.1f} MiB"
    assert list((data / "spool").iterdir()) == []


def _small_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, arg0=np.arange(1000, dtype=np.float32))
    return buffer.getvalue()


def test_a_tokenless_upload_form_gets_401_before_its_body_is_sent(tmp_path: Path) -> None:
    port = free_port()
    size = 47 * MiB

    async def upload() -> tuple[int, int]:
        reader, writer = await connect(port)
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="artifact"; filename="a"\r\n\r\n'
        )
        writer.write(
            (
                f"POST /artifacts HTTP/1.1\r\nHost: t\r\nContent-Type: {CONTENT_TYPE}\r\n"
                f"Content-Length: {len(head) + size}\r\n\r\n{head}"
            ).encode()
        )
        sent = 0

        async def send() -> None:
            nonlocal sent
            block = bytes(64 * 1024)
            try:
                for _ in range(size // len(block)):
                    writer.write(block)
                    await writer.drain()
                    sent += len(block)
                    # At about 6 MB/s the whole body takes 7.5 s: a busy machine cannot
                    # have sent it all before the server's answer arrives.
                    await asyncio.sleep(0.01)
            except ConnectionError:
                pass

        task = asyncio.create_task(send())
        status, _ = await read_response(reader, timeout=20)
        task.cancel()
        writer.transport.abort()
        return status, sent

    with serve(port, tmp_path, SUBMIT_TOKEN=TOKEN) as proc:
        reset_peak(proc.pid)
        before = vm(proc.pid, "VmRSS")
        status, sent = asyncio.run(upload())
        grew = vm(proc.pid, "VmHWM") - before
    assert status == 401
    assert sent < size  # the answer came while the body was still being sent
    assert grew < 16 * MiB, f"the server grew by {grew / MiB:.1f} MiB"
    assert list((tmp_path / "spool").iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (tmpfs); mounting needs root, as CI runs."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root here: {done.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


async def upload_then_healthz(port: int, data: bytes) -> tuple[int, bytes, int]:
    """POST `data` as an .npz upload, then GET /healthz on the same kept-alive connection."""
    reader, writer = await connect(port)
    writer.write(
        (
            "POST /api/v1/artifacts?kind=npz HTTP/1.1\r\nHost: t\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
    )

    async def send() -> None:
        try:
            for start in range(0, len(data), 64 * 1024):
                writer.write(data[start : start + 64 * 1024])
                await writer.drain()
        except ConnectionError:
            pass

    sender = asyncio.create_task(send())
    try:
        status, body = await read_response(reader)
    except (ConnectionError, asyncio.IncompleteReadError):
        status, body = 0, b""
    await sender
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        await writer.drain()
        after, _ = await read_response(reader, timeout=5)
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
        after = 0  # the connection was closed or reset
    writer.close()
    return status, body, after


def npz_of(size: int) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, arg0=np.frombuffer(os.urandom(size), dtype=np.uint8))
    return buffer.getvalue()


def test_a_full_disk_answers_507_and_the_connection_lives_on(tiny_disk: Path) -> None:
    port = free_port()
    with serve(port, tiny_disk):
        small = asyncio.run(upload_then_healthz(port, npz_of(50 * 1024)))
        spool_full = asyncio.run(upload_then_healthz(port, npz_of(2 * MiB)))  # while spooling
        store_full = asyncio.run(upload_then_healthz(port, npz_of(450 * 1024)))  # in SQLite
    assert small[0] == 201 and small[2] == 200
    assert spool_full[0] == 507, spool_full[1][:300]
    assert json.loads(spool_full[1]) == {"detail": "the server's disk is full"}
    assert spool_full[2] == 200
    assert store_full[0] == 507, store_full[1][:300]
    assert json.loads(store_full[1]) == {"detail": "the server's disk is full"}
    assert store_full[2] == 200
    assert list((tiny_disk / "spool").iterdir()) == []  # spooled parts are removed
