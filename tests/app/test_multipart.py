"""The streaming form reader (app.web.multipart): token first (401 within 64 KiB), files to
disk under caps, plain-words refusals, and memory that stays flat for a 200 MB body.

Before: the upload form read and parsed its whole body before it checked the token; a
47 MB tokenless form took the server to 2.2 GB for 24.5 s."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.web.multipart import TOKEN_WINDOW, Form, FormPolicy, FormRefused, read_form

MiB = 1024 * 1024
TOKEN = "sekret-token-0123456789"
POLICY = FormPolicy(
    files={"artifact": 16 * MiB, "inputs": 16 * MiB, "reference": 16 * MiB},
    text=frozenset({"note"}),
    token=TOKEN,
)
BOUNDARY = "----formboundary7MA4YWxkTrZu0gW"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
FILE_HEAD = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="artifact"; filename="a"\r\n\r\n'
).encode()


def part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    kind = "Content-Type: application/octet-stream\r\n" if filename else ""
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{kind}\r\n"
    return head.encode() + value + b"\r\n"


def body(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


async def chunked(data: bytes, size: int, counter: list[int] | None = None) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        piece = data[start : start + size]
        if counter is not None:
            counter[0] += len(piece)
        yield piece


def read(
    data: bytes, size: int, tmp: Path, authorization: str = "", policy: FormPolicy = POLICY
) -> Form:
    return asyncio.run(read_form(chunked(data, size), CONTENT_TYPE, policy, tmp, authorization))


def refusal(data: bytes, tmp: Path, size: int = 4096, **kw: object) -> FormRefused:
    with pytest.raises(FormRefused) as caught:
        read(data, size, tmp, **kw)  # type: ignore[arg-type]
    assert list(tmp.iterdir()) == []  # nothing spooled is left behind
    return caught.value


@pytest.mark.parametrize("size", [1, 7, 70, 4096, 65536])
def test_a_browser_shaped_form_reads_the_same_in_any_chunk_size(tmp_path: Path, size: int) -> None:
    # All but the boundary's last character, then a byte that is not it: random bytes there
    # completed the delimiter once in 256 runs, and a parser must then see a new part.
    near = f"\r\n--{BOUNDARY[:-1]}".encode() + (b"!" if BOUNDARY[-1] != "!" else b"?")
    artifact = os.urandom(100_000) + near + os.urandom(999)
    data = body(
        part("token", TOKEN.encode()),
        part("artifact", artifact, "f.jaxexport"),
        part("inputs", b"", "empty.npz"),
        part("note", "ünïcode".encode()),
    )
    form = read(data, size, tmp_path)
    assert form.text == {"token": TOKEN, "note": "ünïcode"}
    assert form.files["artifact"].path.read_bytes() == artifact
    assert form.files["artifact"].sha256 == hashlib.sha256(artifact).hexdigest()
    assert form.files["artifact"].filename == "f.jaxexport"
    assert "inputs" not in form.files  # a file input left empty sends an empty part
    assert form.read == len(data)


def test_httpx_encoded_form_reads(tmp_path: Path) -> None:
    request = httpx.Request(
        "POST",
        "http://t/artifacts",
        data={"token": TOKEN},
        files={"artifact": ("a.bin", b"\x00\x01" * 5000, "application/octet-stream")},
    )
    data = request.read()
    content_type = request.headers["content-type"]
    form = asyncio.run(read_form(chunked(data, 1000), content_type, POLICY, tmp_path))
    assert form.files["artifact"].size == 10_000


def test_a_form_without_its_token_first_is_refused_within_64_kib(tmp_path: Path) -> None:
    big = body(part("artifact", b"\0" * (47 * MiB), "big.jaxexport"), part("token", TOKEN.encode()))
    counter = [0]

    async def go() -> None:
        await read_form(chunked(big, 16 * 1024, counter), CONTENT_TYPE, POLICY, tmp_path)

    with pytest.raises(FormRefused) as caught:
        asyncio.run(go())
    assert caught.value.status == 401
    assert caught.value.field == "token"
    assert counter[0] <= TOKEN_WINDOW
    assert list(tmp_path.iterdir()) == []


def test_a_first_part_that_never_ends_is_refused_at_64_kib(tmp_path: Path) -> None:
    endless = part("token", b"x" * (10 * MiB))
    counter = [0]

    async def go() -> None:
        await read_form(chunked(endless, 10_000, counter), CONTENT_TYPE, POLICY, tmp_path)

    with pytest.raises(FormRefused) as caught:
        asyncio.run(go())
    assert caught.value.status == 401
    assert counter[0] <= TOKEN_WINDOW + 10_000


def test_a_wrong_token_is_refused_before_the_files(tmp_path: Path) -> None:
    data = body(part("token", b"wrong"), part("artifact", b"\0" * MiB, "a"))
    assert refusal(data, tmp_path).status == 401


def test_the_token_may_come_as_a_bearer_header_instead(tmp_path: Path) -> None:
    data = body(part("artifact", b"abc", "a"))
    form = read(data, 4096, tmp_path, authorization=f"Bearer {TOKEN}")
    assert form.files["artifact"].size == 3
    form.discard()
    assert refusal(data, tmp_path, authorization="Bearer nope").status == 401


def test_no_token_is_needed_when_the_server_has_none(tmp_path: Path) -> None:
    open_policy = FormPolicy(files=POLICY.files, text=POLICY.text, token=None)
    form = read(body(part("artifact", b"abc", "a")), 4096, tmp_path, policy=open_policy)
    assert form.files["artifact"].size == 3


@pytest.mark.parametrize(
    ("parts", "status", "field", "words"),
    [
        ([part("artifact", b"\0" * (16 * MiB + 1), "a")], 413, "artifact", "over 16,777,216 bytes"),
        ([part("shell", b"x")], 422, "shell", "the form has no such field"),
        ([part("note", b"a"), part("note", b"b")], 422, "note", "this field is in the form twice"),
        ([part("note", b"x" * 5000)], 422, "note", "over 4,096 characters"),
        ([part("note", b"")] * 9, 422, "note", "this field is in the form twice"),
    ],
)
def test_bad_forms_are_refused_in_plain_words(
    tmp_path: Path, parts: list[bytes], status: int, field: str, words: str
) -> None:
    refused = refusal(body(part("token", TOKEN.encode()), *parts), tmp_path, size=65536)
    assert (refused.status, refused.field, refused.message) == (status, field, words)


def test_malformed_bodies_are_422_never_500(tmp_path: Path) -> None:
    cut = body(part("token", TOKEN.encode()), part("artifact", b"abc", "a"))[:-20]
    assert refusal(cut, tmp_path).message == "the form ended before its last part did"
    assert refusal(b"x" * 5000, tmp_path).message == "the body is not multipart/form-data"
    no_name = f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--".encode()
    assert refusal(no_name, tmp_path).message == "a part of the form has no field name"
    with pytest.raises(FormRefused) as caught:
        asyncio.run(read_form(chunked(b"", 1), "multipart/form-data", POLICY, tmp_path))
    assert caught.value.status == 422


def _zeros(total: int, chunk: int) -> Iterator[bytes]:
    block = b"\0" * chunk
    for _ in range(total // chunk):
        yield block


def test_memory_stays_flat_for_a_200_mb_body_in_process(tmp_path: Path) -> None:
    policy = FormPolicy(files={"artifact": 256 * MiB}, text=frozenset(), token=TOKEN)
    head = (
        part("token", TOKEN.encode())
        + (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="artifact"; filename="a"\r\n\r\n'
        ).encode()
    )
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()

    async def stream() -> AsyncIterator[bytes]:
        yield head
        for block in _zeros(200 * MiB, 64 * 1024):
            yield block
        yield tail

    reset_peak(os.getpid())
    before = vm(os.getpid(), "VmRSS")
    form = asyncio.run(read_form(stream(), CONTENT_TYPE, policy, tmp_path))
    grew = vm(os.getpid(), "VmHWM") - before
    assert form.files["artifact"].size == 200 * MiB
    assert grew < 16 * MiB, f"RSS grew by {grew / MiB:.1f} MiB"


def vm(pid: int, field: str) -> int:
    """A /proc/PID/status memory figure (VmRSS, VmHWM …) in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as lines:
        return next(int(x.split()[1]) * 1024 for x in lines if x.startswith(field + ":"))


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0)."""
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")
