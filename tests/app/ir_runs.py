"""Real runs for the IR-view tests: made by the engine on the CPU, posted by a fake worker."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.bench_fakes import FakeWorker

ATTENTION: dict[str, Any] = {
    "workload": "attention",
    "path": "jax-cpu",
    "params": {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32, "dtype": "float32"},
    "measure": {"samples": 3},
}


def attention_result() -> dict[str, Any]:
    """A real attention run (trace, lower, compile, a few samples) as JSON."""
    from workers.engine import run_job
    from workers.protocol import JobSpec

    return run_job(JobSpec.model_validate(ATTENTION)).model_dump(mode="json")


async def post_run(client: httpx.AsyncClient, result: dict[str, Any]) -> str:
    """Queue `result`'s job, lease it with a fake worker, post `result`; the job's id."""
    queued = await client.post("/api/v1/jobs", json=result["job"])
    assert queued.status_code == 202, queued.text
    worker = FakeWorker(client)
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    posted = await worker.finish(grant, **{**result, "job": grant["spec"]})
    assert posted.status_code == 200, posted.text
    job_id: str = grant["job_id"]
    return job_id
