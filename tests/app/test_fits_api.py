"""Fit searches over the API, on both backends: a search over a catalog workload's integer
finds, per target, the largest value that fits (and proves it with the next value);
every probe is a compile-only job without dumps; a bad search is refused naming its
field; a search can be cancelled; its probes never expire in the queue."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.fit_fakes import TPU_KEEPS, affine, play, probe_worker

pytestmark = pytest.mark.anyio

BASE = int(1e9)
PER = int(3e8)
PEAK = affine(BASE, PER)
SEARCH: dict[str, Any] = {
    "workload": "attention",
    "params": {"heads": 8, "seq_len": 1024, "head_dim": 64},
    "dimension": "batch",
    "range": [1, 256],
    "targets": ["h100:1", "v6e:1x1"],
}


@pytest.fixture
def bench_db(db: str) -> str:
    """Every test here on SQLite and on PostgreSQL."""
    return db


async def test_a_search_finds_the_largest_batch_per_target_and_proves_it(
    bench_client: httpx.AsyncClient,
) -> None:
    created = await bench_client.post("/api/v1/fits", json=SEARCH)
    assert created.status_code == 202, created.text
    fit_id = created.json()["id"]
    assert created.headers["location"] == f"/api/v1/fits/{fit_id}"
    queued = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    assert queued["status"] == "queued" and queued["dimension"] == "batch"
    for target in queued["targets"]:  # the seeds: lo and the upper log quartile, at once
        assert [p["value"] for p in target["probes"]] == [1, 64]
        assert target["probes_pending"] == 2 and target["status"] == "searching"

    worker = await probe_worker(bench_client, SEARCH["targets"])
    grants = await play(worker, PEAK)
    for grant in grants:  # compile only, for the target, with no dumps and no follow-up
        spec = grant["spec"]
        assert spec["stages"] == ["compile"] and spec["dumps"] == "none"
        assert spec["path"] == {"h100:1": "jax-gpu", "v6e:1x1": "jax-tpu"}[spec["target"]]
        assert not grant["job_id"].endswith("-dumps")

    done = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    assert done["status"] == "done", done
    gpu, tpu = done["targets"]
    usable = int(80e9 * 0.75)
    assert gpu["usable_bytes"] == usable and gpu["rule"] == "usable"
    assert "0.75 × 80 GB" in gpu["criterion"]
    assert gpu["largest_fitting"] == (usable - BASE) // PER == 196
    assert gpu["peak_bytes_at_largest"] == PEAK(196) <= usable < PEAK(197)
    assert gpu["value_above"] == 197 and gpu["peak_bytes_above"] == PEAK(197)
    assert tpu["rule"] == "libtpu" and tpu["usable_bytes"] is None
    assert tpu["largest_fitting"] == (TPU_KEEPS - BASE) // PER == 108
    assert tpu["refused_above"].startswith("Ran out of memory on HBM")
    for target in (gpu, tpu):
        assert target["status"] == "found" and target["probes_pending"] == 0
        assert target["probes_done"] == len(target["probes"])
        # At most five compiles to find it; one more checks it: the next multiple of 32
        # (of 16 on the v6e), at most a quarter of the value that does not fit.
        assert target["probes_done"] - target["checks_done"] <= 5
        check = {"h100:1": 224, "v6e:1x1": 112}[target["target"]]
        assert target["checks_done"] == 1 and target["probes"][-1]["value"] == check
        assert target["non_monotone"] is False and target["non_monotone_probes"] == []
        for probe in target["probes"]:
            job = (await bench_client.get(f"/api/v1/jobs/{probe['run_id']}")).json()
            assert job["status"] == "done" and job["params"]["batch"] == probe["value"]
            assert probe["fits"] == (probe["value"] <= target["largest_fitting"])
    listed = (await bench_client.get("/api/v1/fits")).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == fit_id


async def test_when_hi_fits_or_lo_does_not_the_answer_says_so(
    bench_client: httpx.AsyncClient,
) -> None:
    small = {**SEARCH, "range": [1, 64], "targets": ["b200:1"]}
    fit_id = (await bench_client.post("/api/v1/fits", json=small)).json()["id"]
    huge = {**SEARCH, "range": [200, 256], "targets": ["h100:1"]}
    none_id = (await bench_client.post("/api/v1/fits", json=huge)).json()["id"]
    await play(await probe_worker(bench_client, ["b200:1", "h100:1"]), PEAK)
    (everything,) = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()["targets"]
    assert everything["largest_fitting"] == 64 and everything["largest_is_hi"]
    assert everything["value_above"] is None
    (nothing,) = (await bench_client.get(f"/api/v1/fits/{none_id}")).json()["targets"]
    assert nothing["status"] == "found" and nothing["largest_fitting"] is None
    assert nothing["value_above"] == 200 and nothing["peak_bytes_above"] == PEAK(200)


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"artifact": "a" * 64}, "workload", "either workload or artifact"),
        ({"range": [64, 8]}, "range", "hi (8) is below lo (64)"),
        ({"range": [1, 256], "step": 8}, "step", "not a multiple of step"),
        ({"targets": ["v6e:3x3"]}, "targets", "not a v6e slice"),
        ({"path": "jax-gpu"}, "path", "jax-gpu does not suit target v6e:1x1"),
        ({"usable_fraction": 1.5}, "usable_fraction", "at most 1"),
        ({"step": True}, "step", "integer"),
        ({"surprise": 1}, "surprise", "unknown field"),
        ({"dimension": "causal"}, "dimension", "integers: batch, heads, seq_len"),
        ({"range": [1, 1000]}, "range", "1 ≤ batch ≤ 256"),
        ({"params": {"batch": 2}}, "params.batch", "takes its values from range"),
        ({"workload": "nothing"}, "workload", "no workload 'nothing'"),
    ],
)
async def test_a_bad_search_is_refused_naming_its_field(
    bench_client: httpx.AsyncClient, change: dict[str, Any], field: str, says: str
) -> None:
    refused = await bench_client.post("/api/v1/fits", json={**SEARCH, **change})
    assert refused.status_code == 422, refused.text
    problems = refused.json()["detail"]
    assert any(p["field"] == field and says in p["message"] for p in problems), problems
    assert (await bench_client.get("/api/v1/fits")).json()["count"] == 0
    assert (await bench_client.get("/api/v1/jobs")).json()["count"] == 0


async def test_a_search_is_cancelled_with_its_probes(bench_client: httpx.AsyncClient) -> None:
    fit_id = (await bench_client.post("/api/v1/fits", json=SEARCH)).json()["id"]
    cancelled = await bench_client.post(f"/api/v1/fits/{fit_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled"
    assert [t["status"] for t in body["targets"]] == ["cancelled", "cancelled"]
    for target in body["targets"]:
        for probe in target["probes"]:
            job = (await bench_client.get(f"/api/v1/jobs/{probe['run_id']}")).json()
            assert job["status"] == "cancelled"
    again = await bench_client.post(f"/api/v1/fits/{fit_id}/cancel")
    assert again.status_code == 409 and "already ended (cancelled)" in again.text
    assert (await bench_client.post("/api/v1/fits/nope/cancel")).status_code == 404


class TestQueueTimeout:
    """With a queue timeout that has passed as soon as a job is in."""

    @pytest.fixture
    def bench_settings(self, bench_settings: Settings) -> Settings:
        return bench_settings.model_copy(update={"QUEUE_TIMEOUT_S": 1e-6})

    async def test_probes_of_a_live_search_never_expire_in_the_queue(
        self, bench_client: httpx.AsyncClient, bench_dispatcher: Any
    ) -> None:
        fit_id = (await bench_client.post("/api/v1/fits", json=SEARCH)).json()["id"]
        plain = await bench_client.post(
            "/api/v1/jobs",
            json={"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1"},
        )
        bench_dispatcher.reap()
        job = (await bench_client.get(f"/api/v1/jobs/{plain.json()['id']}")).json()
        assert job["status"] == "expired"
        fit = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
        assert fit["status"] == "queued"
        assert all(p["status"] == "queued" for t in fit["targets"] for p in t["probes"])
        assert "no worker" in fit["targets"][1]["probes"][0]["waiting"]


async def test_a_probe_that_fails_fails_its_target_and_says_why(
    bench_client: httpx.AsyncClient,
) -> None:
    one = {**SEARCH, "targets": ["h100:1"]}
    fit_id = (await bench_client.post("/api/v1/fits", json=one)).json()["id"]
    worker = await probe_worker(bench_client, ["h100:1"])
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.fail(grant["job_id"], "the compiler crashed")).status_code == 200
    await play(worker, PEAK)
    fit = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    assert fit["status"] == "failed"
    (target,) = fit["targets"]
    assert target["status"] == "failed" and "the compiler crashed" in target["reason"]
    assert "h100:1: the probe at" in fit["reason"]


class TestRetention:
    """With a server that keeps no finished job for long."""

    @pytest.fixture
    def bench_settings(self, bench_settings: Settings) -> Settings:
        return bench_settings.model_copy(update={"RETAIN_DAYS": 1e-12})

    async def test_an_ended_search_goes_with_its_probes_jobs_a_live_one_stays(
        self, bench_client: httpx.AsyncClient, bench_dispatcher: Any
    ) -> None:
        one = {**SEARCH, "targets": ["h100:1"]}
        ended = (await bench_client.post("/api/v1/fits", json=one)).json()["id"]
        await play(await probe_worker(bench_client, ["h100:1"]), PEAK)
        live = (await bench_client.post("/api/v1/fits", json=one)).json()["id"]
        bench_dispatcher.prune()
        assert (await bench_client.get(f"/api/v1/fits/{ended}")).status_code == 404
        kept = (await bench_client.get(f"/api/v1/fits/{live}")).json()
        assert kept["status"] == "queued" and len(kept["targets"][0]["probes"]) == 2
