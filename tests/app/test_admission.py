"""One admission for everything that queues work: every route counts its jobs against the
client's rate, the queue, the client's share and the cap on jobs no worker can run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.bench_fakes import MATMUL, FakeWorker
from tests.app.built import build_app, state_of
from workers.catalog.exported import EXPORT_MEDIA_TYPE

pytestmark = pytest.mark.anyio

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
GPU_MATRIX: dict[str, Any] = {
    "workload": "matmul",
    "paths": ["jax-gpu"],
    "axis": {"name": "m", "values": [16, 32, 48, 64]},
    "base_params": {"n": 16, "k": 16},
    "measure": {"samples": 5},
}

Connect = Callable[..., AbstractAsyncContextManager[tuple[httpx.AsyncClient, Any]]]


@pytest.fixture
def connect(tmp_path: Path) -> Connect:
    """An in-process app with the given settings, and a client whose peer address is
    `peer`; yields (client, app state)."""

    @asynccontextmanager
    async def open_app(
        peer: str = "127.0.0.1", app: Any = None, **changes: Any
    ) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
        if app is None:
            settings = Settings(
                DB=tmp_path / "admission.sqlite3",
                CACHE_DIR=tmp_path / "cache",
                WORKER_TOKEN="test-worker-token",
                **changes,
            )
            app = build_app(settings)
        transport = httpx.ASGITransport(app=app, client=(peer, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client, app

    return open_app


def _state(app: Any) -> Any:
    return state_of(app)


QUEUEING_ROUTES = (
    "/api/v1/jobs",
    "/api/v1/matrices",
    "/matrices",
    "/runs",
    "/artifacts/{sha256}/runs",
    "/artifacts/{sha256}/compile",
    "/compare/repeat",
    "/runs/{job_id}/repeat",
    "/tour/compare",
    "/api/v1/fits",
    "/fits",
)
"""Every POST route that queues work, each driven below."""
OTHER_POSTS = (
    "/api/v1/jobs/{job_id}/cancel",
    "/runs/{job_id}/cancel",
    "/api/v1/artifacts",
    "/artifacts",
    "/api/v1/fits/{fit_id}/cancel",
    "/fits/{fit_id}/cancel",
)
"""POST routes that queue nothing (the worker API aside)."""


def post_paths(routes: Any, prefix: str = "") -> Iterator[str]:
    """The path of every POST route, through included routers (FastAPI keeps those as
    their own entries, each with the router it includes and its prefix)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from post_paths(inner.routes, prefix + route.include_context.prefix)
        elif "POST" in (getattr(route, "methods", None) or ()):
            yield prefix + route.path


async def test_every_job_the_store_inserts_went_through_admission(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Observe every statement that inserts a job, at the store's backend, while every
    route that queues work is driven: each must run inside `Admission.queue`, and
    admission must account for each."""
    from app.main import shared_api
    from app.queue.admission import Admission
    from tests.app.test_artifacts import export

    inserts: list[tuple[str, bool]] = []
    admitted: list[int] = []
    inside = False
    real_queue = Admission.queue

    def queue(self: Admission, client: str, jobs: Any, then: Any = None) -> Any:
        nonlocal inside
        inside = True
        try:
            rows = real_queue(self, client, jobs, then)
        finally:
            inside = False
        admitted.append(len(rows))
        return rows

    monkeypatch.setattr(Admission, "queue", queue)
    async with connect(SUBMIT_RATE=1000) as (client, app):
        store = _state(app).dispatcher.store
        from app.store.sqlite import SQLiteBackend, _SQLiteTx

        def counting(real: Any) -> Any:
            """`real` (a statement's execute), noting every job inserted, however."""

            def execute(self: Any, sql: str, args: Any = ()) -> Any:
                if "INSERT INTO jobs " in sql:
                    inserts.append((str(args[2]), inside))  # (its workload)
                return real(self, sql, args)

            return execute

        monkeypatch.setattr(_SQLiteTx, "execute", counting(_SQLiteTx.execute))
        monkeypatch.setattr(SQLiteBackend, "execute", counting(SQLiteBackend.execute))
        worker = FakeWorker(client)
        await worker.register()
        posted = list(post_paths(shared_api().routes))  # every app's routes
        assert sorted(p for p in posted if "/worker/" not in p) == sorted(
            QUEUEING_ROUTES + OTHER_POSTS
        ), "a new POST route: drive it here if it queues work"
        assert (await client.post("/api/v1/jobs", json=MATMUL)).status_code == 202
        grant = await worker.lease()
        assert grant is not None
        assert (await worker.finish(grant)).status_code == 200
        done = grant["job_id"]
        matrix = {**GPU_MATRIX, "paths": ["jax-cpu"], "axis": {"name": "m", "values": [16, 32]}}
        assert (await client.post("/api/v1/matrices", json=matrix)).status_code == 201
        form = (
            "workload=matmul&paths=jax-cpu&axis.name=m&axis.values=16,32"
            "&base_params=n%3D16+k%3D16&samples=5&mode=latency&cache=cold"
        )
        assert (await client.post("/matrices", content=form, headers=FORM)).status_code == 303
        run_form = {
            "workload": "matmul",
            "path": "jax-cpu",
            "param.m": "16",
            "measure.samples": "5",
            "stages": ["compile", "execute"],
        }
        assert (await client.post("/runs", data=run_form)).status_code == 303
        sha = store.put_file(export(["cpu"]), EXPORT_MEDIA_TYPE)
        upload_run = await client.post(
            f"/artifacts/{sha}/runs", content="path=jax-cpu&samples=5", headers=FORM
        )
        assert upload_run.status_code == 303, upload_run.text
        everywhere = store.put_file(export(["cpu", "tpu", "cuda"]), EXPORT_MEDIA_TYPE)
        compiles = await client.post(
            f"/artifacts/{everywhere}/compile", content="target=v6e:1x1&target=h100:1", headers=FORM
        )
        assert compiles.status_code == 303, compiles.text
        repeats = await client.post("/compare/repeat", data={"a": done, "side": "a"})
        assert repeats.status_code in (200, 303), repeats.text
        again = await client.post(f"/runs/{done}/repeat", data={"profile": "on"})
        assert again.status_code in (200, 303), again.text
        tour = await client.post("/tour/compare", content="", headers=FORM)
        assert tour.status_code == 303, tour.text
        fit = {"workload": "matmul", "dimension": "m", "range": [1, 64], "targets": ["h100:1"]}
        assert (await client.post("/api/v1/fits", json=fit)).status_code == 202
        fit_form = "workload=matmul&dimension=m&lo=1&hi=64&step=1&targets=b200%3A1"
        assert (await client.post("/fits", content=fit_form, headers=FORM)).status_code == 303

    assert inserts and all(through for _, through in inserts), inserts
    assert len(inserts) == sum(admitted)
    assert len(inserts) >= 1 + 2 + 2 + 1 + 1 + 2 + 2 + 1 + 2 + 2 + 2  # each route queued its jobs


async def test_the_upload_run_form_counts_against_rate_and_queue(
    connect: Connect, tmp_path: Path
) -> None:
    # Before: /artifacts/{sha}/runs checked neither, and 50 of 50 were queued.
    async with connect(MAX_QUEUE=5, SUBMIT_RATE=3) as (client, app):
        store = _state(app).dispatcher.store
        from tests.app.test_artifacts import export

        sha = store.put_file(export(["cpu"]), EXPORT_MEDIA_TYPE)
        statuses = []
        for _ in range(10):
            r = await client.post(
                f"/artifacts/{sha}/runs", content="path=jax-cpu&samples=5", headers=FORM
            )
            statuses.append(r.status_code)
        assert statuses.count(303) == 3
        assert set(statuses[3:]) == {429}
        assert store.count_queued() == 3
        assert "submissions a minute" in r.text
        assert "Retry-After" in r.headers


async def test_the_matrix_form_counts_its_cells_against_the_rate(connect: Connect) -> None:
    # Before: the HTML matrix form never checked the rate.
    form = (
        "workload=matmul&paths=jax-cpu&axis.name=m&axis.values=16,32&base_params=n%3D16+k%3D16"
        "&samples=5&mode=latency&cache=cold"
    )
    async with connect(SUBMIT_RATE=3) as (client, app):
        first = await client.post("/matrices", content=form, headers=FORM)
        assert first.status_code == 303, first.text
        second = await client.post("/matrices", content=form, headers=FORM)
        assert second.status_code == 429
        assert "submissions a minute" in second.text
        assert int(second.headers["Retry-After"]) >= 1
        assert _state(app).dispatcher.store.count_queued() == 2


async def test_a_matrix_counts_as_its_cells_in_the_api(connect: Connect) -> None:
    matrix = {**GPU_MATRIX, "paths": ["jax-cpu"]}
    async with connect(SUBMIT_RATE=6) as (client, _):
        assert (await client.post("/api/v1/matrices", json=matrix)).status_code == 201
        r = await client.post("/api/v1/matrices", json=matrix)  # 8 cells in a minute > 6
        assert r.status_code == 429 and "submissions a minute" in r.json()["detail"]
        single = await client.post("/api/v1/jobs", json=MATMUL)  # 5th, 6th still fit
        assert single.status_code == 202


async def test_jobs_no_worker_can_run_cannot_lock_others_out(connect: Connect) -> None:
    # Before: eleven matrix POSTs queued 1,000 jax-gpu jobs and every other client got
    # "429 queue is full" while the CPU worker sat idle.
    async with connect(MAX_QUEUE=50, MAX_WAITING=6, MAX_QUEUE_PER_CLIENT=40) as (client, app):
        worker = FakeWorker(client)
        await worker.register()  # a CPU worker: nothing here runs jax-gpu
        statuses = []
        for _ in range(4):
            r = await client.post(
                "/api/v1/matrices", json=GPU_MATRIX, headers={"X-Forwarded-For": "198.51.100.1"}
            )
            statuses.append(r.status_code)
        assert statuses == [201, 429, 429, 429]
        assert "no connected worker can run them" in r.json()["detail"]
        assert r.headers["Retry-After"] == "30"
        other = await client.post(
            "/api/v1/jobs", json=MATMUL, headers={"X-Forwarded-For": "198.51.100.2"}
        )
        assert other.status_code == 202, other.text
        grant = await worker.lease()
        assert grant is not None and grant["job_id"] == other.json()["id"]
        assert _state(app).dispatcher.store.count_queued() == 4


async def test_one_client_cannot_fill_the_queue(connect: Connect) -> None:
    async with connect(MAX_QUEUE=10, MAX_QUEUE_PER_CLIENT=3) as (client, _):
        await FakeWorker(client).register()
        a = {"X-Forwarded-For": "198.51.100.7"}
        codes = [(await client.post("/api/v1/jobs", json=MATMUL, headers=a)).status_code]
        codes += [(await client.post("/api/v1/jobs", json=MATMUL, headers=a)).status_code]
        codes += [(await client.post("/api/v1/jobs", json=MATMUL, headers=a)).status_code]
        refused = await client.post("/api/v1/jobs", json=MATMUL, headers=a)
        assert codes == [202, 202, 202] and refused.status_code == 429
        assert "one client may have queued" in refused.json()["detail"]
        assert "Retry-After" in refused.headers
        b = {"X-Forwarded-For": "198.51.100.8"}
        assert (await client.post("/api/v1/jobs", json=MATMUL, headers=b)).status_code == 202


async def test_forwarded_for_counts_only_from_allowed_proxies(connect: Connect) -> None:
    async with connect(peer="203.0.113.9", MAX_QUEUE_PER_CLIENT=1) as (client, app):
        await FakeWorker(client).register()
        one = {"X-Forwarded-For": "198.51.100.1"}
        two = {"X-Forwarded-For": "198.51.100.2"}
        assert (await client.post("/api/v1/jobs", json=MATMUL, headers=one)).status_code == 202
        # The peer is no allowed proxy: its header is ignored, both are the same client.
        assert (await client.post("/api/v1/jobs", json=MATMUL, headers=two)).status_code == 429
        jobs = _state(app).dispatcher.store.list_jobs()[0]
        assert {j.client for j in jobs} == {"203.0.113.9"}
    async with connect(peer="10.0.0.5", app=app) as (client, _):
        # Neither is 10.0.0.5 trusted under the default (127.0.0.1 only).
        r = await client.post("/api/v1/jobs", json=MATMUL, headers=two)
        assert r.status_code == 202


async def test_forwarded_for_from_an_allowed_network(connect: Connect) -> None:
    async with connect(
        peer="10.0.0.5", FORWARDED_ALLOW_IPS="10.0.0.0/8", MAX_QUEUE_PER_CLIENT=1
    ) as (client, app):
        await FakeWorker(client).register()
        # The last hop that is not a trusted proxy is the client; what it claims is not.
        chain = {"X-Forwarded-For": "1.2.3.4, 198.51.100.1, 10.0.0.9"}
        assert (await client.post("/api/v1/jobs", json=MATMUL, headers=chain)).status_code == 202
        (job,) = _state(app).dispatcher.store.list_jobs()[0]
        assert job.client == "198.51.100.1"


async def test_a_runnable_job_is_leased_wherever_it_sits_in_the_queue(connect: Connect) -> None:
    # Before: the lease query looked at the first MAX_QUEUE queued jobs only.
    async with connect(MAX_QUEUE=3, MAX_WAITING=100) as (client, app):
        dispatcher = _state(app).dispatcher
        from app.queue.submission import validate_job

        cpu = validate_job(MATMUL, 2**30)
        with dispatcher.store.admitting("x") as gate:  # past admission's checks:
            for _ in range(3):  # jobs spanning more devices than the worker has, queued first
                dispatcher.submit(gate, [(cpu.spec, 64)])  # (e.g. re-queued, or a lower limit)
        worker = FakeWorker(client)
        await worker.register()
        r = await client.post("/api/v1/jobs", json=MATMUL)
        assert r.status_code == 429  # the queue is full...
        with dispatcher.store.admitting("y") as gate:  # ...yet one runnable job sits 4th
            (job,) = dispatcher.submit(gate, [(cpu.spec, cpu.devices)])
        grant = await worker.lease()
        assert grant is not None and grant["job_id"] == job.id
