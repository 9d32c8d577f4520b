"""The roofline is drawn against the ceilings the worker measured (never a datasheet), and
the run page shows it; the shape sweep's trade-off is drawn on its run page too."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from chart_markup import render_chart

from app.pages.runs.roofline import build_roofline, roofline_svg, roofline_view
from app.pages.runs.sweep_plot import sweep_svg
from tests.app.bench_fakes import FakeWorker, capabilities
from workers.protocol import Ceilings, JobSpec, RunResult
from workers.run.engine import run_job

CEILINGS = Ceilings(
    device_kind="cpu",
    copy_bytes_per_s=7.5e9,
    copy_bytes=64 * 1024 * 1024,
    matmul_flops_per_s={"float32": 1.25e11, "bfloat16": 9.0e10},
    matmul_sizes={"float32": 1024, "bfloat16": 512},
    measured_at="2026-11-29T12:00:00+00:00",
    worker="bench-7",
)


@pytest.fixture(scope="module")
def run() -> RunResult:
    spec = {"workload": "matmul", "params": {"m": 64, "n": 48, "k": 32}, "measure": {"samples": 5}}
    return run_job(JobSpec.model_validate(spec))


def test_the_roofs_are_the_measured_ceilings(run: RunResult) -> None:
    measured = run.model_copy(update={"ceilings": CEILINGS})
    r = build_roofline(measured)
    assert r is not None
    assert r.bandwidth == CEILINGS.copy_bytes_per_s
    assert r.peak == CEILINGS.matmul_flops_per_s["float32"]
    assert r.ridge == pytest.approx(1.25e11 / 7.5e9)
    assert run.rates is not None and r.achieved == run.rates.flops_per_s
    assert r.intensity == pytest.approx(run.rates.flops / run.rates.bytes)
    assert r.label == "measured on worker bench-7 (cpu) at 2026-11-29T12:00:00+00:00"
    svg = str(render_chart(roofline_svg(r)))
    assert f'data-bandwidth="{7.5e9!r}"' in svg and f'data-peak="{1.25e11!r}"' in svg
    assert "measured on worker bench-7" in svg and "not datasheet peaks" in svg
    assert "125 GFLOP/s" in svg and "7.5 GB/s" in svg


def _inputs_in(run: RunResult, dtype: str) -> RunResult:
    """`run` as if made with `dtype` inputs (and its `dtype` parameter)."""
    inputs = [i.model_copy(update={"dtype": dtype}) for i in run.inputs]
    params = {**run.params, "dtype": dtype}
    return run.model_copy(update={"ceilings": CEILINGS, "params": params, "inputs": inputs})


def test_the_compute_roof_follows_the_runs_dtype(run: RunResult) -> None:
    r = build_roofline(_inputs_in(run, "bfloat16"))
    assert r is not None and r.peak == 9.0e10 and r.dtype == "bfloat16" and not r.notes
    half = _inputs_in(run, "float16")
    fallback = build_roofline(half)
    assert fallback is not None and fallback.peak == 1.25e11
    assert "No float16 matmul was measured" in fallback.notes[0]


def test_no_roofline_without_measured_ceilings_or_without_a_valid_run(run: RunResult) -> None:
    assert build_roofline(run) is None
    invalid = run.model_copy(update={"ceilings": CEILINGS, "valid": False})
    assert roofline_view(invalid) is None


@pytest.mark.anyio
async def test_the_run_page_draws_the_workers_own_roofline(
    bench_client: httpx.AsyncClient, run: RunResult
) -> None:
    caps: dict[str, Any] = capabilities(ceilings=CEILINGS.model_dump(exclude={"worker"}))
    worker = FakeWorker(bench_client, caps)
    await worker.register()
    spec = run.job.model_dump(mode="json")
    job_id = (await bench_client.post("/api/v1/jobs", json=spec)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    result = {**run.model_dump(mode="json"), "job": grant["spec"]}
    body = {"worker_id": worker.id, "job_id": job_id, "attempt": grant["attempt"]}
    assert (await worker.post("result", {**body, "result": result})).status_code == 200

    stored = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]["ceilings"]
    assert stored["worker"] == "fake" and stored["copy_bytes_per_s"] == 7.5e9
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert 'class="roofline"' in page
    assert f'data-bandwidth="{7.5e9!r}"' in page and f'data-peak="{1.25e11!r}"' in page
    assert "measured on worker fake (cpu) at 2026-11-29T12:00:00+00:00" in page


@pytest.mark.anyio
async def test_the_run_page_shows_the_shape_sweep_side_by_side(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {
        "workload": "shape-sweep",
        "path": "jax-cpu",
        "params": {"shapes": [3, 5, 8, 3, 5], "bucketing": "pow2", "features": 16},
        "measure": {"samples": 2},
    }
    sweep = run_job(JobSpec.model_validate(spec))
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=spec)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    result = {**sweep.model_dump(mode="json"), "job": grant["spec"]}
    body = {"worker_id": worker.id, "job_id": job_id, "attempt": grant["attempt"]}
    assert (await worker.post("result", {**body, "result": result})).status_code == 200
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Shape sweep: retracing against padding" in page
    rows = re.findall(
        r"<tr><th scope=\"row\"><code>(\w+)</code></th><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>",
        page,
    )
    assert rows == [("none", "3", "3", "3"), ("pow2", "2", "2", "2")]
    assert sweep.sweep is not None
    svg = str(render_chart(sweep_svg(sweep.sweep)))
    assert svg.count('class="bar bar-0"') == 4 and svg.count('class="bar bar-1"') == 4
    assert "33.3 %" in svg  # pow2 pads 24 rows to 32


def test_a_point_above_a_measured_roof_is_flagged_not_given_as_a_fraction(
    run: RunResult,
) -> None:
    assert run.rates is not None and run.rates.flops_per_s is not None
    # Roofs at a third of what the run reached: the point sits about 3× above them.
    low = CEILINGS.model_copy(
        update={
            "copy_bytes_per_s": run.rates.flops_per_s / 3 / (run.rates.flops / run.rates.bytes),
            "matmul_flops_per_s": {"float32": run.rates.flops_per_s / 3},
        }
    )
    view = roofline_view(run.model_copy(update={"ceilings": low}))
    assert view is not None and view["fraction"] is None
    assert view["above_roof"] is not None and "under-measured" in view["above_roof"]
    assert "3× above the roof" in view["above_roof"]
    fine = roofline_view(run.model_copy(update={"ceilings": CEILINGS}))
    assert fine is not None and fine["above_roof"] is None and fine["fraction"].endswith("%")


def test_the_label_says_how_many_rounds_and_when_the_last_was(run: RunResult) -> None:
    refined = CEILINGS.model_copy(update={"rounds": 3, "updated_at": "2026-11-29T13:00:00+00:00"})
    r = build_roofline(run.model_copy(update={"ceilings": refined}))
    assert r is not None
    assert r.label.endswith("best of 3 rounds, last re-measured at 2026-11-29T13:00:00+00:00")
