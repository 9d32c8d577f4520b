"""Numbers JSON cannot hold and structures nested past the limit, on every API that reads
JSON by hand: refused with a 422 naming where, before anything is queued or stored."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import AUTH, MATMUL, FakeWorker, run_result

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


def with_huge(body: dict[str, Any]) -> str:
    """`body` as JSON text with every "HUGE" string written as the number 1e999, which
    Python's json module would read as infinity."""
    return json.dumps(body).replace('"HUGE"', "1e999").replace('"-HUGE"', "-1e999")


async def nothing_queued_or_stored(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/v1/jobs")).json()["count"] == 0
    assert (await client.get("/api/v1/matrices")).json()["count"] == 0
    assert (await client.get("/healthz")).status_code == 200


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (["HUGE", 1.0], "axis.values.0"),
        ([1.0, "-HUGE"], "axis.values.1"),
        (["HUGE"], "axis.values.0"),
    ],
)
async def test_a_matrix_axis_value_too_large_for_a_float_is_refused_and_nothing_is_queued(
    bench_client: httpx.AsyncClient, values: list[Any], field: str
) -> None:
    body = {"workload": "ffi", "axis": {"name": "scale", "values": values}, "paths": ["jax-cpu"]}
    r = await bench_client.post("/api/v1/matrices", content=with_huge(body), headers=JSON)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert any(p["field"] == field and "finite" in p["message"] for p in problems), problems
    await nothing_queued_or_stored(bench_client)


async def test_a_job_parameter_too_large_for_a_float_is_refused_naming_it(
    bench_client: httpx.AsyncClient,
) -> None:
    body = {**MATMUL, "measure": {"samples": 5, "max_seconds": "HUGE"}}
    r = await bench_client.post("/api/v1/jobs", content=with_huge(body), headers=JSON)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert problems[0]["field"] == "measure.max_seconds", problems
    assert "finite" in problems[0]["message"]
    await nothing_queued_or_stored(bench_client)


async def test_a_worker_sample_too_large_for_a_float_is_refused_and_the_run_not_stored(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=MATMUL)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    result = run_result(grant["spec"])
    result["measurements"][0]["samples_s"] = [0.001, "HUGE", 0.002]
    body = {
        "worker_id": worker.id,
        "job_id": job_id,
        "lease_id": grant["lease_id"],
        "result": result,
    }
    r = await bench_client.post(
        "/api/v1/worker/result", content=with_huge(body), headers={**AUTH, **JSON}
    )
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert problems[0]["field"] == "result.measurements.0.samples_s.1", problems
    assert "finite" in problems[0]["message"]
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["status"] == "running" and job["run"] is None
    assert (await bench_client.get(f"/runs/{job_id}")).status_code == 200
    # The worker can still post the run it measured.
    assert (await worker.finish(grant)).status_code == 200


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def test_a_worker_result_nested_past_the_limit_is_refused_naming_the_limit(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=MATMUL)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    r = await worker.finish(grant, extra={"deep": nested(900)})
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert problems[0]["field"] == "body", problems
    assert "nested more than 64 levels" in problems[0]["message"]
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["status"] == "running"


@pytest.mark.parametrize("depth", [70, 5000])
async def test_a_submission_nested_past_the_limit_is_refused_naming_the_limit(
    bench_client: httpx.AsyncClient, depth: int
) -> None:
    text = '{"workload": "matmul", "params": ' + "[" * depth + "]" * depth + "}"
    r = await bench_client.post("/api/v1/jobs", content=text, headers=JSON)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert problems == [
        {"field": "body", "message": "nested more than 64 levels deep (at most 64)"}
    ], problems
    await nothing_queued_or_stored(bench_client)
