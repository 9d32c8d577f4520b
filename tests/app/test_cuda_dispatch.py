"""A `cuda` job through the real API in-process: a compile-only job is leased to a worker
with cuda_compile; one that executes waits, visibly, for a worker with cuda_run and never
runs elsewhere. The run page of a compile-only run says that execution needs a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities
from tests.dependencies import require
from workers.cuda.env import detect_tools
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

COMPILE_ONLY: dict[str, Any] = {
    "workload": "matmul",
    "path": "cuda",
    "params": {"m": 64, "n": 48, "k": 32, "kernel": "tiled"},
    "stages": ["compile"],
}
EXECUTE: dict[str, Any] = {**COMPILE_ONLY, "stages": ["compile", "execute"]}
CPU_JOB: dict[str, Any] = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 16}}


def cpu_with_nvcc() -> dict[str, Any]:
    """A CPU worker that found a CUDA compiler: it offers cuda for compiling only."""
    return capabilities("cpu", paths=["jax-cpu", "cuda"], cuda_compile=True, cuda_run=False)


def gpu_worker() -> dict[str, Any]:
    return capabilities("gpu", paths=["jax-gpu", "cuda"], cuda_compile=True, cuda_run=True)


async def submit(client: httpx.AsyncClient, spec: dict[str, Any]) -> str:
    r = await client.post("/api/v1/jobs", json=spec)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


async def job_of(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


async def test_an_execute_job_waits_for_cuda_run_and_never_runs_elsewhere(
    bench_client: httpx.AsyncClient,
) -> None:
    compiler_only = FakeWorker(bench_client, cpu_with_nvcc())
    await compiler_only.register()
    waiting = await submit(bench_client, EXECUTE)
    assert await compiler_only.lease() is None
    queued = await job_of(bench_client, waiting)
    assert queued["status"] == "queued"
    assert queued["reason"].startswith("no worker for cuda (compile and execute) is connected")
    assert "cuda_run is false" in queued["reason"]
    # /workers says the same: this worker offers cuda for compiling only.
    listed = (await bench_client.get("/workers")).text
    assert "<code>cuda</code> (compile only)" in listed
    # The same worker still takes the work it can do; the cuda job keeps waiting.
    other = await submit(bench_client, CPU_JOB)
    grant = await compiler_only.lease()
    assert grant is not None and grant["job_id"] == other
    assert (await job_of(bench_client, waiting))["status"] == "queued"
    # A worker whose CuPy sees a GPU takes it.
    gpu = FakeWorker(bench_client, gpu_worker())
    await gpu.register()
    grant = await gpu.lease()
    assert grant is not None and grant["job_id"] == waiting
    assert grant["spec"]["path"] == "cuda" and "execute" in grant["spec"]["stages"]


async def test_a_compile_only_job_needs_cuda_compile(bench_client: httpx.AsyncClient) -> None:
    plain = FakeWorker(bench_client, capabilities("cpu"))  # no CUDA compiler found
    await plain.register()
    job_id = await submit(bench_client, COMPILE_ONLY)
    assert await plain.lease() is None
    reason = (await job_of(bench_client, job_id))["reason"]
    assert reason.startswith("no worker for cuda (compile only) is connected")
    assert "does not offer the cuda path" in reason
    compiler_only = FakeWorker(bench_client, cpu_with_nvcc())
    await compiler_only.register()
    grant = await compiler_only.lease()
    assert grant is not None and grant["job_id"] == job_id


async def test_a_compile_only_run_shows_ptx_sass_resources_and_the_gpu_note(
    bench_client: httpx.AsyncClient, tmp_path: Path
) -> None:
    tools = detect_tools()
    if not tools.can_compile:
        require("cuda-compiler", f"no CUDA compiler (nvcc or NVRTC): {tools.describe()}")
    from workers.run.engine import run_job

    worker = FakeWorker(bench_client, cpu_with_nvcc())
    await worker.register()
    job_id = await submit(bench_client, COMPILE_ONLY)
    grant = await worker.lease()
    assert grant is not None and grant["job_id"] == job_id
    run = run_job(JobSpec.model_validate(grant["spec"]), cache_dir=tmp_path / "jax")
    posted = await worker.finish(grant, **run.model_dump(mode="json"))
    assert posted.status_code == 200, posted.text
    done = await job_of(bench_client, job_id)
    assert done["status"] == "done"
    assert done["run"]["kernel_resources"][0]["name"] == "matmul_tiled_f32"
    assert ".entry matmul_tiled_f32(" in done["run"]["artifacts"]["ptx"]
    page = await bench_client.get(f"/runs/{job_id}")
    assert page.status_code == 200
    html = page.text
    assert "Compiled only: execution needs an NVIDIA GPU." in html
    assert "Achieved rates" not in html  # nothing was timed, so no rate is shown
    # The page speaks of building a kernel, not of tracing; its one verdict says why.
    assert "Trace, lower and compile" not in html and "nothing is traced" in html
    assert 'id="verdict"' in html and "Compiled, not executed" in html
    assert "<code>matmul_tiled_f32</code>" in html and "registers / thread" in html
    assert f"/runs/{job_id}/ir/ptx" in html and f"/runs/{job_id}/ir/sass" in html
    sass = await bench_client.get(f"/runs/{job_id}/ir/sass")
    assert sass.status_code == 200 and "matmul_tiled_f32" in sass.text


async def test_the_run_form_queues_a_compile_only_cuda_job(bench_client: httpx.AsyncClient) -> None:
    page = await bench_client.get("/runs/new?workload=matmul&path=cuda")
    assert page.status_code == 200
    assert '<option value="cuda" selected>' in page.text and 'name="param.kernel"' in page.text
    r = await bench_client.post(
        "/runs",
        data={
            "workload": "matmul",
            "path": "cuda",
            "param.m": "64",
            "param.kernel": "naive",
            "stages": ["compile"],
        },
    )
    assert r.status_code == 303, r.text
    job = await job_of(bench_client, r.headers["location"].rsplit("/", 1)[1])
    assert job["path"] == "cuda" and job["stages"] == ["compile"]
    assert job["params"]["kernel"] == "naive"
    assert job["reason"].startswith("no worker for cuda (compile only)")
