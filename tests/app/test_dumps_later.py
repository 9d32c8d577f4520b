"""A compiled run first, its dumps after (workers.protocol.dumps): real deviceless
compiles for v6e:1x1 and h100:1 through the worker API, in-process.

The job is done, with its HLO, summary and memory on the page, when its compile ends;
its machine code comes from a follow-up job and appears in the same run once that job is
done. A pending artifact's link answers 200 and says where it is; a follow-up that fails
says so instead of pending for ever."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities
from workers.protocol import JobSpec
from workers.protocol.dumps import dumps_job_id

pytestmark = pytest.mark.anyio

MATMUL = {"workload": "matmul", "params": {"m": 128, "n": 128, "k": 128}}


def run_here(spec: dict[str, Any]) -> dict[str, Any]:
    """The real engine on this process's CPU, compiling for the spec's target."""
    from workers.run.engine import run_job

    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")


async def first_part(client: httpx.AsyncClient, path: str, target: str) -> tuple[str, FakeWorker]:
    """Queue a compile-only job for `target`, run it for real as its worker would, post
    it; the job's id and the worker."""
    queued = await client.post("/api/v1/jobs", json={**MATMUL, "path": path, "target": target})
    assert queued.status_code == 202, queued.text
    worker = FakeWorker(client, capabilities("cpu", targets=[target]))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    assert grant["spec"]["dumps"] == "later"  # the server asks for the run first
    posted = await worker.finish(grant, **run_here(grant["spec"]))
    assert posted.status_code == 200, posted.text
    return grant["job_id"], worker


def visible(html: str) -> str:
    """The page's text as a person reads it (tags dropped, spaces folded)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.parametrize(
    ("path", "target", "dumped"),
    [("jax-tpu", "v6e:1x1", ["bundles"]), ("jax-gpu", "h100:1", ["ptx", "sass"])],
)
async def test_the_run_is_done_at_its_compile_and_its_dumps_follow(
    bench_client: httpx.AsyncClient, path: str, target: str, dumped: list[str]
) -> None:
    job_id, worker = await first_part(bench_client, path, target)
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["status"] == "done"
    run = job["run"]
    assert run["artifacts"]["hlo"] and run["target"]["memory"]["peak_bytes"] > 0
    assert all(not run["artifacts"][name] for name in dumped)
    follow = dumps_job_id(job_id)
    assert job["dumps"]["job"] == follow
    assert job["dumps"]["status"] == "queued" and job["dumps"]["pending"] == dumped

    page = visible((await bench_client.get(f"/runs/{job_id}")).text)
    assert f"Still coming: {' and '.join(dumped)}." in page
    assert f"a follow-up job, {follow} , makes" in page
    assert "per device, against its usable bytes" in page  # memory is there now
    for name in dumped:  # the tab is there and its link answers, saying where it is
        pending = await bench_client.get(f"/runs/{job_id}/ir/{name}")
        assert pending.status_code == 200
        assert "Still coming" in visible(pending.text)
    polled = await bench_client.get(f"/runs/{job_id}/dumps", headers={"HX-Request": "true"})
    assert polled.status_code == 200 and "HX-Refresh" not in polled.headers
    assert 'hx-trigger="every 3s"' in polled.text

    grant = await worker.lease()  # the follow-up, at the back of the queue
    assert grant is not None and grant["job_id"] == follow
    assert grant["spec"]["dumps"] == "only" and grant["spec"]["target"] == target
    own = run_here(grant["spec"])
    assert own["artifacts"]["hlo"] is None  # the follow-up compiles only for its dumps
    assert (await worker.finish(grant, **own)).status_code == 200

    polled = await bench_client.get(f"/runs/{job_id}/dumps", headers={"HX-Request": "true"})
    assert polled.headers.get("HX-Refresh") == "true"  # the page reloads with them
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["dumps"]["status"] == "done" and job["dumps"]["pending"] == []
    assert job["run"]["artifacts"]["hlo"] == run["artifacts"]["hlo"]  # nothing replaced
    assert job["run"]["target"]["memory"] == run["target"]["memory"]
    for name in dumped:
        assert job["run"]["artifacts"][name]
        assert name in job["run"]["artifact_links"]
        full = await bench_client.get(f"/api/v1/jobs/{job_id}/artifacts/{name}")
        assert full.status_code == 200 and len(full.text) > 100
    page = visible((await bench_client.get(f"/runs/{job_id}")).text)
    assert "Still coming" not in page
    ir = (await bench_client.get(f"/runs/{job_id}/ir/{dumped[0]}")).text
    assert "Still coming" not in ir and "line" in ir
    if target.startswith("v6e"):
        assert job["run"]["target"]["kernels"]  # the bundles' schedules came too
        assert "follow-up job" in job["run"]["target"]["compile_timing"]
    follow_page = visible((await bench_client.get(f"/runs/{follow}")).text)
    assert f"of run {job_id} , which went first" in follow_page


async def test_a_failed_follow_up_says_so_and_polling_stops(
    bench_client: httpx.AsyncClient,
) -> None:
    job_id, worker = await first_part(bench_client, "jax-tpu", "v6e:1x1")
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.fail(grant["job_id"], "the runner ran out of memory")).status_code == 200
    page = visible((await bench_client.get(f"/runs/{job_id}")).text)
    assert "Not coming: the follow-up job" in page
    assert "ended failed: the runner ran out of memory" in page
    html = (await bench_client.get(f"/runs/{job_id}")).text
    assert "every 3s" not in html and 'http-equiv="refresh"' not in html
    pending = await bench_client.get(f"/runs/{job_id}/ir/bundles")
    assert pending.status_code == 200 and "Not coming" in visible(pending.text)


async def test_who_asks_for_what(bench_client: httpx.AsyncClient) -> None:
    only = await bench_client.post(
        "/api/v1/jobs", json={**MATMUL, "path": "jax-tpu", "target": "v6e:1x1", "dumps": "only"}
    )
    assert only.status_code == 422
    assert only.json()["detail"][0]["field"] == "dumps"
    assert "server's own follow-up" in only.json()["detail"][0]["message"]
    inline = await bench_client.post(
        "/api/v1/jobs", json={**MATMUL, "path": "jax-tpu", "target": "v6e:1x1", "dumps": "inline"}
    )
    assert inline.status_code == 202
    timed = await bench_client.post("/api/v1/jobs", json={**MATMUL, "path": "jax-cpu"})
    assert timed.status_code == 202
    worker = FakeWorker(bench_client, capabilities("cpu", targets=["v6e:1x1"]))
    await worker.register()
    specs = [g["spec"] for g in [await worker.lease(), await worker.lease()] if g]
    assert sorted(s["dumps"] for s in specs) == ["inline", "inline"]  # asked; nothing to split


async def test_an_inline_run_carries_its_dumps_and_queues_nothing(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {**MATMUL, "path": "jax-tpu", "target": "v6e:1x1", "dumps": "inline"}
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    worker = FakeWorker(bench_client, capabilities("cpu", targets=["v6e:1x1"]))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.finish(grant, **run_here(grant["spec"]))).status_code == 200
    job = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()
    assert job["run"]["artifacts"]["bundles"] and job["dumps"] is None
    assert await worker.lease() is None
