"""Clients take turns at the workers, on both backends: another client's job waits only
for the jobs already running, never for one client's queued ones; clients with jobs queued
are served in turn; a fit search's probes alternate between its targets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import MATMUL, FakeWorker
from tests.app.fit_fakes import affine, probe_result, probe_worker

pytestmark = pytest.mark.anyio

TARGETS = ["h100:1", "h200:1", "b200:1", "v6e:1x1"]


@pytest.fixture
def bench_db(db: str) -> str:
    """Every test here on SQLite and on PostgreSQL."""
    return db


@asynccontextmanager
async def client_at(app: Any, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of `app` whose requests come from `address` (admission's
    client, and so the client whose turn it is)."""
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def queue(client: httpx.AsyncClient, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        r = await client.post("/api/v1/jobs", json=MATMUL)
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    return ids


async def lease(worker: FakeWorker) -> dict[str, Any]:
    grant = await worker.lease()
    assert grant is not None
    return grant


async def test_another_clients_job_waits_only_for_the_jobs_already_running(
    bench_app: Any, bench_client: httpx.AsyncClient
) -> None:
    workers = [FakeWorker(bench_client) for _ in range(2)]
    for worker in workers:
        await worker.register()
    async with client_at(bench_app, "10.0.0.1") as a, client_at(bench_app, "10.0.0.2") as b:
        a_jobs = await queue(a, 12)
        first = await lease(workers[0])  # A's oldest: nobody else has a job queued
        assert first["job_id"] == a_jobs[0]
        (b_job,) = await queue(b, 1)
        # A has eleven jobs queued before B's one, but B has none running: B goes next.
        assert (await lease(workers[1]))["job_id"] == b_job
        assert (await workers[0].finish(first)).status_code == 200
        # B's job still runs, A's ended: A's turn again, with its next oldest.
        assert (await lease(workers[0]))["job_id"] == a_jobs[1]


async def test_one_worker_serves_the_clients_in_turn(
    bench_app: Any, bench_client: httpx.AsyncClient
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    owners: dict[str, str] = {}
    for name in ("a", "b", "c"):
        async with client_at(bench_app, f"10.0.1.{ord(name)}") as c:
            owners |= {job_id: name for job_id in await queue(c, 3)}
    served = []
    for _ in range(9):
        grant = await lease(worker)
        served.append(owners[grant["job_id"]])
        assert (await worker.finish(grant)).status_code == 200
    assert "".join(served) == "abcabcabc"
    assert await worker.lease() is None


async def test_a_fit_searchs_probes_alternate_between_its_targets(
    bench_client: httpx.AsyncClient,
) -> None:
    search = {
        "workload": "attention",
        "params": {"heads": 8, "seq_len": 1024, "head_dim": 64},
        "dimension": "batch",
        "range": [1, 256],
        "targets": TARGETS,
    }
    created = await bench_client.post("/api/v1/fits", json=search)
    assert created.status_code == 202, created.text
    worker = await probe_worker(bench_client, TARGETS)
    leased = [await lease(worker) for _ in range(len(TARGETS) * 2)]
    targets = [grant["spec"]["target"] for grant in leased]
    values = [grant["spec"]["params"]["batch"] for grant in leased]
    # Every target's first seed before any target's second.
    assert sorted(targets[:4]) == sorted(TARGETS) and sorted(targets[4:]) == sorted(TARGETS)
    assert values == [1] * 4 + [64] * 4
    peak = affine(int(1e9), int(3e8))
    for grant in leased:
        spec = grant["spec"]
        result = probe_result(spec, peak(spec["params"]["batch"]))
        assert (await worker.finish(grant, **result)).status_code == 200
