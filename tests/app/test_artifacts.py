"""Uploading exported functions and .npz archives, and running them through the server:
size, corruption and platform refusals; a real run by a worker played in this process."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.settings import Settings
from tests.app.bench_fakes import AUTH, FakeWorker
from workers.cli.export_fn import export_function
from workers.files import FileCache
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

OCTET = {"Content-Type": "application/octet-stream"}


def forward(x: Any, w: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x @ w) + 1.0


def export(platforms: list[str]) -> bytes:
    data, _ = export_function(forward, [("float32", (8, 16)), ("float32", (16, 4))], platforms)
    return data


@pytest.fixture(scope="module")
def cpu_artifact() -> bytes:
    return export(["cpu"])


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


async def upload(client: httpx.AsyncClient, data: bytes, kind: str = "exported") -> httpx.Response:
    return await client.post(
        "/api/v1/artifacts", params={"kind": kind}, content=data, headers=OCTET
    )


async def run_one(client: httpx.AsyncClient, files: FileCache) -> dict[str, Any]:
    """Be a worker for one job: lease it, fetch its files, run it for real, report it."""
    from workers.run.engine import run_job

    worker = FakeWorker(client)
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    for name in ("artifact", "inputs", "reference"):
        sha = grant["spec"]["params"].get(name)
        if sha:
            got = await client.get(f"/api/v1/worker/files/{sha}", headers=AUTH)
            assert got.status_code == 200
            assert files.put(got.content) == sha
    result = run_job(JobSpec.model_validate(grant["spec"]), files_dir=files.directory)
    body = {
        "worker_id": worker.id,
        "job_id": grant["job_id"],
        "attempt": grant["attempt"],
        "result": json.loads(result.model_dump_json()),
        "run_seconds": 0.1,
    }
    reply = await worker.post("result", body)
    assert reply.status_code == 200, reply.text
    job: dict[str, Any] = (await client.get(f"/api/v1/jobs/{grant['job_id']}")).json()
    return job


async def test_an_upload_is_described_and_stored_once(
    bench_client: httpx.AsyncClient, cpu_artifact: bytes
) -> None:
    first = await upload(bench_client, cpu_artifact)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["kind"] == "exported" and body["size"] == len(cpu_artifact)
    assert body["header"]["platforms"] == ["cpu"]
    assert body["header"]["in_avals"] == ["float32[8,16]", "float32[16,4]"]
    assert body["header"]["out_avals"] == ["float32[8,4]"]
    again = await upload(bench_client, cpu_artifact)
    assert again.json()["sha256"] == body["sha256"]
    info = await bench_client.get(body["links"]["self"])
    assert info.status_code == 200 and info.json()["header"] == body["header"]
    page = await bench_client.get(f"/artifacts/{body['sha256']}")
    assert page.status_code == 200 and "float32[8,16]" in page.text and "exported for" in page.text

    archive = await upload(bench_client, npz(out0=np.zeros((8, 4), np.float32)), "npz")
    assert archive.status_code == 201 and archive.json()["arrays"] == ["out0: float32[8,4]"]


async def test_oversized_corrupted_and_unusable_uploads_are_refused(
    tmp_path: Path, cpu_artifact: bytes
) -> None:
    from app.main import create_app

    settings = Settings(DB=tmp_path / "b.sqlite3", UPLOAD_MAX_BYTES=1024)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        big = await upload(client, cpu_artifact)
        assert big.status_code == 413 and "over 1,024 bytes" in big.json()["detail"]

        small = cpu_artifact[:900]  # truncated: its module runs past the end
        cut = await upload(client, small)
        assert cut.status_code == 422
        assert cut.json()["detail"][0]["field"] == "body"
        assert "corrupted" in cut.json()["detail"][0]["message"]

        garbage = await upload(client, b"this is not a function" * 10)
        assert garbage.status_code == 422 and "exported:" in garbage.json()["detail"][0]["message"]

        pickled = io.BytesIO()
        np.savez(pickled, arg0=np.array([{"a": 1}], dtype=object))
        refused = await upload(client, pickled.getvalue(), "npz")
        assert refused.status_code == 422 and "Python objects" in refused.text

        wrong_type = await client.post(
            "/api/v1/artifacts", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert wrong_type.status_code == 415


async def test_a_job_naming_files_is_checked_before_it_is_queued(
    bench_client: httpx.AsyncClient, cpu_artifact: bytes
) -> None:
    tpu = (await upload(bench_client, export(["tpu"]))).json()["sha256"]
    archive = (await upload(bench_client, npz(out0=np.ones(3)), "npz")).json()["sha256"]
    cases = [
        ({"artifact": "a" * 64}, "no uploaded file aaaaaaaaaaaa"),
        ({"artifact": tpu}, "exported for tpu only; path jax-cpu needs cpu"),
        ({"artifact": archive}, "is not of kind exported"),
        ({"artifact": "not-a-digest"}, "artifact must be a SHA-256: 64 lowercase hexadecimal"),
    ]
    for params, message in cases:
        r = await bench_client.post(
            "/api/v1/jobs", json={"workload": "exported", "path": "jax-cpu", "params": params}
        )
        assert r.status_code == 422, r.text
        problem = r.json()["detail"][0]
        assert problem["field"] == "params.artifact" and message in problem["message"]


async def test_workers_fetch_files_with_their_token_only(
    bench_client: httpx.AsyncClient, cpu_artifact: bytes
) -> None:
    sha = (await upload(bench_client, cpu_artifact)).json()["sha256"]
    assert (await bench_client.get(f"/api/v1/worker/files/{sha}")).status_code == 401
    got = await bench_client.get(f"/api/v1/worker/files/{sha}", headers=AUTH)
    assert got.status_code == 200 and got.content == cpu_artifact
    none = await bench_client.get(f"/api/v1/worker/files/{'b' * 64}", headers=AUTH)
    assert none.status_code == 404


async def test_an_uploaded_function_runs_on_the_cpu_path_and_is_checked(
    bench_client: httpx.AsyncClient, cpu_artifact: bytes, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16), dtype=np.float32)
    w = rng.standard_normal((16, 4), dtype=np.float32)
    expected = np.tanh(x.astype(np.float64) @ w) + 1.0
    artifact = (await upload(bench_client, cpu_artifact)).json()["sha256"]
    inputs = (await upload(bench_client, npz(arg0=x, arg1=w), "npz")).json()["sha256"]
    reference = (await upload(bench_client, npz(out0=expected), "npz")).json()["sha256"]
    spec = {
        "workload": "exported",
        "path": "jax-cpu",
        "params": {"artifact": artifact, "inputs": inputs, "reference": reference},
        "measure": {"samples": 7},
    }
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    job = await run_one(bench_client, FileCache(tmp_path / "worker-files"))
    assert job["status"] == "done", job
    run = job["run"]
    assert run["valid"] and run["correctness"]["passed"] and run["correctness"]["checked"]
    assert run["correctness"]["reference"] == "uploaded reference outputs"
    assert len(run["measurements"][0]["samples_s"]) == 7
    stablehlo = await bench_client.get(run["artifact_links"]["stablehlo"])
    assert "stablehlo.tanh" in stablehlo.text
    assert (await bench_client.get(run["artifact_links"]["hlo"])).text.startswith("HloModule")
    page = await bench_client.get(f"/runs/{job['id']}")
    assert "Correct within tolerance" in page.text and "uploaded reference outputs" in page.text

    # The same function without a reference: valid timings, and the page says plainly
    # that the output was not checked.
    bare = {**spec, "params": {"artifact": artifact}}
    assert (await bench_client.post("/api/v1/jobs", json=bare)).status_code == 202
    unchecked = await run_one(bench_client, FileCache(tmp_path / "worker-files"))
    assert unchecked["run"]["valid"] and unchecked["run"]["correctness"]["checked"] is False
    page = await bench_client.get(f"/runs/{unchecked['id']}")
    assert (
        "Output unchecked" in page.text
        and "failed" not in page.text.lower().split("<main")[1][:400]
    )


async def test_the_upload_page_stores_files_and_runs_them(
    bench_client: httpx.AsyncClient, cpu_artifact: bytes
) -> None:
    form = await bench_client.get("/artifacts/new")
    assert form.status_code == 200 and 'enctype="multipart/form-data"' in form.text
    files = {
        "artifact": ("fn.jaxexport", cpu_artifact, "application/octet-stream"),
        "reference": (
            "ref.npz",
            npz(out0=np.zeros((8, 4), np.float32)),
            "application/octet-stream",
        ),
    }
    sent = await bench_client.post("/artifacts", files=files)
    assert sent.status_code == 303
    page = await bench_client.get(sent.headers["location"])
    assert (
        page.status_code == 200 and "cpu" in page.text and "reference" in sent.headers["location"]
    )
    sha = sent.headers["location"].split("/artifacts/")[1].split("?")[0]
    ran = await bench_client.post(
        f"/artifacts/{sha}/runs", data={"path": "jax-cpu", "samples": "5", "mode": "latency"}
    )
    assert ran.status_code == 303 and ran.headers["location"].startswith("/runs/")

    broken = await bench_client.post(
        "/artifacts", files={"artifact": ("x.jaxexport", b"not an export at all", "x/y")}
    )
    assert broken.status_code == 422 and 'id="e-artifact">corrupted: ' in broken.text
