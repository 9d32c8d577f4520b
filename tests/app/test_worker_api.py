"""The worker API and the dispatcher behind it, driven in-process by a fake worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.dispatch import Dispatcher
from tests.app.bench_fakes import AUTH, MATMUL, FakeWorker, capabilities
from workers.catalog import CATALOG_VERSION
from workers.protocol import PROTOCOL_VERSION

pytestmark = pytest.mark.anyio


@pytest.fixture
def bench_db(db: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return db


GPU_JOB = {**MATMUL, "path": "jax-gpu"}


async def submit(client: httpx.AsyncClient, spec: dict[str, Any] = MATMUL) -> str:
    r = await client.post("/api/v1/jobs", json=spec)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


async def get(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "x"}])
async def test_worker_endpoints_refuse_missing_or_wrong_token(
    bench_client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    for path in ("register", "lease", "heartbeat", "progress", "result", "release"):
        r = await bench_client.post(f"/api/v1/worker/{path}", json={}, headers=headers)
        assert r.status_code == 401, path
        assert "token" in r.json()["detail"]


@pytest.mark.parametrize(
    ("field", "theirs", "upgrade"),
    [
        ("protocol_version", PROTOCOL_VERSION + 1, "upgrade the server"),
        ("protocol_version", PROTOCOL_VERSION - 1, "upgrade the worker"),
        ("catalog_version", CATALOG_VERSION + 1, "upgrade the server"),
        ("catalog_version", CATALOG_VERSION - 1, "upgrade the worker"),
    ],
)
async def test_version_mismatch_is_refused_naming_the_side_to_upgrade(
    bench_client: httpx.AsyncClient, field: str, theirs: int, upgrade: str
) -> None:
    caps = capabilities()
    caps[field] = theirs
    r = await bench_client.post(
        "/api/v1/worker/register", json={"capabilities": caps}, headers=AUTH
    )
    assert r.status_code == 409
    assert upgrade in r.json()["detail"]
    assert field.split("_", maxsplit=1)[0] in r.json()["detail"]


async def test_a_job_runs_through_lease_and_result(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    reply = await worker.register()
    assert reply["heartbeat_s"] < reply["lease_s"] <= 30
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None and grant["job_id"] == job_id and grant["attempt"] == 1
    running = await get(bench_client, job_id)
    assert running["status"] == "running" and running["worker_id"] == worker.id
    workers = (await bench_client.get("/api/v1/workers")).json()
    assert workers["count"] == 1
    assert workers["data"][0]["current_job"] == job_id
    assert workers["data"][0]["paths"] == ["jax-cpu"]

    r = await worker.finish(grant)
    assert r.json() == {
        "accepted": True,
        "status": "done",
        "cancel": False,
        "reason": None,
        "detail": None,
    }
    done = await get(bench_client, job_id)
    assert done["status"] == "done" and done["reason"] is None
    run = done["run"]
    assert run["stage_seconds"]["compile"] == 0.01
    assert run["artifact_links"]["hlo"] == f"/api/v1/jobs/{job_id}/artifacts/hlo"
    text = await bench_client.get(run["artifact_links"]["hlo"])
    assert text.text == "HloModule m\n"
    assert text.headers["content-type"].startswith("text/plain")

    # Posting the same result again is harmless: its lease has ended, nothing changes.
    again = await worker.finish(grant)
    assert again.status_code == 409 and again.json()["accepted"] is False
    assert (await get(bench_client, job_id))["run"]["attempt"] == 1


async def test_long_poll_wakes_when_a_job_arrives(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    waiting = asyncio.create_task(worker.lease(wait_s=5.0))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    started = time.monotonic()
    job_id = await submit(bench_client)
    grant = await asyncio.wait_for(waiting, 2.0)
    assert grant is not None and grant["job_id"] == job_id
    assert time.monotonic() - started < 1.0


async def test_long_poll_ends_with_204(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    started = time.monotonic()
    assert await worker.lease(wait_s=0.3) is None
    assert 0.25 < time.monotonic() - started < 2.0


async def test_gpu_job_is_never_leased_to_a_cpu_worker(bench_client: httpx.AsyncClient) -> None:
    cpu = FakeWorker(bench_client)
    await cpu.register()
    job_id = await submit(bench_client, GPU_JOB)
    assert await cpu.lease(wait_s=0.2) is None
    waiting = await get(bench_client, job_id)
    assert waiting["status"] == "queued"
    assert waiting["reason"].startswith("no worker for jax-gpu is connected")
    assert "platform is cpu" in waiting["reason"]

    gpu = FakeWorker(bench_client, capabilities("gpu"))
    await gpu.register()
    assert (await get(bench_client, job_id))["reason"] is None
    grant = await gpu.lease()
    assert grant is not None and grant["job_id"] == job_id


async def test_queued_job_expires_with_a_clear_reason(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    cpu = FakeWorker(bench_client)
    await cpu.register()
    job_id = await submit(bench_client, GPU_JOB)
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(
        update={"QUEUE_TIMEOUT_S": 0.1}
    )
    await asyncio.sleep(0.2)
    assert bench_dispatcher.reap() == 1
    job = await get(bench_client, job_id)
    assert job["status"] == "expired"
    assert job["reason"].startswith("expired after 0.1 s in the queue: no worker for jax-gpu")


async def test_expired_lease_requeues_then_fails_after_max_attempts(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(
        update={"LEASE_S": 0.1, "MAX_ATTEMPTS": 2}
    )
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    for attempt in (1, 2):
        grant = await worker.lease()
        assert grant is not None and grant["attempt"] == attempt
        await asyncio.sleep(0.15)
        assert bench_dispatcher.reap() == 1
    job = await get(bench_client, job_id)
    assert job["status"] == "failed"
    assert "lease expired 2 times" in job["reason"]
    events = bench_dispatcher.store.job_events(job_id)
    assert [e[0] for e in events] == ["queued", "running", "queued", "running", "failed"]


async def test_heartbeat_extends_the_lease_and_reports_cancel(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(update={"LEASE_S": 0.3})
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    for _ in range(4):
        await asyncio.sleep(0.15)
        assert (await worker.heartbeat(job_id))["cancel"] is False
        bench_dispatcher.reap()
    assert (await get(bench_client, job_id))["status"] == "running"

    await bench_client.post(f"/api/v1/jobs/{job_id}/cancel")
    beat = await worker.heartbeat(job_id)
    assert beat["cancel"] is True and "cancelled" in beat["reason"]
    late = await worker.finish(grant)
    assert late.json()["accepted"] is False
    assert (await get(bench_client, job_id))["status"] == "cancelled"


async def test_worker_failure_is_recorded_with_stderr(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    await worker.lease()
    r = await worker.fail(job_id, "the runner was killed by SIGKILL", "line 1\nline 2")
    assert r.json()["accepted"] is True
    job = await get(bench_client, job_id)
    assert job["status"] == "failed"
    assert job["reason"] == "the runner was killed by SIGKILL"
    assert job["stderr_tail"] == "line 1\nline 2"
    assert (await worker.fail(job_id, "again")).json()["accepted"] is False


async def test_a_worker_cannot_report_on_a_job_it_never_held(
    bench_client: httpx.AsyncClient,
) -> None:
    holder, other = FakeWorker(bench_client), FakeWorker(bench_client)
    await holder.register()
    await other.register()
    job_id = await submit(bench_client)
    grant = await holder.lease()
    assert grant is not None
    assert (await other.finish(grant)).status_code == 409
    ghost = FakeWorker(bench_client)
    ghost.id = "w-unknown"
    assert (await ghost.finish(grant)).status_code == 404
    r = await ghost.post("lease", {"worker_id": ghost.id, "wait_s": 0})
    assert r.status_code == 404 and "register again" in r.json()["detail"]
    assert (await get(bench_client, job_id))["status"] == "running"


async def test_release_gives_the_job_back(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    await worker.lease()
    r = await worker.post("release", {"worker_id": worker.id, "job_id": job_id})
    assert r.json()["accepted"] is True
    job = await get(bench_client, job_id)
    assert job["status"] == "queued" and job["attempts"] == 0
    grant = await worker.lease()
    assert grant is not None and grant["attempt"] == 1


async def test_artifacts_are_capped_inline_and_linked_in_full(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    limit = bench_dispatcher.settings.INLINE_ARTIFACT_BYTES
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    big = "x" * (limit * 3)
    result = {"artifacts": {"hlo": big, "stablehlo": "module {}"}}
    assert (await worker.finish(grant, **result)).json()["accepted"]
    run = (await get(bench_client, job_id))["run"]
    assert len(run["artifacts"]["hlo"]) == limit
    assert run["artifacts_truncated"] == ["hlo"]
    full = await bench_client.get(run["artifact_links"]["hlo"])
    assert full.text == big


async def test_progress_streams_over_sse_until_a_final_status(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    seen: list[str] = []

    async def follow() -> None:
        async with bench_client.stream("GET", f"/api/v1/jobs/{job_id}/events") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith(("event:", "data:")):
                    seen.append(line)

    reader = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    events = [{"phase": "sampling", "k": k, "n": 5} for k in range(1, 6)]
    r = await worker.post("progress", {"worker_id": worker.id, "job_id": job_id, "events": events})
    assert r.json()["accepted"] is True
    running = await get(bench_client, job_id)
    assert running["progress"] == {"phase": "sampling", "k": 5, "n": 5}
    await worker.finish(grant)
    await asyncio.wait_for(reader, 5.0)
    assert seen[0] == "event: status"
    assert '"status":"running"' in seen[1].replace(" ", "")
    assert "event: progress" in seen
    assert '"status":"done"' in seen[-1].replace(" ", "")


async def test_metrics_and_readyz(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    await worker.finish(grant)
    await submit(bench_client)
    assert (await bench_client.get("/readyz")).json() == {"status": "ready"}
    r = await bench_client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert "boundary_queue_depth 1" in text
    assert 'boundary_jobs{status="done"} 1' in text
    assert 'boundary_stage_seconds{stage="compile",quantile="0.5"} 0.01' in text
    assert 'boundary_stage_seconds_count{stage="compile"} 1' in text
    assert f'boundary_worker_last_heartbeat_age_seconds{{worker="{worker.id}"}}' in text
    for line in text.splitlines():
        assert line.startswith("#") or len(line.split(" ")) == 2, line


async def test_a_job_held_far_past_its_limit_is_failed_by_the_server(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.dispatch.reaper.START_ALLOWANCE_S", 0.0)
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(update={"JOB_TIMEOUT_S": 0.2})
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    assert await worker.lease() is not None
    await asyncio.sleep(0.3)
    assert (await worker.heartbeat(job_id))["cancel"] is False  # alive, yet too slow
    assert bench_dispatcher.reap() == 1
    job = await get(bench_client, job_id)
    assert job["status"] == "failed" and "ran past the server's limit" in job["reason"]
    assert (await worker.heartbeat(job_id))["cancel"] is True
