"""Retention of everything: finished jobs go with their events, runs, artifacts and
attached traces; stored files stay under their cap (least recently used first) and an
upload no job names expires; the worker's file cache has a cap of its own."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.settings import Settings
from app.store.profiles import PROFILE_FILE, PROFILE_MEDIA
from tests.app.bench_fakes import MATMUL, FakeWorker
from tests.app.built import build_app, state_of
from workers.files import FileCache

pytestmark = pytest.mark.anyio

OCTET = {"Content-Type": "application/octet-stream"}


def make(tmp_path: Path, db: str, **changes: Any) -> Any:
    """An app on the database `db` (each test runs on SQLite and on PostgreSQL)."""
    settings = Settings(
        DB=db,
        CACHE_DIR=tmp_path / "cache",
        WORKER_TOKEN="test-worker-token",
        **changes,
    )
    return build_app(settings)


def npz(seed: int, size: int = 200) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, arg0=np.random.default_rng(seed).standard_normal(size).astype(np.float32))
    return buffer.getvalue()


async def test_finished_jobs_go_with_their_events_runs_and_traces(tmp_path: Path, db: str) -> None:
    # Before: with RETAIN_RUNS=10, 64 jobs left 64 jobs and 192 events, and a pruned
    # run's profile was still served.
    app = make(tmp_path, db, RETAIN_RUNS=3)
    dispatcher = state_of(app).dispatcher
    store = dispatcher.store
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        worker = FakeWorker(c)
        await worker.register()
        ids = []
        for _ in range(8):
            ids.append((await c.post("/api/v1/jobs", json=MATMUL)).json()["id"])
            grant = await worker.lease()
            assert grant is not None
            assert (await worker.finish(grant)).status_code == 200
        trace = store.put_file(b"a trace" * 100, PROFILE_MEDIA)
        store.attach_file(ids[0], PROFILE_FILE, trace)
        assert (await c.get(f"/runs/{ids[0]}/profile")).status_code == 200
        queued = (await c.post("/api/v1/jobs", json=MATMUL)).json()["id"]
        dispatcher.reap()
        kept = {j.id for j in store.list_jobs(limit=100)[0]}
        assert kept == {*ids[-3:], queued}  # the queued job is never pruned
        events = store._read("SELECT count(*) FROM job_events")[0][0]
        assert events == 3 * 3 + 1  # queued, running, done for each kept run; one queued
        assert store.count_runs() == 3
        assert (await c.get(f"/runs/{ids[0]}/profile")).status_code == 404
        assert store.file_info(trace) is None
        assert (await c.get(f"/api/v1/jobs/{ids[0]}")).status_code == 404


async def test_stored_files_stay_under_their_cap(tmp_path: Path, db: str) -> None:
    # Before: twenty 16 MiB uploads grew the database to 354 MB.
    sizes = {len(npz(i)) for i in range(12)}
    (one,) = sizes
    app = make(tmp_path, db, FILES_MAX_BYTES=4 * one + 10)
    store = state_of(app).dispatcher.store
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        shas = []
        for i in range(12):
            r = await c.post(
                "/api/v1/artifacts", params={"kind": "npz"}, content=npz(i), headers=OCTET
            )
            assert r.status_code == 201
            shas.append(r.json()["sha256"])
            assert store.files_bytes() <= 4 * one + 10
            if i == 1:  # a queued job names the second upload: it is needed, so it stays
                spec = {
                    "workload": "exported",
                    "path": "jax-cpu",
                    "params": {"artifact": "0" * 64, "inputs": shas[1]},
                }
                from app.queue.validation import ValidJob
                from workers.protocol import JobSpec

                valid = ValidJob(JobSpec.model_validate(spec), 1)
                state_of(app).admission.queue("t", [valid])
        present = [sha for sha in shas if store.file_info(sha) is not None]
        assert present == [shas[1], *shas[-3:]]


async def test_an_upload_no_job_names_expires(tmp_path: Path, db: str) -> None:
    app = make(tmp_path, db, FILES_RETAIN_DAYS=1 / 24)  # an hour
    dispatcher = state_of(app).dispatcher
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/api/v1/artifacts", params={"kind": "npz"}, content=npz(1), headers=OCTET)
        sha = r.json()["sha256"]
        dispatcher.prune()
        assert dispatcher.store.file_info(sha) is not None
        # Its last use two hours ago, rather than a wait that a busy machine stretches.
        store = dispatcher.store
        store._read("UPDATE files SET used_at = used_at - 7200, created_at = created_at - 7200")
        dispatcher.prune()
        assert dispatcher.store.file_info(sha) is None


def test_the_workers_file_cache_has_a_cap(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "files", max_bytes=3000)
    first = cache.put(b"a" * 1000)
    os.utime(cache.path(first), (1, 1))
    second = cache.put(b"b" * 1000)
    os.utime(cache.path(second), (2, 2))
    cache.get(first, "inputs")  # used again: now the newest
    third = cache.put(b"c" * 1000)
    fourth = cache.put(b"d" * 1000)
    assert [cache.has(s) for s in (first, second, third, fourth)] == [True, False, True, True]
    stored = [p for p in (tmp_path / "files").iterdir() if not p.name.startswith(".")]
    assert sum(p.stat().st_size for p in stored) <= 3000  # (.locks/ and .evict.lock aside)
