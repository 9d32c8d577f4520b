"""The public job API: strict submission, reads, listing, cancel, limits."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.settings import Settings

pytestmark = pytest.mark.anyio

JOB: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "dtype": "float32"},
    "measure": {"samples": 5},
}


def job(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(JOB))
    out.update(changes)
    return out


async def post_raw(
    client: httpx.AsyncClient, body: bytes | str, content_type: str = "application/json"
) -> httpx.Response:
    data = body.encode() if isinstance(body, str) else body
    return await client.post("/api/v1/jobs", content=data, headers={"content-type": content_type})


async def assert_healthy(client: httpx.AsyncClient) -> None:
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.post("/api/v1/jobs", json=JOB)).status_code == 202


async def test_submit_queues_a_job_and_it_can_be_read(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post("/api/v1/jobs", json=job(stages=["compile", "execute"]))
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "queued"
    assert body["attempts"] == 0 and body["run"] is None
    assert r.headers["location"] == body["links"]["self"] == f"/api/v1/jobs/{body['id']}"
    got = (await bench_client.get(body["links"]["self"])).json()
    assert got["id"] == body["id"]
    assert got["params"] == JOB["params"]
    assert got["measure"]["samples"] == 5
    # No worker is connected: the job says why it waits.
    assert got["reason"] == "no worker for jax-cpu is connected"
    head = await bench_client.head(body["links"]["self"])
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ('{"workload": "matmul", "params": {"m": NaN}}', "body", "NaN"),
        ('{"workload": "matmul", "params": {"m": Infinity}}', "body", "Infinity"),
        ('{"workload": "matmul", "params": {"m": -Infinity}}', "body", "Infinity"),
        ('{"workload": "matmul", "params": {"m": 1', "body", "invalid JSON"),
        ('{"workload": "matmul", "workload": "matmul"}', "body", "duplicate"),
        ("[1, 2]", "body", "object"),
        ('{"workload": "matmul", "params": {"m": true}}', "params.m", "integer"),
        ('{"workload": "matmul", "params": {"m": "8"}}', "params.m", "integer"),
        ('{"workload": "matmul", "params": {"m": 8.5}}', "params.m", "integer"),
        ('{"workload": "matmul", "params": {"m": 0}}', "params.m", "16384"),
        ('{"workload": "matmul", "params": {"m": 99999999}}', "params.m", "16384"),
        ('{"workload": "matmul", "params": {"mm": 8}}', "params.mm", "unknown field"),
        ('{"workload": "matmul", "colour": "red"}', "colour", "unknown field"),
        ('{"workload": "nope"}', "workload", "unknown workload"),
        ('{"workload": "matmul", "path": "jax-fpga"}', "path", ""),
        ('{"workload": "matmul", "measure": {"samples": 0}}', "measure.samples", ""),
        ('{"workload": "matmul", "measure": {"samples": true}}', "measure.samples", ""),
        ('{"workload": "matmul", "measure": {"cache": "lukewarm"}}', "measure.cache", ""),
        ('{"workload": "matmul", "stages": []}', "stages", ""),
        ('{"workload": "matmul", "stages": ["compile", "compile"]}', "stages", "twice"),
        ('{"params": {}}', "workload", "required"),
    ],
)
async def test_malformed_submissions_name_the_field(
    bench_client: httpx.AsyncClient, body: str, field: str, words: str
) -> None:
    r = await post_raw(bench_client, body)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert any(p["field"] == field and words in p["message"] for p in problems), problems
    await assert_healthy(bench_client)


async def test_errors_do_not_echo_large_input(bench_client: httpx.AsyncClient) -> None:
    long_key = "k" * 5000
    r = await bench_client.post("/api/v1/jobs", json=job(params={long_key: 1}))
    assert r.status_code == 422
    assert len(r.text) < 1000
    r = await bench_client.post("/api/v1/jobs", json=job(workload="x" * 60, params={}))
    assert r.status_code == 422
    assert "x" * 60 not in r.text


async def test_oversized_inputs_are_refused_before_queueing(
    bench_client: httpx.AsyncClient,
) -> None:
    r = await bench_client.post(
        "/api/v1/jobs", json=job(params={"m": 16384, "n": 16384, "k": 16384})
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "params"


async def test_huge_body_is_413_and_other_types_415(bench_client: httpx.AsyncClient) -> None:
    r = await post_raw(bench_client, '{"workload": "matmul", "pad": "' + "x" * 200_000 + '"}')
    assert r.status_code == 413
    r = await post_raw(bench_client, "workload=matmul", "application/x-www-form-urlencoded")
    assert r.status_code == 415
    r = await post_raw(bench_client, json.dumps(JOB), "text/plain")
    assert r.status_code == 415
    r = await post_raw(bench_client, json.dumps(JOB), "application/json; charset=utf-8")
    assert r.status_code == 202
    await assert_healthy(bench_client)


async def test_path_and_stage_must_suit_the_workload(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post("/api/v1/jobs", json=job(stages=["scale"]))
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "stages"


async def test_submission_token_is_required_when_set(bench_settings: Settings) -> None:
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"SUBMIT_TOKEN": "s3cret-submission-token"}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        assert (await c.post("/api/v1/jobs", json=JOB)).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        r = await c.post("/api/v1/jobs", json=JOB, headers=bad)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret-submission-token"}
        r = await c.post("/api/v1/jobs", json=JOB, headers=good)
        assert r.status_code == 202
        # Reading stays open; cancelling needs the token too.
        assert (await c.get(r.json()["links"]["self"])).status_code == 200
        assert (await c.post(r.json()["links"]["cancel"])).status_code == 401


async def test_queue_bound_gives_429_with_retry_after(bench_settings: Settings) -> None:
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"MAX_QUEUE": 2}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        for _ in range(2):
            assert (await c.post("/api/v1/jobs", json=JOB)).status_code == 202
        r = await c.post("/api/v1/jobs", json=JOB)
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) > 0
        assert "queue is full" in r.json()["detail"]


async def test_submission_rate_per_client_gives_429(bench_settings: Settings) -> None:
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"SUBMIT_RATE": 3}))
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        for _ in range(3):
            assert (await c.post("/api/v1/jobs", json=JOB)).status_code == 202
        r = await c.post("/api/v1/jobs", json=JOB)
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) in range(1, 61)
    other = httpx.ASGITransport(app=app, client=("10.0.0.2", 1234))
    async with httpx.AsyncClient(transport=other, base_url="http://t") as c:
        assert (await c.post("/api/v1/jobs", json=JOB)).status_code == 202


async def test_list_filters_and_counts(bench_client: httpx.AsyncClient) -> None:
    ids = []
    for params in ({"m": 8}, {"m": 16}):
        r = await bench_client.post("/api/v1/jobs", json=job(params=params))
        ids.append(r.json()["id"])
    small = {"workload": "elementwise", "params": {"n": 1024}}
    await bench_client.post("/api/v1/jobs", json=small)
    r = await bench_client.get("/api/v1/jobs", params={"workload": "matmul"})
    body = r.json()
    assert body["count"] == 2 and [j["id"] for j in body["data"]] == ids[::-1]
    r = await bench_client.get("/api/v1/jobs", params={"limit": 1})
    assert r.json()["count"] == 3 and len(r.json()["data"]) == 1
    r = await bench_client.get("/api/v1/jobs", params={"status": "done"})
    assert r.json() == {"data": [], "count": 0}
    r = await bench_client.get("/api/v1/jobs", params={"path": "jax-fpga"})
    assert r.status_code == 422
    assert (await bench_client.head("/api/v1/jobs")).status_code == 200


async def test_cancel_a_queued_job(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post("/api/v1/jobs", json=JOB)
    links = r.json()["links"]
    r = await bench_client.post(links["cancel"])
    assert r.status_code == 200
    assert r.json()["status"] == "cancelled"
    assert r.json()["reason"] == "cancelled on request"
    again = await bench_client.post(links["cancel"])
    assert again.status_code == 409


async def test_unknown_job_and_artifact_are_404(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.get("/api/v1/jobs/nope")
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert (await bench_client.get("/api/v1/jobs/nope/events")).status_code == 404
    job_id = (await bench_client.post("/api/v1/jobs", json=JOB)).json()["id"]
    r = await bench_client.get(f"/api/v1/jobs/{job_id}/artifacts/hlo")
    assert r.status_code == 404


async def test_workloads_are_listed_with_their_schemas(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.get("/api/v1/workloads")
    body = r.json()
    assert body["count"] == len(body["data"]) >= 1
    matmul = next(w for w in body["data"] if w["id"] == "matmul")
    assert "m" in matmul["params_schema"]["properties"]
    assert (await bench_client.head("/api/v1/workloads")).status_code == 200


async def test_openapi_documents_the_api(bench_client: httpx.AsyncClient) -> None:
    doc = (await bench_client.get("/openapi.json")).json()
    paths = doc["paths"]
    for url in (
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/artifacts/{name}",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/workloads",
        "/api/v1/workers",
        "/api/v1/worker/lease",
    ):
        assert url in paths, url
    body = paths["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    assert "workload" in body["schema"]["properties"]
    assert "$defs" not in json.dumps(body)
