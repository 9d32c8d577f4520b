"""Symbolic dimensions in uploads: a function exported with `export-fn --symbolic b=tokens`
(the batch of the tests' own transformer, `jax.export.symbolic_shape`) is accepted, lists
its dimension, and is run and compiled at the value each job gives it; a job without a
value, or with one for a dimension it lacks, is refused naming `params.dims.<name>`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import AUTH, FakeWorker, capabilities
from tests.workers.own_exports import MODEL, export_fn
from workers.export.dims import DimError, dims_problem, names, symbolic_arguments, value
from workers.files import FileCache
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio
OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def symbolic_forward(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, Any]]:
    """The own model's forward, its batch symbolic: (the artifact, export-fn's summary)."""
    folder = tmp_path_factory.mktemp("symbolic")
    args = [f"{MODEL}:forward", "--example", f"{MODEL}:forward_example"]
    done = export_fn([*args, "--symbolic", "b=tokens", "-o", "fwd.jaxexport"], folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return (folder / "fwd.jaxexport").read_bytes(), json.loads(done.stdout)


def test_jax_s_dimension_expressions_read_without_jax() -> None:
    assert names("2*b + 1") == {"b"} and value("2*b + 1", {"b": 8}) == 17
    assert value("floordiv(b, 2) * s", {"b": 9, "s": 3}) == 12 and value("b^2", {"b": 3}) == 9
    for bad in ('__import__("os")', "b.real", "'b'", "b ** 99", "f(b)"):
        with pytest.raises(DimError):
            value(bad, {"b": 2})
    with pytest.raises(DimError, match="no value for the dimension s"):
        value("b*s", {"b": 2})
    assert dims_problem(["b"], {}) == (
        "params.dims.b",
        "the artifact's shapes are symbolic in b: give each a value, e.g. "
        '"dims": {"b": 64} (--dim b=64)',
    )
    assert dims_problem(["b"], {"b": 1, "z": 2}) == (
        "params.dims.z",
        "the artifact has no dimension z (its dimensions: b)",
    )
    assert symbolic_arguments(["b=tokens,mask"]) == {"b": ["tokens", "mask"]}
    with pytest.raises(DimError, match="expected NAME=ARG"):
        symbolic_arguments(["b"])


async def run_as_worker(
    client: httpx.AsyncClient, files: FileCache, targets: list[str] | None = None
) -> dict[str, Any]:
    """Lease the next job, fetch its artifact, run it for real, report it; the job."""
    from workers.run.engine import run_job

    worker = FakeWorker(client, capabilities("cpu", targets=targets or []))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    sha = grant["spec"]["params"]["artifact"]
    got = await client.get(f"/api/v1/worker/files/{sha}", headers=AUTH)
    assert files.put(got.content) == sha
    result = run_job(JobSpec.model_validate(grant["spec"]), files_dir=files.directory)
    reply = await worker.finish(grant, **json.loads(result.model_dump_json()))
    assert reply.status_code == 200, reply.text
    job: dict[str, Any] = (await client.get(f"/api/v1/jobs/{grant['job_id']}")).json()
    return job


async def test_a_symbolic_upload_runs_and_compiles_at_each_job_s_value(
    bench_client: httpx.AsyncClient,
    symbolic_forward: tuple[bytes, dict[str, Any]],
    tmp_path: Path,
) -> None:
    data, summary = symbolic_forward
    assert summary["dims"] == {"b": 8}  # the example's batch
    up = await bench_client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=data, headers=OCTET
    )
    assert up.status_code == 201, up.text
    header = up.json()["header"]
    assert header["dimensions"] == ["b"] and "int32[b,16]" in header["in_avals"]
    sha = up.json()["sha256"]

    base = {"workload": "exported", "path": "jax-cpu", "params": {"artifact": sha}}
    missing = await bench_client.post("/api/v1/jobs", json=base)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["field"] == "params.dims.b"
    assert "symbolic in b: give each a value" in missing.json()["detail"][0]["message"]
    wrong = {**base, "params": {"artifact": sha, "dims": {"b": 2, "s": 4}}}
    refused = (await bench_client.post("/api/v1/jobs", json=wrong)).json()["detail"][0]
    assert refused["field"] == "params.dims.s" and "no dimension s" in refused["message"]

    files = FileCache(tmp_path / "files")
    ran = {**base, "params": {"artifact": sha, "dims": {"b": 3}}, "measure": {"samples": 3}}
    assert (await bench_client.post("/api/v1/jobs", json=ran)).status_code == 202
    job = await run_as_worker(bench_client, files)
    assert job["status"] == "done"
    tokens = next(i for i in job["run"]["inputs"] if i["name"] == "tokens")
    assert tokens["shape"] == [3, 16]  # the server's own record of the inputs, at b=3
    compiled = {
        "workload": "exported",
        "path": "jax-tpu",
        "target": "v6e:1x1",
        "params": {"artifact": sha, "dims": {"b": 512}},
    }
    assert (await bench_client.post("/api/v1/jobs", json=compiled)).status_code == 202
    job = await run_as_worker(bench_client, files, ["v6e:1x1"])
    assert job["status"] == "done" and job["run"]["target"]["memory"]["peak_bytes"] > 0
    assert "s32[512,16]" in job["run"]["artifacts"]["hlo"]
    run_page = (await bench_client.get(f"/runs/{job['id']}")).text
    assert '<h1 id="run-h"><code>forward</code> for <code>v6e:1x1</code>' in run_page
    assert "<title>forward for v6e:1x1 (compile only)" in run_page  # the function, named

    page = (await bench_client.get(f"/artifacts/{sha}")).text
    assert re.search(r"symbolic dimensions</th><td class=\"dims\"><code>b</code>", page)
    assert 'name="dim.b"' in page
    assert "compiled with <code>b=512</code>" in page  # the fit row names its value


async def test_the_page_s_compile_needs_a_value_and_names_it(
    bench_client: httpx.AsyncClient, symbolic_forward: tuple[bytes, dict[str, Any]]
) -> None:
    data, _ = symbolic_forward
    up = await bench_client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=data, headers=OCTET
    )
    sha = up.json()["sha256"]
    form = {"content-type": "application/x-www-form-urlencoded"}
    refused = await bench_client.post(
        f"/artifacts/{sha}/compile", content="target=v6e%3A1x1", headers=form
    )
    assert refused.status_code == 422
    assert "params.dims.b: give the dimension b a value" in refused.text
    queued = await bench_client.post(
        f"/artifacts/{sha}/compile", content="target=v6e%3A1x1&dim.b=64", headers=form
    )
    assert queued.status_code == 303
    jobs = (await bench_client.get("/api/v1/jobs")).json()["data"]
    assert jobs[0]["params"]["dims"] == {"b": 64}


async def test_a_reference_for_a_symbolic_upload_is_read_at_the_jobs_values(
    bench_client: httpx.AsyncClient, symbolic_forward: tuple[bytes, dict[str, Any]]
) -> None:
    """A reference whose results have the symbolic batch in their shapes (found by the
    device tier: the server answered 500) is checked at the job's `dims`: right shapes are
    admitted, wrong ones refused naming the reference, a job without dims naming them."""
    import io

    import numpy as np

    data, _ = symbolic_forward
    up = await bench_client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=data, headers=OCTET
    )
    sha = up.json()["sha256"]
    out = re.findall(r"\[(.*)\]", up.json()["header"]["out_avals"][0])[0].split(",")
    shape = [int(d) if d.isdigit() else 4 for d in out]  # b at the job's value, 4

    async def stored(shape_: list[int]) -> str:
        buffer = io.BytesIO()
        np.savez(buffer, out0=np.zeros(shape_, np.float32))
        answer = await bench_client.post(
            "/api/v1/artifacts", params={"kind": "npz"}, content=buffer.getvalue(), headers=OCTET
        )
        assert answer.status_code == 201, answer.text
        digest: str = answer.json()["sha256"]
        return digest

    right = await stored(shape)
    params = {"artifact": sha, "dims": {"b": 4}, "reference": right}
    job = {"workload": "exported", "path": "jax-cpu", "params": params}
    assert (await bench_client.post("/api/v1/jobs", json=job)).status_code == 202
    wrong = await stored([5, *shape[1:]])
    refused = await bench_client.post(
        "/api/v1/jobs", json={**job, "params": {**params, "reference": wrong}}
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["field"] == "params.reference"
    undimmed = {"artifact": sha, "reference": right}
    missing = await bench_client.post("/api/v1/jobs", json={**job, "params": undimmed})
    assert missing.status_code == 422, missing.text
