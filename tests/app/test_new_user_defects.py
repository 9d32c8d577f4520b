"""What a new user hit, checked where a browser cannot see it better: answers, messages,
numbers and the markup each fixed page sends (the every-page browser suite looks at the
same pages in Chromium)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from app.pages.matrices import group_size
from app.pages.runs.memory_fit import memory_fit
from tests.app.bench_fakes import FakeWorker, capabilities
from tests.app.ir_runs import attention_result, post_run

pytestmark = pytest.mark.anyio


def text(html: str) -> str:
    """What a person reads: the page without its tags."""
    return unescape(re.sub(r"<[^>]+>", "", html))


@pytest.fixture(scope="module")
def b200_attention() -> dict[str, Any]:
    """A real compile of attention for a B200, without the hardware: fusion decisions
    (estimates, some fused) and a launch order of three kernels."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    spec = {
        "workload": "attention",
        "path": "jax-gpu",
        "target": "b200:1",
        "params": {"batch": 1, "heads": 2, "seq_len": 128, "head_dim": 64},
    }
    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")


@pytest.mark.slow
async def test_a_gpu_targets_reports_page_shows_the_launch_order_and_what_each_estimate_became(
    bench_client: httpx.AsyncClient, b200_attention: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, b200_attention)
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    link = job["run"]["artifact_links"]["pipeline"]
    stored = await bench_client.get(link)  # it was a 404 before
    assert stored.status_code == 200 and "thunk_sequence.txt" in stored.json()["files"]

    page = await bench_client.get(f"/runs/{job_id}/pipeline")
    assert page.status_code == 200
    html = unescape(page.text)
    seen = text(page.text)
    assert "<h1>Fusion decisions and launch order of run" in html  # not "Pass pipeline"
    assert "Where did this come from" not in seen  # no pipeline, no origins to trace
    # The launch order as rows: the thunk, its kernel, its grid and threads.
    rows = re.findall(r"<table class=\"stats thunks\">.*?</table>", html, re.S)
    assert rows, "no launch-order table"
    cells = text(rows[0])
    assert "custom kernel" in cells and "gemm_fusion_dot" in cells and "× 1 × 1" in cells
    assert cells.count("custom kernel") == 3  # every line of thunk_sequence.txt
    # The caption sits with the launch order, once; the fusion dump is shown once.
    assert seen.count("The launch order of the compiled program") == 0
    assert html.count('data-artifact="report"') == 2
    # Each estimate says what became of it; a fused-away name links to nothing.
    assert "estimate: fused" in seen and "estimate: not fused" in seen
    assert "?q=exp.0.0" not in html and "<code>exp.0.0</code>" in html

    run_page = text((await bench_client.get(f"/runs/{job_id}")).text)
    assert "fusion decisions and launch order" in run_page
    assert "Environment of the compiling host" in run_page


async def test_a_bad_query_value_on_a_page_is_a_site_page_and_stays_json_elsewhere(
    bench_client: httpx.AsyncClient,
) -> None:
    job_id = await post_run(bench_client, attention_result())
    for url, words in (
        (f"/runs/{job_id}/ir/hlo?start=-5", "start must be at least 1"),
        (f"/runs/{job_id}/pipeline?step=abc", "step must be a whole number"),
    ):
        page = await bench_client.get(url)
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
        assert "Not a value this page takes" in page.text and words in page.text
    api = await bench_client.get("/api/v1/jobs?limit=-1")
    assert api.status_code == 422 and api.headers["content-type"] == "application/json"


def test_refusals_are_said_in_plain_words() -> None:
    from pydantic import ValidationError

    from app.queue.matrices import MatrixSpec
    from app.queue.validation import JobRefused, validate_job
    from app.web.problems import pydantic_problems

    with pytest.raises(JobRefused) as refused:
        validate_job({"workload": "matmul", "measure": {"samples": 0}}, 2**31)
    assert refused.value.problems == [("measure.samples", "samples must be at least 1, or 'auto'")]
    for axis, words in (
        ({"name": "9x", "values": [1]}, "name must be letters, digits and _, not starting"),
        ({"name": "m", "values": []}, "values must not be empty"),
    ):
        with pytest.raises(ValidationError) as caught:
            MatrixSpec.model_validate({"workload": "matmul", "axis": axis, "paths": ["jax-cpu"]})
        (problem,) = pydantic_problems(caught.value)
        assert words in problem[1] and "pattern" not in problem[1] and "items" not in problem[1]
    with pytest.raises(JobRefused) as big:
        validate_job({"workload": "matmul", "params": {"m": 16384, "n": 16384, "k": 16384}}, 2**31)
    (message,) = [m for _, m in big.value.problems]
    assert "3.22 GB (3,221,225,472 bytes), over this server's limit of 2.15 GB" in message
    assert "Compiled for a target without running" in message


async def test_an_emptied_parameter_box_is_refused_not_run_with_the_default(
    bench_client: httpx.AsyncClient,
) -> None:
    form = {"workload": "matmul", "path": "jax-cpu", "param.m": "", "param.n": "64"}
    sent = await bench_client.post("/runs", data={**form, "stages": "compile"})
    assert sent.status_code == 422
    assert "m is required; the default is 512" in text(sent.text)


def test_the_memory_fit_says_tb_and_labels_the_hbm_line_at_the_line() -> None:
    memory = {
        "argument_bytes": 4 * 10**11,
        "output_bytes": 10**11,
        "temp_bytes": 6 * 10**11,
        "generated_code_bytes": 3 * 10**10,
        "hbm_bytes": 180 * 10**9,
        "hbm_label": "180 GB HBM3E per GPU",
        "source": "nvidia",
    }
    fit = memory_fit(memory, "b200", 1)
    assert fit is not None
    assert fit["verdict"] == "Does not fit by 950 GB: needs 1.13 TB, has 180 GB"
    label = next(e for e in fit["chart"].elements if e.tag == "text")
    bars = next(e for e in fit["chart"].elements if e.tag == "svg")
    line = next(e for e in bars.children if e.tag == "line")
    assert label.text == "HBM 180 GB"
    # At the line: the label is placed in percent of the chart's width, the line in the
    # bars' own units, which stretch to that width.
    width = float(bars.attrs["viewBox"].split()[2])
    at = float(label.attrs["x"].rstrip("%"))
    assert abs(at - 100 * float(line.attrs["x1"]) / width) < 0.01
    assert label.attrs["text-anchor"] == "start" and label.attrs["dx"] == "4"
    temps = {"peak_bytes": 500 * 10**9, "temp_bytes": 500 * 10**9}
    refused = memory_fit({**memory, **temps}, "v6e", 1, refused="libtpu: …")
    assert refused is not None and refused["verdict"].startswith("Does not fit by at least")


async def test_workers_lists_every_target_a_worker_advertises(
    bench_client: httpx.AsyncClient,
) -> None:
    targets = ["v6e:1x1", "v6e:2x4", "b200:1", "b200:8", "h100:8"]
    worker = FakeWorker(bench_client, capabilities("cpu", targets=targets))
    await worker.register()
    page = text((await bench_client.get("/workers")).text)
    for target in targets:
        assert target in page


async def test_the_matrix_form_follows_its_workload(bench_client: httpx.AsyncClient) -> None:
    start = unescape((await bench_client.get("/matrices/new")).text)
    assert 'name="axis.values" rows="3" spellcheck="false">m=256, n=256, k=256' in start
    query = {"workload": "attention", "shown": "matmul", "title": "mine", "paths": "jax-cpu"}
    query |= {"axis.name": "shape", "axis.values": "m=256, n=256, k=256"}
    switched = unescape((await bench_client.get("/matrices/new", params=query)).text)
    assert 'name="axis.name" value="seq_len"' in switched  # attention's own rows
    assert 'spellcheck="false">128, 256</textarea>' in switched
    assert 'name="title" value="mine"' in switched  # what was typed stays


def test_a_collectives_group_size_is_read_in_every_form_the_hlo_writes() -> None:
    assert group_size({"groups": [[0, 1, 2, 3], [4, 5, 6, 7]]}) == "groups of 4"
    assert group_size({"replica_groups": "mesh['x'=1,'y'=8] {'y'}"}) == "groups of 8"
    assert group_size({"replica_groups": "mesh['x'=2,'y'=4] {'x','y'}"}) == "groups of 8"
    assert group_size({"replica_groups": "[2,4]<=[8]"}) == "groups of 4"
    assert group_size({"replica_groups": "{}"}) == "all devices"
    assert group_size({"replica_groups": "{{0,1},{2,3}}"}) == "groups of 2"


async def test_runs_tell_sharded_runs_apart(bench_client: httpx.AsyncClient) -> None:
    for sharding in ("tensor", "data"):
        body = {"workload": "sharded-matmul", "params": {"sharding": sharding}}
        assert (await bench_client.post("/api/v1/jobs", json=body)).status_code == 202
    runs = text((await bench_client.get("/runs")).text)
    assert "sharding=tensor devices=8" in runs and "sharding=data devices=8" in runs


async def test_the_run_form_says_which_workloads_take_a_slice(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client, capabilities("cpu", targets=["v6e:1x1", "v6e:2x4"]))
    await worker.register()
    form = text((await bench_client.get("/runs/new?workload=matmul&path=jax-tpu")).text)
    assert "matmul runs on one device, so only one-device targets are offered" in form
    assert "take a workload that spans devices: sharded-matmul, collective" in form
    sharded = text((await bench_client.get("/runs/new?workload=sharded-matmul&path=jax-tpu")).text)
    assert "only one-device targets" not in sharded


async def test_search_marks_the_term_and_the_pass_list_can_hide_unchanged_steps(
    bench_client: httpx.AsyncClient,
) -> None:
    job_id = await post_run(bench_client, attention_result())
    found = await bench_client.get(f"/runs/{job_id}/ir/hlo?q=DOT")
    assert re.search(r"<mark>dot</mark>", found.text, re.I), "the matched term is not marked"
    card = (await bench_client.get("/")).text
    # The embed snippet's copy button exists only for JavaScript to reveal.
    assert '<button type="button" data-copy="embed-snippet" hidden>' in card


async def test_the_landing_page_offers_the_tour_and_its_second_button_compares(
    bench_client: httpx.AsyncClient,
) -> None:
    page = unescape((await bench_client.get("/")).text)
    assert "Compile for a TPU v6e:2x4 slice</button>" in page
    assert '<form method="post" action="/tour/compare">' in page
    sent = await bench_client.post(
        "/tour/compare", content=b"", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert sent.status_code == 303
    a, b = re.match(r"/compare\?a=(\w+)&b=(\w+)$", sent.headers["location"]).groups()  # type: ignore[union-attr]
    jobs = [(await bench_client.get(f"/api/v1/jobs/{i}")).json() for i in (a, b)]
    assert [j["target"] for j in jobs] == ["v6e:2x4", "h100:8"]
    assert all(j["stages"] == ["compile"] and j["workload"] == "sharded-matmul" for j in jobs)


async def test_the_runs_list_names_a_pallas_kernel(bench_client: httpx.AsyncClient) -> None:
    """Two compiles of one matmul for an H100, one with a Pallas kernel: /runs told them
    apart by nothing (same shape, dtype, path and target)."""
    body: dict[str, Any] = {
        "workload": "matmul",
        "path": "jax-gpu",
        "target": "h100:1",
        "params": {"m": 512, "n": 512, "k": 512},
    }
    ids = {}
    for kernel in ("xla", "pallas"):
        sent = {**body, "params": {**body["params"], "kernel": kernel}}
        queued = await bench_client.post("/api/v1/jobs", json=sent)
        assert queued.status_code == 202, queued.text
        ids[kernel] = queued.json()["id"]
    page = unescape((await bench_client.get("/runs")).text)
    rows = {
        k: re.search(rf"<tr[^>]*>(?:(?!</tr>).)*{v}(?:(?!</tr>).)*</tr>", page, re.S)
        for k, v in ids.items()
    }
    assert rows["pallas"] and rows["xla"]
    assert "kernel=pallas (triton)" in text(rows["pallas"].group(0))
    assert "pallas" not in text(rows["xla"].group(0))
