"""Worker reports bound to the lease that carries them: server-assigned worker ids, a
random lease id per grant, 409 for a lease that has ended, attempts counted by the server,
and lease expiry on the database's clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from bench_fakes import AUTH, MATMUL, FakeWorker, capabilities

from app.dispatch import Dispatcher
from app.settings import Settings
from app.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def bench_db(db: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return db


async def submit(client: httpx.AsyncClient) -> str:
    r = await client.post("/api/v1/jobs", json=MATMUL)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


async def job(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    return body


async def test_the_server_assigns_worker_ids(bench_client: httpx.AsyncClient) -> None:
    holder = FakeWorker(bench_client)
    await holder.register()
    r = await bench_client.post(
        "/api/v1/worker/register",
        json={"capabilities": capabilities(), "name": "intruder", "worker_id": holder.id},
        headers=AUTH,
    )
    assert r.status_code == 200 and r.json()["worker_id"] != holder.id
    workers = (await bench_client.get("/api/v1/workers")).json()["data"]
    assert sorted(w["name"] for w in workers) == ["fake", "intruder"]


async def test_a_worker_registering_again_keeps_its_id_with_its_key(
    bench_client: httpx.AsyncClient,
) -> None:
    first = (
        await bench_client.post(
            "/api/v1/worker/register", json={"capabilities": capabilities()}, headers=AUTH
        )
    ).json()
    again = {"capabilities": capabilities(device_count=2), "worker_id": first["worker_id"]}
    kept = await bench_client.post(
        "/api/v1/worker/register", json={**again, "worker_key": first["worker_key"]}, headers=AUTH
    )
    assert kept.json()["worker_id"] == first["worker_id"]
    wrong = await bench_client.post(
        "/api/v1/worker/register", json={**again, "worker_key": "not-the-key"}, headers=AUTH
    )
    assert wrong.json()["worker_id"] != first["worker_id"]
    workers = (await bench_client.get("/api/v1/workers")).json()["data"]
    mine = next(w for w in workers if w["id"] == first["worker_id"])
    assert mine["device_count"] == 2


async def test_a_second_worker_with_the_holders_id_cannot_touch_the_job(
    bench_client: httpx.AsyncClient,
) -> None:
    holder = FakeWorker(bench_client)
    await holder.register()
    job_id = await submit(bench_client)
    grant = await holder.lease()
    assert grant is not None and len(grant["lease_id"]) >= 20
    # The intruder knows the holder's id (the worker list shows it) but not the lease.
    forged = {"worker_id": holder.id, "job_id": job_id}
    for path, extra in (
        ("result", {"failure": {"reason": "forged"}}),
        ("result", {"failure": {"reason": "forged"}, "lease_id": "guess"}),
        ("heartbeat", {"lease_id": "guess"}),
        ("progress", {"events": []}),
        ("release", {}),
    ):
        r = await bench_client.post(
            f"/api/v1/worker/{path}", json={**forged, **extra}, headers=AUTH
        )
        assert r.status_code == 409, (path, r.text)
        assert r.json()["accepted"] is False
        # The job still runs under the holder's lease: nothing was re-queued.
        assert "running under another lease" in r.json()["detail"], r.text
    current = await job(bench_client, job_id)
    assert current["status"] == "running" and current["attempts"] == 1
    assert (await holder.finish(grant)).status_code == 200
    assert (await job(bench_client, job_id))["status"] == "done"


async def test_a_worker_whose_lease_expired_cannot_fail_the_requeued_job(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(update={"LEASE_S": 0.1})
    late = FakeWorker(bench_client)
    await late.register()
    job_id = await submit(bench_client)
    first = await late.lease()
    assert first is not None
    await asyncio.sleep(0.15)
    assert bench_dispatcher.reap() == 1  # re-queued
    bench_dispatcher.settings = bench_dispatcher.settings.model_copy(update={"LEASE_S": 30.0})
    fresh = FakeWorker(bench_client)
    await fresh.register()
    second = await fresh.lease()
    assert second is not None and second["job_id"] == job_id
    assert second["lease_id"] != first["lease_id"]
    r = await late.fail(job_id, "my runner crashed long ago")
    assert r.status_code == 409 and r.json()["cancel"] is True
    assert "lease has ended" in r.json()["detail"]
    beat = await late.heartbeat(job_id)
    assert beat["cancel"] is True
    current = await job(bench_client, job_id)
    assert current["status"] == "running" and current["worker_id"] == fresh.id
    assert (await fresh.finish(second)).status_code == 200


async def test_the_attempt_comes_from_the_server(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    r = await worker.finish({**grant, "attempt": 99})
    assert r.status_code == 200
    assert (await job(bench_client, job_id))["run"]["attempt"] == 1


async def test_a_finished_lease_is_refused_and_changes_nothing(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.finish(grant)).status_code == 200
    r = await worker.fail(job_id, "too late")
    assert r.status_code == 409
    assert (await job(bench_client, job_id))["status"] == "done"


async def test_a_step_of_this_servers_clock_expires_no_lease(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lease deadlines are on the database's clock: the server's own clock is not asked.
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    assert await worker.lease() is not None
    stepped = time.time() + 3600.0
    monkeypatch.setattr(time, "time", lambda: stepped)
    assert bench_dispatcher.reap() == 0
    assert (await job(bench_client, job_id))["status"] == "running"


async def test_a_restart_after_an_outage_gives_running_leases_one_full_period(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher, bench_settings: Settings
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = await submit(bench_client)
    assert await worker.lease() is not None
    assert bench_dispatcher.reap() == 0
    # The server restarts an hour later, long after the lease's deadline: no server reaped
    # meanwhile (and the worker could not heartbeat).
    store = Store.open(bench_settings.DB)
    store._read("UPDATE reaper SET last_reap_at = last_reap_at - 3600")
    store._read("UPDATE jobs SET lease_deadline = lease_deadline - 3600")
    restarted = Dispatcher(store, bench_settings.model_copy(update={"LEASE_S": 0.2}))
    assert restarted.reap() == 0
    await asyncio.sleep(0.25)
    assert restarted.reap() == 1
    found = store.get_job(job_id)
    assert found is not None and found.status == "queued"
    store.close()
