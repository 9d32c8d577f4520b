"""Uploads, in-process: an .npz member with a negative or overflowing dimension, or a name
that only matches up to a final newline, is refused at upload with 422 naming the member
and the dimension; a file that retention would remove at once answers 507 with the
reason; the upload form asks for its token first.

Before: `arg1` declaring -1073741824 cancelled a 4 GiB `arg0` (201, then 202, and a
runner reached 4.6 GB); `^…\\.npy$` accepted "arg0.npy\\n"; a file stored and evicted at
once answered 201 and then 404."""

from __future__ import annotations

import hashlib
from html import unescape
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.test_artifacts import export
from tests.workers.test_npz import archive, header, npy

pytestmark = pytest.mark.anyio

OCTET = {"Content-Type": "application/octet-stream"}


async def upload_npz(client: httpx.AsyncClient, data: bytes) -> httpx.Response:
    return await client.post(
        "/api/v1/artifacts", params={"kind": "npz"}, content=data, headers=OCTET
    )


async def test_a_negative_dimension_is_refused_naming_member_and_dimension(
    client: httpx.AsyncClient,
) -> None:
    four_gib = npy(header("<f4", (2**30,)))  # declares 4 GiB and holds none of it
    cancel = npy(header("<f4", (-(2**30),)))
    r = await upload_npz(client, archive([("arg1.npy", cancel), ("arg0.npy", four_gib)]).getvalue())
    assert r.status_code == 422
    (problem,) = r.json()["detail"]
    assert problem["field"] == "body"
    assert problem["message"] == (
        "npz: arg1: dimension 0 is -1,073,741,824, and a size cannot be negative"
    )


async def test_a_size_that_overflows_is_refused_naming_its_dimension(
    client: httpx.AsyncClient,
) -> None:
    r = await upload_npz(
        client, archive([("out0.npy", npy(header("<f8", (2**32, 2**31))))]).getvalue()
    )
    assert r.status_code == 422
    message = r.json()["detail"][0]["message"]
    assert message == (
        "npz: out0: dimension 1 (2,147,483,648) makes the array's size overflow "
        "(over 2**63 - 1 bytes)"
    )


async def test_member_names_are_matched_whole(client: httpx.AsyncClient) -> None:
    member = npy(header("<f4", (2,)), b"\0" * 8)
    r = await upload_npz(client, archive([("arg0.npy\n", member)]).getvalue())
    assert r.status_code == 422
    assert "'arg0.npy\\n': an .npz holds only arrays named arg0" in r.json()["detail"][0]["message"]


async def test_a_file_that_would_be_removed_at_once_answers_507(tmp_path: Path) -> None:
    function = export(["cpu"])
    cap = len(function) + 4096
    settings = Settings(DB=tmp_path / "db.sqlite3", FILES_MAX_BYTES=cap)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        artifact = await client.post("/api/v1/artifacts", content=function, headers=OCTET)
        assert artifact.status_code == 201
        sha = artifact.json()["sha256"]
        job = {"workload": "exported", "path": "jax-cpu", "params": {"artifact": sha}}
        assert (await client.post("/api/v1/jobs", json=job)).status_code == 202  # it waits
        member = npy(header("|u1", (8192,)), bytes(8192))
        r = await upload_npz(client, archive([("arg0.npy", member)]).getvalue())
        assert r.status_code == 507
        detail = r.json()["detail"]
        assert (
            f"the server keeps {len(function):,} bytes of files that queued and running" in detail
        )
        assert "would be removed at once: try again when they have run" in detail
        assert (await client.get(f"/api/v1/artifacts/{sha}")).status_code == 200
        small = npy(header("|u1", (16,)), bytes(16))
        assert (
            await upload_npz(client, archive([("arg0.npy", small)]).getvalue())
        ).status_code == 201


async def test_the_upload_form_asks_for_its_token_first(tmp_path: Path) -> None:
    settings = Settings(DB=tmp_path / "db.sqlite3", SUBMIT_TOKEN="a-submission-token-0123")
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        page = (await client.get("/artifacts/new")).text
        form = page[page.index('<form class="panel upload-form"') :]
        names = [form.split(f'name="{n}"')[0].count("<input") for n in ("token", "artifact")]
        assert names[0] < names[1]  # the token's input comes before the file's
        files = {"artifact": ("fn.jaxexport", export(["cpu"]), "application/octet-stream")}
        wrong = await client.post("/artifacts", data={"token": "nope"}, files=files)
        assert wrong.status_code == 401 and "needs its submission token" in wrong.text
        right = await client.post(
            "/artifacts", data={"token": "a-submission-token-0123"}, files=files
        )
        assert right.status_code == 303


def form_files(function: bytes, inputs: bytes) -> dict[str, tuple[str, bytes, str]]:
    kind = "application/octet-stream"
    return {"artifact": ("f.jaxexport", function, kind), "inputs": ("in.npz", inputs, kind)}


async def test_the_upload_form_never_evicts_the_artifact_it_just_stored(tmp_path: Path) -> None:
    function = export(["cpu"])
    inputs = archive([("arg0.npy", npy(header("|u1", (43_000,)), bytes(43_000)))]).getvalue()
    cap = 45_000  # room for either file, not for both
    assert len(function) < cap and len(inputs) < cap < len(function) + len(inputs)
    settings = Settings(DB=tmp_path / "db.sqlite3", FILES_MAX_BYTES=cap)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.post("/artifacts", files=form_files(function, inputs))
        assert r.status_code == 507, (r.status_code, r.headers.get("location"))
        text = unescape(r.text)
        together = len(function) + len(inputs)
        assert f"the form's files come to {together:,} bytes together" in text
        assert f"the server's limit for files is {cap:,} bytes" in text
        sha = hashlib.sha256(function).hexdigest()
        assert (await client.get(f"/api/v1/artifacts/{sha}")).status_code == 404  # none kept


async def test_the_upload_form_keeps_its_files_and_older_ones_make_room(tmp_path: Path) -> None:
    function = export(["cpu"])
    inputs = archive([("arg0.npy", npy(header("|u1", (43_000,)), bytes(43_000)))]).getvalue()
    older = archive([("arg0.npy", npy(header("|u1", (20_000,)), bytes(20_000)))]).getvalue()
    cap = len(function) + len(inputs) + 1000  # room for the form's files, not for the older too
    settings = Settings(DB=tmp_path / "db.sqlite3", FILES_MAX_BYTES=cap)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        kept = await upload_npz(client, older)
        assert kept.status_code == 201
        r = await client.post("/artifacts", files=form_files(function, inputs))
        assert r.status_code == 303, r.text
        assert (await client.get(r.headers["location"])).status_code == 200
        gone = await client.get(f"/api/v1/artifacts/{kept.json()['sha256']}")
        assert gone.status_code == 404  # the least recently used file made room
