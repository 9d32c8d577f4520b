"""What a new user reads on the pages, in-process: words, units, names and contrast.

Each test is one finding of the browser review: plurals, relative times, the units and
columns of /runs, worker names, the outlier counts explained, no samples CSV on a
compile-only run, code colours that meet 4.5:1, and charts whose labels are escaped.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from chart_markup import render_chart

from app.pages.compare.plot import RunSamples, distributions_svg
from app.web.templating import CODE_BACKGROUND, contrast, plural, pygments_css, relative_time
from tests.app.bench_fakes import MATMUL, FakeWorker, run_result
from workers.measure.stats import summarize

pytestmark = pytest.mark.anyio


def test_plurals_agree_with_their_count() -> None:
    assert plural(1, "fusion") == "1 fusion"
    assert plural(0, "fusion") == "0 fusions"
    assert plural(2, "copy", "copies") == "2 copies"


def test_times_read_relative_with_the_exact_time_on_hover() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    three_min = (now - timedelta(minutes=3)).isoformat()
    html = str(relative_time(three_min, now))
    assert ">3 min ago</time>" in html
    assert 'title="2026-11-30 11:57:00 UTC"' in html
    assert ">just now<" in str(relative_time(now.isoformat(), now))
    assert ">2 days ago<" in str(relative_time((now - timedelta(days=2)).isoformat(), now))


def test_every_code_colour_meets_4_5_to_1() -> None:
    colours = re.findall(r"(?<![-\w])color: (#[0-9a-fA-F]{3,6})\b", pygments_css())
    assert len(colours) > 20
    low = {c: round(contrast(c, CODE_BACKGROUND), 2) for c in colours}
    assert all(v >= 4.5 for v in low.values()), {c: v for c, v in low.items() if v < 4.5}


def test_chart_labels_are_escaped_by_the_template() -> None:
    runs = [RunSamples("A", "<script>x</script>", [1e-3, 2e-3], 1.5e-3)]
    html = str(render_chart(distributions_svg(runs, "host-sync<b>")))
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;" in html and "host-sync&lt;b&gt;" in html
    # Drawn at its own size: the text's 12 px never shrinks.
    assert re.search(r'<svg class="dists" viewBox="0 0 (\d+) (\d+)" width="\1" height="\2"', html)


async def _done_run(client: httpx.AsyncClient, **changes: object) -> tuple[str, FakeWorker]:
    worker = FakeWorker(client)
    r = await worker.post("register", {"capabilities": worker.caps, "name": "bench-box-1"})
    worker.id = r.json()["worker_id"]
    created = await client.post("/api/v1/jobs", json={**MATMUL, **changes})
    assert created.status_code == 202, created.text
    grant = await worker.lease()
    assert grant is not None
    if changes.get("stages") == ["compile"]:
        result = run_result(grant["spec"]) | {"measurements": []}
        body = {"worker_id": worker.id, "job_id": grant["job_id"], "attempt": 1}
        assert (await worker.post("result", {**body, "result": result})).status_code == 200
    else:
        samples = [5.0e-5, 5.6e-5, 5.9e-5, 6.1e-5, 9.9e-5]
        stats = summarize(samples).model_dump(mode="json")
        measurement = {"boundary": "host-sync", "samples_s": samples, "stats": stats}
        r = await worker.finish(grant, measurements=[measurement])
        assert r.status_code == 200, r.text
    return grant["job_id"], worker


async def test_runs_lists_shape_dtype_target_in_run_page_units(
    bench_client: httpx.AsyncClient,
) -> None:
    job_id, _ = await _done_run(bench_client)
    page = (await bench_client.get("/runs")).text
    header = re.search(r"<thead>(.*?)</thead>", page, re.S)
    assert header is not None
    columns = re.findall(r'<th scope="col">([^<]+)</th>', header.group(1))
    assert columns[:6] == ["job", "workload", "shape", "dtype", "path", "target"]
    row = page[page.index(f'href="/runs/{job_id}"') :]
    row = row[: row.index("</tr>")]
    assert "<code>k=64 m=64 n=64</code>" in row
    assert "<code>float32</code>" in row
    # The median in the run page's unit (µs), not milliseconds to four figures.
    assert "59.0 µs (host-sync, n=5)" in row and " ms " not in row, row
    assert re.search(r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">', row)
    assert "1 job." in page


async def test_a_run_page_names_its_worker_and_explains_outliers(
    bench_client: httpx.AsyncClient,
) -> None:
    job_id, _ = await _done_run(bench_client)
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert re.search(r"worker <code title=\"[^\"]+\">bench-box-1</code>", page)
    assert "1 attempt ·" in page
    assert re.search(
        r"Outliers (\d+);(\d+): \1 beyond 1 standard deviation of the mean; \2 beyond 1\.5 IQR",
        page,
    )
    assert '<code class="run-id">' in page
    assert 'href="/runs/' + job_id + '/samples.csv"' in page


async def test_a_compile_only_run_offers_no_samples_csv(bench_client: httpx.AsyncClient) -> None:
    job_id, _ = await _done_run(bench_client, stages=["compile"])
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "samples (CSV)" not in page
    assert "/samples.csv" not in page


async def test_every_bad_field_is_named_at_once_in_plain_words(
    bench_client: httpx.AsyncClient,
) -> None:
    body = {"workload": "matmul", "params": {"m": 0, "n": 99999999, "k": "8"}}
    r = await bench_client.post("/api/v1/jobs", json=body)
    assert r.status_code == 422
    problems = {p["field"]: p["message"] for p in r.json()["detail"]}
    assert problems["params.m"].startswith("m must be at least 1")
    assert problems["params.n"].startswith("n must be at most 16384")
    assert problems["params.k"].startswith("k must be a whole number")
