"""A run's memory report as a person and a program meet it: real compiles (this CPU, and
v6e:1x1 and h100:1 without the hardware) posted through the worker API in-process, then
`GET /api/v1/runs/{id}/memory`, the run page's Memory section and `/runs/{id}/memory`:
the curve, the peak's make-up, the buffers with their instruction and source links. A run
without a report, and one whose figures do not add up, answer 200 saying why (only an
unknown id is 404); the page shows the withheld report's two peaks instead of hiding them."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities
from workers.protocol import CHIPS, JobSpec, TargetModel

pytestmark = pytest.mark.anyio

KEYS = {
    "peak_bytes", "hbm_bytes", "peak_step", "steps", "by_kind", "padding_bytes",
    "unattributed_bytes", "memory_analysis", "buffers", "other", "timeline",
}  # fmt: skip
BUFFER_KEYS = {
    "bytes", "logical_bytes", "kind", "instructions", "shape", "layout", "op_name",
    "source", "library", "parameter_path", "live", "live_at_peak", "held_bytes",
}  # fmt: skip


def run_here(spec: dict[str, Any]) -> dict[str, Any]:
    from workers.run.engine import run_job

    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")


async def posted(
    client: httpx.AsyncClient, spec: dict[str, Any], platform_targets: list[str], **changes: Any
) -> str:
    """Queue `spec`, compile it for real as its worker would, post it (with `changes`)."""
    assert (await client.post("/api/v1/jobs", json=spec)).status_code == 202
    worker = FakeWorker(client, capabilities("cpu", targets=platform_targets))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    result = run_here(grant["spec"]) | changes
    assert (await worker.finish(grant, **result)).status_code == 200
    return str(grant["job_id"])


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


CASES = [
    ({"workload": "matmul", "params": {"m": 1000, "n": 1000, "k": 1000, "dtype": "bfloat16"},
      "path": "jax-tpu", "target": "v6e:1x1"}, TargetModel.V6E),
    ({"workload": "attention", "params": {"batch": 1, "heads": 4, "seq_len": 256, "head_dim": 64},
      "path": "jax-gpu", "target": "h100:1"}, TargetModel.H100),
    ({"workload": "attention", "params": {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32},
      "measure": {"samples": 3}}, None),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "model"), CASES, ids=["v6e", "h100", "cpu"])
async def test_the_api_gives_the_report_and_the_pages_show_it(
    bench_client: httpx.AsyncClient, spec: dict[str, Any], model: TargetModel | None
) -> None:
    job_id = await posted(bench_client, spec, [spec["target"]] if model else [])
    answer = await bench_client.get(f"/api/v1/runs/{job_id}/memory")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert set(report) >= KEYS and all(set(b) >= BUFFER_KEYS for b in report["buffers"])
    assert report["hbm_bytes"] == (CHIPS[model].hbm_bytes if model else None)
    curve = dict(map(tuple, report["timeline"]))
    assert max(curve.values()) == report["peak_bytes"] == curve[report["peak_step"]]
    live = sum(b["held_bytes"] for b in report["buffers"] if b["live_at_peak"])
    live += report["other"]["live_at_peak_bytes"]
    counted = sum(k["counted_bytes"] for k in report["blocks"])
    assert live + counted + report["unattributed_bytes"] == report["peak_bytes"]
    assert report["reason"] is None and report["memory_analysis"]["why"] is None
    sizes = [b["bytes"] for b in report["buffers"]]
    assert sizes == sorted(sizes, reverse=True)
    compared = report["memory_analysis"]["compared_bytes"]
    assert abs(report["peak_bytes"] - compared) <= 0.01 * compared
    if model is not None:  # one peak: the memory report's is "Does it fit?"'s, to the byte
        job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
        assert job["run"]["target"]["memory"]["peak_bytes"] == report["peak_bytes"]
    assert set(report["by_kind"]) >= {"parameter", "output", "temporary", "constant", "other"}

    page = (await bench_client.get(f"/runs/{job_id}")).text
    nav = page.split('<nav class="run-nav"', 1)[1].split("</nav>", 1)[0]
    assert '<a href="#memory-h">memory</a>' in nav and 'id="memory-h"' in page
    section = page.split('id="memory-h"', 1)[1].split("</section>", 1)[0]
    assert '<svg class="memory-curve"' in section and '<svg class="memory-kinds"' in section
    words = text_of(section)
    assert "compiler's plan for one device" in words and "counted once" in words
    full = await bench_client.get(f"/runs/{job_id}/memory")
    assert full.status_code == 200
    rows = re.findall(r'<tr class="buffer kind-(\w+)" data-bytes="(\d+)">', full.text)
    assert len(rows) == len(report["buffers"])
    links = set(re.findall(r'href="(/runs/[^"]+/ir/hlo\?(?:q|src)=[^"]+)"', full.text))
    assert any("?q=" in link for link in links) and any("?src=" in link for link in links)
    for link in sorted(links)[:4]:  # each instruction and source line opens in the HLO view
        assert (await bench_client.get(unescape(link))).status_code == 200
    twin = await bench_client.get(f"/runs/{job_id}/memory.json")
    assert twin.json() == report


async def test_padding_shows_in_its_own_column_for_a_v6e_bf16_program(
    bench_client: httpx.AsyncClient,
) -> None:
    spec, _ = CASES[0]
    job_id = await posted(bench_client, spec, [spec["target"]])
    report = (await bench_client.get(f"/api/v1/runs/{job_id}/memory")).json()
    assert report["padding_bytes"] > 0
    page = (await bench_client.get(f"/runs/{job_id}/memory")).text
    assert 'class="padding has-padding"' in page and "T(8,128)(2,1)" in page


async def test_a_run_without_a_report_answers_saying_why(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {"workload": "matmul", "params": {"m": 32, "n": 32, "k": 32}}
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    worker = FakeWorker(bench_client)
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    job_id = grant["job_id"]
    waiting = await bench_client.get(f"/api/v1/runs/{job_id}/memory")
    assert (
        waiting.status_code == 200 and "has no run yet (it is running)" in waiting.json()["reason"]
    )
    assert (await worker.finish(grant)).status_code == 200  # a result with no report
    answer = await bench_client.get(f"/api/v1/runs/{job_id}/memory")
    assert answer.status_code == 200 and "has no memory report" in answer.json()["reason"]
    assert answer.json()["buffers"] == []
    assert (await bench_client.get("/api/v1/runs/nope/memory")).status_code == 404
    page = await bench_client.get(f"/runs/{job_id}/memory")
    assert page.status_code == 200 and "has no memory report" in text_of(page.text)
    run_page = (await bench_client.get(f"/runs/{job_id}")).text
    assert 'id="memory-h"' not in run_page and "#memory-h" not in run_page


async def test_a_report_that_does_not_add_up_is_withheld_and_both_peaks_are_said(
    bench_client: httpx.AsyncClient,
) -> None:
    spec, _ = CASES[2]
    result = run_here({**spec, "measure": {"samples": 3}})
    forged = dict(result["memory_report"])
    forged["unattributed_bytes"] += 4096
    job_id = await posted(bench_client, spec, [], memory_report=forged)
    answer = await bench_client.get(f"/api/v1/runs/{job_id}/memory")
    assert answer.status_code == 200 and "withheld" in answer.json()["reason"]
    assert "do not add up" in answer.json()["reason"] and answer.json()["buffers"] == []
    section = text_of((await bench_client.get(f"/runs/{job_id}")).text.split('id="memory-h"')[1])
    assert "withheld" in section and "the compiler's figure" in section
    page = await bench_client.get(f"/runs/{job_id}/memory")
    assert page.status_code == 200 and "withheld" in text_of(page.text)
