"""The bench's pages, in-process: the run form, a run's page with a real result, history,
workers, the CSV and IR views. Results come from the real engine (JAX on the CPU)."""

from __future__ import annotations

import copy
import csv
import io
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.bench_fakes import FakeWorker
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

SMALL = {"m": 64, "n": 48, "k": 32, "dtype": "float32"}


@pytest.fixture(scope="module")
def real_results() -> dict[str, dict[str, Any]]:
    """A valid and a deliberately perturbed run of a small matmul, made by the engine."""
    from workers.run.engine import run_job

    spec = JobSpec.model_validate(
        {"workload": "matmul", "params": SMALL, "measure": {"samples": 12}}
    )
    good = run_job(spec).model_dump(mode="json")
    from workers.measure.faults import perturbed

    with perturbed(0.5):
        bad = run_job(spec).model_dump(mode="json")
    return {"good": good, "bad": bad}


async def submit_form(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    data = {
        "workload": "matmul",
        "path": "jax-cpu",
        "param.m": "64",
        "param.n": "48",
        "param.k": "32",
        "param.dtype": "float32",
        "measure.samples": "12",
        "stages": ["compile", "execute"],
        **fields,
    }
    return await client.post("/runs", data=data)


async def finish_with(client: httpx.AsyncClient, result: dict[str, Any]) -> tuple[str, FakeWorker]:
    """Queue the form's job, lease it with a registered worker, post `result` for it."""
    worker = FakeWorker(client)
    await worker.register()
    r = await submit_form(client)
    assert r.status_code == 303
    job_id = r.headers["location"].rsplit("/", 1)[1]
    grant = await worker.lease()
    assert grant is not None and grant["job_id"] == job_id
    posted = await worker.post(
        "result",
        {
            "worker_id": worker.id,
            "job_id": job_id,
            "attempt": grant["attempt"],
            "result": {**result, "job": grant["spec"]},
            "run_seconds": 0.5,
        },
    )
    assert posted.status_code == 200, posted.text
    return job_id, worker


async def test_form_is_built_from_the_catalog(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.get("/runs/new?path=jax-gpu")
    assert r.status_code == 200
    html = r.text
    for name in ("m", "n", "k", "dtype", "precision"):
        assert f'name="param.{name}"' in html
    assert "Allowed: 1–16,384" in html
    assert '<option value="jax-gpu" selected>jax-gpu (no worker connected)' in html
    frag = await bench_client.get("/runs/new?workload=attention", headers={"HX-Request": "true"})
    assert frag.text.startswith("<form")
    assert 'name="param.causal"' in frag.text


async def test_bad_form_input_names_the_field_and_keeps_every_value(
    bench_client: httpx.AsyncClient,
) -> None:
    r = await submit_form(bench_client, **{"param.m": "0", "param.n": "wide"})
    assert r.status_code == 422
    # Every field's problem at once, in plain words: the type error in n does not hide
    # the range error in m.
    assert "n must be a whole number (&#39;wide&#39; is not one)" in r.text
    assert "m must be at least 1" in r.text
    assert 'value="wide"' in r.text and 'value="0"' in r.text
    r = await submit_form(bench_client, **{"param.m": "0"})
    assert r.status_code == 422
    assert "m must be at least 1" in r.text and "greater than or equal" not in r.text
    assert 'value="0"' in r.text and 'value="48"' in r.text
    r = await submit_form(bench_client, **{"measure.samples": "many"})
    assert r.status_code == 422 and "samples must be a count or auto" in r.text
    # A sample count out of range used to hide the parameters' problems until the next try.
    r = await submit_form(
        bench_client, **{"param.m": "-3", "param.n": "abc", "measure.samples": "0"}
    )
    assert r.status_code == 422 and "m must be at least 1" in r.text
    assert "samples must be at least 1" in r.text and "n must be a whole number" in r.text
    api = await bench_client.post(
        "/api/v1/jobs",
        json={"workload": "matmul", "params": {"m": -3}, "measure": {"samples": 0}},
    )
    assert {d["field"] for d in api.json()["detail"]} == {"params.m", "measure.samples"}
    # Nothing was queued by any of these.
    assert (await bench_client.get("/api/v1/jobs")).json()["count"] == 0


async def test_a_queued_job_says_why_it_waits(bench_client: httpx.AsyncClient) -> None:
    r = await submit_form(bench_client, path="jax-gpu")
    assert r.status_code == 303
    page = await bench_client.get(r.headers["location"])
    assert page.status_code == 200
    assert "no worker for jax-gpu is connected" in page.text
    assert 'hx-sse:connect="/runs/' in page.text
    assert "boundary run matmul m=64 n=48 k=32 dtype=float32 --path jax-gpu" in page.text


async def test_a_done_run_shows_everything_it_measured(
    bench_client: httpx.AsyncClient, real_results: dict[str, dict[str, Any]]
) -> None:
    job_id, _ = await finish_with(bench_client, real_results["good"])
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Correct within tolerance" in page
    assert "Boundary <code>host-sync</code> · 12 samples" in page
    assert '<svg class="samples"' in page and "median " in page
    for stat in ("min", "median", "q1", "q3", "iqr", "outliers"):
        assert f'<th scope="col">{stat}</th>' in page
    assert "Stage times" in page and "compile" in page
    assert "What XLA chose" in page
    assert 'data-artifact="hlo"' in page and 'data-artifact="stablehlo"' in page
    assert "device_kind" in page
    assert "GFLOP/s" in page

    ir = await bench_client.get(f"/runs/{job_id}/ir/stablehlo", headers={"HX-Request": "true"})
    assert ir.status_code == 200
    assert '<div class="ir-lines">' in ir.text and 'id="L1"' in ir.text
    assert "stablehlo.dot_general" in ir.text
    full = await bench_client.get(f"/runs/{job_id}/ir/hlo")
    assert full.text.startswith("<!doctype html>")

    as_json = (await bench_client.get(f"/runs/{job_id}.json")).json()
    api = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert as_json == api
    rows = list(
        csv.DictReader(io.StringIO((await bench_client.get(f"/runs/{job_id}/samples.csv")).text))
    )
    assert len(rows) == 12
    assert [float(r["seconds"]) for r in rows] == api["run"]["measurements"][0]["samples_s"]
    assert {r["boundary"] for r in rows} == {"host-sync"}

    history = (await bench_client.get("/runs?workload=matmul&status=done")).text
    assert job_id in history
    assert job_id not in (await bench_client.get("/runs?status=failed")).text
    workers = (await bench_client.get("/workers")).text
    assert "fake" in workers and "jax-cpu" in workers


async def test_a_run_that_fails_its_check_hides_its_speed(
    bench_client: httpx.AsyncClient, real_results: dict[str, dict[str, Any]]
) -> None:
    assert real_results["bad"]["valid"] is False
    job_id, _ = await finish_with(bench_client, real_results["bad"])
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Correctness check failed" in page
    assert "a run whose output failed the check shows no speed" in page
    assert '<svg class="samples"' not in page
    assert "GFLOP/s" not in page
    # The page, the JSON and the CSV agree: no samples anywhere.
    api = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert all(m["samples_s"] == [] and m["stats"] is None for m in api["run"]["measurements"])
    text = (await bench_client.get(f"/runs/{job_id}/samples.csv")).text
    assert list(csv.DictReader(io.StringIO(text))) == []


async def test_failures_are_shown_escaped(bench_client: httpx.AsyncClient) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    r = await submit_form(bench_client)
    job_id = r.headers["location"].rsplit("/", 1)[1]
    grant = await worker.lease()
    assert grant is not None
    await worker.fail(job_id, "runner crashed <script>alert(1)</script>", "<img src=x onerror=1>")
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<img src=x" not in page


async def test_live_progress_ends_with_the_result(
    bench_client: httpx.AsyncClient, real_results: dict[str, dict[str, Any]]
) -> None:
    job_id, _ = await finish_with(bench_client, real_results["good"])
    r = await bench_client.get(f"/runs/{job_id}/live")
    assert r.headers["content-type"].startswith("text/event-stream")
    assert "Status: done" in r.text
    assert f'hx-get="/runs/{job_id}"' in r.text
    # The stream ends by closing, not by an event the page must cancel the request on.
    assert "event: done" not in r.text
    # The header travels with the panel, out of band, and says the same status.
    assert 'id="run-badge" class="badge status-done" hx-swap-oob="true"' in r.text


async def test_unknown_runs_404(bench_client: httpx.AsyncClient) -> None:
    page = await bench_client.get("/runs/nope")
    assert page.status_code == 404
    # A site page in the runs section's words, with navigation; not the reader's 404.
    assert "No such run" in page.text and 'href="/runs"' in page.text
    assert "Valid paths" not in page.text and '<nav aria-label="Site">' in page.text
    assert (await bench_client.get("/runs/nope.json")).status_code == 404
    assert (await bench_client.get("/runs/nope/ir/secret")).status_code == 404


async def test_the_form_says_when_the_server_is_busy(bench_settings: Settings) -> None:
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"SUBMIT_RATE": 1}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        assert (await submit_form(client)).status_code == 303
        busy = await submit_form(client, **{"param.m": "77"})
        assert busy.status_code == 429
        assert int(busy.headers["retry-after"]) >= 1
        assert "Not queued: more than 1 submissions a minute" in busy.text
        assert 'value="77"' in busy.text  # nothing typed is lost
        assert (await client.get("/api/v1/jobs")).json()["count"] == 1


async def test_a_finished_run_asks_for_no_token_the_server_does_not_need(
    bench_client: httpx.AsyncClient, real_results: dict[str, dict[str, Any]]
) -> None:
    job_id, _ = await finish_with(bench_client, real_results["good"])
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Run again with the profiler" in page
    assert 'name="token"' not in page
    # Its one verdict sits first in the result, before any chart or table.
    assert page.index('id="verdict"') < page.index('id="stages-h"')


async def test_the_page_says_what_warm_up_discarded_and_the_samples_shape(
    bench_client: httpx.AsyncClient, real_results: dict[str, dict[str, Any]]
) -> None:
    from workers.measure.stats import summarize

    shaped = copy.deepcopy(real_results["good"])
    m = shaped["measurements"][0]
    kept = [1.0e-4, 2.2e-4] * 6
    m.update(samples_s=kept, stats=summarize(kept).model_dump(), warmup_discarded=4,
             warmup_samples_s=[6e-4] * 4, shape="bimodal", shape_checked=True)  # fmt: skip
    job_id, _ = await finish_with(bench_client, shaped)
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert 'class="badge shape-bimodal"' in page and "two clusters of times" in page
    assert "the first 4 samples, about 3.7× slower at their median, were discarded" in page
    stored = (await bench_client.get(f"/runs/{job_id}.json")).json()["run"]["measurements"][0]
    assert (stored["warmup_discarded"], stored["shape"]) == (4, "bimodal")
    steady = (await finish_with(bench_client, real_results["good"]))[0]
    plain = (await bench_client.get(f"/runs/{steady}")).text
    judged = real_results["good"]["measurements"][0]["shape"]  # this machine's own samples
    assert ("shape-bimodal" in plain) is (judged == "bimodal")
    compared = (await bench_client.get(f"/compare?a={job_id}&b={steady}")).text
    assert 'class="badge shape-bimodal"' in compared and "4 warm-up discarded" in compared
    assert "1 bimodal and 0 drifting of 1 usable run on side A" in compared
