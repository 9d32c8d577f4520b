"""Bounded bodies and files: every body is read through one cap (and the worker token is
checked before a worker endpoint's body is read); multipart uploads are parsed within
limits, off the event loop; an .npz may hold only argN and outN, and what its arrays
declare counts against the job's byte cap."""

from __future__ import annotations

import io
import struct
import threading
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
OCTET = {"Content-Type": "application/octet-stream"}


class Body:
    """A large request body streamed in 1 MiB chunks (no Content-Length), counting how
    much of it the server pulled before it answered."""

    def __init__(self, total_mib: int, prefix: bytes = b"") -> None:
        self.total_mib = total_mib
        self.prefix = prefix
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunk = b"a" * MIB
        yield self.prefix
        for _ in range(self.total_mib):
            self.sent += len(chunk)
            yield chunk


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        DB=tmp_path / "bodies.sqlite3",
        CACHE_DIR=tmp_path / "cache",
        WORKER_TOKEN="test-worker-token",
        MAX_JOB_BYTES=4 * MIB,
    )
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/matrices", FORM),
        ("/compare/repeat", FORM),
        ("/runs", FORM),
        ("/api/v1/jobs", {"Content-Type": "application/json"}),
        ("/api/v1/matrices", {"Content-Type": "application/json"}),
        ("/api/v1/worker/register", {"Authorization": "Bearer test-worker-token"}),
        ("/api/v1/worker/heartbeat", {"Authorization": "Bearer test-worker-token"}),
    ],
)
async def test_a_huge_body_is_refused_before_it_is_read(
    client: httpx.AsyncClient, path: str, headers: dict[str, str]
) -> None:
    # Before: /matrices and /compare/repeat read a whole 400 MiB body, then said 413.
    body = Body(64)
    r = await client.post(path, content=body, headers=headers)
    assert r.status_code == 413, r.text
    assert body.sent <= 2 * MIB


async def test_a_declared_huge_body_is_refused_without_reading_it(
    client: httpx.AsyncClient,
) -> None:
    body = Body(64)
    headers = {**FORM, "Content-Length": str(64 * MIB)}
    r = await client.post("/matrices", content=body, headers=headers)
    assert r.status_code == 413 and body.sent == 0


async def test_worker_endpoints_check_the_token_before_the_body(
    client: httpx.AsyncClient,
) -> None:
    for path in ("result", "heartbeat", "register"):
        body = Body(64)
        r = await client.post(f"/api/v1/worker/{path}", content=body)
        assert r.status_code == 401 and "token" in r.json()["detail"]
        assert body.sent == 0


def _multipart(parts: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "b0undary"
    out = io.BytesIO()
    for name, data in parts:
        out.write(f"--{boundary}\r\n".encode())
        out.write(
            f'Content-Disposition: form-data; name="{name}"; filename="{name}.bin"\r\n'.encode()
        )
        out.write(b"Content-Type: application/octet-stream\r\n\r\n")
        out.write(data + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue(), f"multipart/form-data; boundary={boundary}"


async def test_a_multipart_form_with_too_many_parts_is_refused(client: httpx.AsyncClient) -> None:
    body, content_type = _multipart([(f"f{i}", b"x") for i in range(50)])
    r = await client.post("/artifacts", content=body, headers={"Content-Type": content_type})
    # Refused at its first part, which the upload form does not have: no part past it is read.
    assert r.status_code == 422 and "the form has no such field" in r.text
    repeated, content_type = _multipart([("inputs", b"x")] * 9)
    r = await client.post("/artifacts", content=repeated, headers={"Content-Type": content_type})
    assert r.status_code == 422 and "this field is in the form twice" in r.text


async def test_uploads_are_checked_and_stored_off_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.routes import artifact_form

    threads: list[int] = []
    real = artifact_form.check_upload  # the form's reading of a file

    def check(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(artifact_form, "check_upload", check)
    body, content_type = _multipart([("artifact", b"not a function")])
    r = await client.post("/artifacts", content=body, headers={"Content-Type": content_type})
    assert r.status_code == 422
    assert threads and threads[0] != threading.get_ident()


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def bomb(name: str, shape: tuple[int, ...]) -> bytes:
    """An .npz whose member `name` declares `shape` float32 but holds no data at all."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("arg0.npy", _npy(np.ones((8, 16), np.float32)))
        archive.writestr(name, npy)
    return buffer.getvalue()


def _npy(array: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


async def test_npz_members_named_neither_argN_outN_nor_by_path_are_refused(
    client: httpx.AsyncClient,
) -> None:
    for data in (npz(**{".x": np.ones(3)}), bomb("../unused.npy", (2**28,))):
        r = await client.post(
            "/api/v1/artifacts", params={"kind": "npz"}, content=data, headers=OCTET
        )
        assert r.status_code == 422
        assert "only arrays named arg0" in r.json()["detail"][0]["message"]
    ok = await client.post(
        "/api/v1/artifacts", params={"kind": "npz"}, content=npz(arg0=np.ones(3)), headers=OCTET
    )
    assert ok.status_code == 201


def deflated_zeros(name: str, count: int) -> bytes:
    """An honest .npz: `name` holds `count` float32 zeros, deflated (a few KiB per 4 MiB),
    written piece by piece so the test never holds the array."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({count},), }}".encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("arg0.npy", _npy(np.ones((8, 16), np.float32)))
        with archive.open(name, "w", force_zip64=True) as member:
            member.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
            zeros = bytes(4 * 1024 * 1024)
            for _ in range(count * 4 // len(zeros)):
                member.write(zeros)
    return buffer.getvalue()


async def test_an_npz_whose_header_lies_about_its_bytes_is_refused(
    client: httpx.AsyncClient,
) -> None:
    # Before: a 1 MiB file with a member declaring 1 GiB it does not hold was accepted.
    data = bomb("arg1.npy", (2**28,))  # declares 1 GiB; the file is tiny
    assert len(data) < 4096
    up = await client.post("/api/v1/artifacts", params={"kind": "npz"}, content=data, headers=OCTET)
    assert up.status_code == 422
    message = up.json()["detail"][0]["message"]
    assert "arg1 declares 1,073,741,824 bytes" in message and "holds 0" in message


async def test_what_an_npz_declares_counts_against_the_job_cap(tmp_path: Path) -> None:
    # Before: a small file whose member declared gigabytes was queued and blew up on the
    # worker. Compressed zeros are honest: they count against the job's cap at submission.
    from app.main import create_app
    from tests.app.test_artifacts import export

    settings = Settings(DB=tmp_path / "db.sqlite3", MAX_JOB_BYTES=64 * 1024 * 1024)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        data = deflated_zeros("arg1.npy", 2**25)  # 128 MiB of float32 zeros
        assert len(data) < 1024 * 1024
        up = await client.post(
            "/api/v1/artifacts", params={"kind": "npz"}, content=data, headers=OCTET
        )
        assert up.status_code == 201 and "arg1: float32[33554432]" in up.json()["arrays"]
        artifact = await client.post("/api/v1/artifacts", content=export(["cpu"]), headers=OCTET)
        assert artifact.status_code == 201
        job = {
            "workload": "exported",
            "path": "jax-cpu",
            "params": {"artifact": artifact.json()["sha256"], "inputs": up.json()["sha256"]},
            "measure": {"samples": 5},
        }
        r = await client.post("/api/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    problem = r.json()["detail"][0]
    assert problem["field"] == "params.inputs"
    assert "134,218,240 bytes in all" in problem["message"]
