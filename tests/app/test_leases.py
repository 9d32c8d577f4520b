"""Worker reports bound to the lease that carries them: server-assigned worker ids, a
random lease id per grant, 409 for a lease that has ended, attempts counted by the server,
and lease expiry on the database's clock."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.dispatch import Dispatcher
from app.settings import Settings
from app.store import Store
from tests.app.bench_fakes import AUTH, MATMUL, FakeWorker, capabilities

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
    # Even with the holder's id (public) and its key (say, leaked), no report without the
    # lease touches the job.
    forged = {"worker_id": holder.id, "worker_key": holder.key, "job_id": job_id}
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


async def test_a_worker_cannot_lease_or_report_as_another(
    bench_client: httpx.AsyncClient,
) -> None:
    """Before: worker B, registered with its own token, leased, posted a result and
    heartbeated with worker A's id (public in GET /api/v1/jobs/{id}): 200 each, and the
    job showed A with B's samples."""
    a = FakeWorker(bench_client)
    await a.register()
    first = await submit(bench_client)
    grant = await a.lease()
    assert grant is not None
    assert (await a.finish(grant)).status_code == 200
    a_id = (await job(bench_client, first))["worker_id"]
    assert a_id == a.id  # public
    b = FakeWorker(bench_client)
    await b.register()
    second = await submit(bench_client)
    as_a = {"worker_id": a_id, "worker_key": b.key}
    r = await b.post("lease", {**as_a, "wait_s": 0})
    assert r.status_code == 403, r.text
    assert r.json()["detail"] == (
        f"worker_key is not the key of worker '{a_id}': a worker may only lease and "
        "report as itself"
    )
    r = await bench_client.post(
        "/api/v1/worker/lease", json={"worker_id": a_id, "wait_s": 0}, headers=AUTH
    )
    assert r.status_code == 401
    assert r.json()["detail"].startswith("worker_key missing: every message after registration")
    # A leases its job; B cannot report on it, beat for it, or give it back as A.
    grant = await a.lease()
    assert grant is not None and grant["job_id"] == second
    lease = {"job_id": second, "lease_id": grant["lease_id"]}
    for path, extra in (
        ("result", {"failure": {"reason": "forged"}}),
        ("heartbeat", {}),
        ("progress", {"events": []}),
        ("release", {}),
    ):
        r = await b.post(path, {**as_a, **lease, **extra})
        assert r.status_code == 403, (path, r.text)
        assert "may only lease and report as itself" in r.json()["detail"]
    current = await job(bench_client, second)
    assert current["status"] == "running" and current["worker_id"] == a.id
    assert (await a.heartbeat(second))["accepted"] is True
    assert (await a.finish(grant)).status_code == 200
    assert (await job(bench_client, second))["status"] == "done"


async def test_registrations_stop_at_the_cap_of_connected_workers(
    bench_client: httpx.AsyncClient, bench_dispatcher: Dispatcher
) -> None:
    """Before: one token registered 3,000 workers in 14 s and /workers grew to 800 kB."""
    settings = bench_dispatcher.settings
    bench_dispatcher.settings = settings.model_copy(
        update={"MAX_WORKERS": 3, "WORKER_STALE_S": 0.5}
    )
    workers = [FakeWorker(bench_client) for _ in range(3)]
    for w in workers:
        await w.register()
    r = await bench_client.post(
        "/api/v1/worker/register", json={"capabilities": capabilities()}, headers=AUTH
    )
    assert r.status_code == 429, r.text
    assert r.headers["retry-after"] == "1"
    assert r.json()["detail"] == (
        "this server already has its maximum of 3 connected workers (BOUNDARY_MAX_WORKERS); "
        "a worker that stops is no longer counted 0.5 s after it was last heard from"
    )
    listed = (await bench_client.get("/api/v1/workers")).json()
    assert listed["count"] == 3
    # A connected worker registering again (new capabilities) is no new worker.
    again = {"capabilities": capabilities(device_count=2), "worker_id": workers[0].id}
    r = await bench_client.post(
        "/api/v1/worker/register", json={**again, "worker_key": workers[0].key}, headers=AUTH
    )
    assert r.status_code == 200 and r.json()["worker_id"] == workers[0].id
    # All three fall silent: once past WORKER_STALE_S they are no longer counted.
    deadline = time.monotonic() + 10
    while (await bench_client.get("/api/v1/workers")).json()["count"]:
        assert time.monotonic() < deadline, "silent workers were still counted after 10 s"
        await asyncio.sleep(0.05)
    late = FakeWorker(bench_client)
    await late.register()


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
