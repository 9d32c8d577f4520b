"""Every chart uses one yardstick: a figure is set only against one measured on the same
boundary and dtype. A throughput run gets no point under host-sync roofs; the roof's
dtype is that of the run's inputs; the compare page never draws two sides it calls not
comparable on one axis; and a time axis reads in round numbers that fit its padding.

Runs are made by the real engine (JAX on the CPU) and posted by a worker played through
the worker API, as in test_roofline and test_compare_pages.
"""

from __future__ import annotations

import html
import itertools
import math
import re
from typing import Any

import httpx
import pytest
from chart_markup import render_chart

from app.pages.charts import label_width, nice_ticks, seconds_ticks
from app.pages.runs import plots
from app.pages.runs.roofline import build_roofline, roofline_view
from app.web.templating import make_environment
from tests.app.bench_fakes import FakeWorker, capabilities
from workers.measure.stats import summarize
from workers.protocol import BoundaryId, Ceilings, InputInfo, JobSpec, Measurement, RunResult
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
MATMUL: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 48, "k": 32},
    "measure": {"samples": 5},
}
THROUGHPUT = {**MATMUL, "measure": {"samples": 5, "mode": "throughput", "calls_per_sample": 4}}
BF16 = {**MATMUL, "params": {**MATMUL["params"], "dtype": "bfloat16"}}


@pytest.fixture(scope="module")
def runs() -> dict[str, RunResult]:
    """Real runs: latency (host-sync) twice, throughput (host-throughput), bfloat16."""
    specs = {"latency": MATMUL, "again": MATMUL, "throughput": THROUGHPUT, "bf16": BF16}
    return {name: run_job(JobSpec.model_validate(spec)) for name, spec in specs.items()}


async def _post(
    client: httpx.AsyncClient, worker: FakeWorker, spec: dict[str, Any], run: RunResult
) -> str:
    """Submit `spec`, lease it and post `run` for it; the job id."""
    created = await client.post("/api/v1/jobs", json=spec)
    assert created.status_code == 202, created.text
    grant = await worker.lease()
    assert grant is not None and grant["job_id"] == created.json()["id"]
    result = {**run.model_dump(mode="json"), "job": grant["spec"]}
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "attempt": grant["attempt"]}
    posted = await worker.post("result", {**body, "result": result})
    assert posted.status_code == 200, posted.text
    return str(grant["job_id"])


async def _measured_worker(client: httpx.AsyncClient) -> FakeWorker:
    worker = FakeWorker(client, capabilities(ceilings=CEILINGS.model_dump(exclude={"worker"})))
    await worker.register()
    return worker


def _text(page: str) -> str:
    """The page's text as a person reads it: tags gone, entities decoded, spaces single."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _roofline_panel(page: str) -> str:
    found = re.search(
        r'<section class="panel" aria-labelledby="roofline-h">.*?</section>', page, re.S
    )
    assert found is not None, "no roofline panel"
    return found.group(0)


# --- the roofline: one boundary -------------------------------------------------------


def test_the_roofs_say_they_were_measured_host_sync() -> None:
    assert CEILINGS.boundary is BoundaryId.HOST_SYNC
    older = Ceilings.model_validate({"device_kind": "cpu", "measured_at": "2026-01-01"})
    assert older.boundary is BoundaryId.HOST_SYNC  # ceilings stored before the field


@pytest.mark.anyio
async def test_a_throughput_run_gets_no_point_under_host_sync_roofs(
    bench_client: httpx.AsyncClient, runs: dict[str, RunResult]
) -> None:
    worker = await _measured_worker(bench_client)
    job_id = await _post(bench_client, worker, THROUGHPUT, runs["throughput"])
    panel = _roofline_panel((await bench_client.get(f"/runs/{job_id}")).text)
    said = _text(panel)
    assert (
        "This run's rate is host-throughput (4 calls, one sync); the roofs were measured "
        "host-sync (one call at a time, synced): no point is drawn, since the two enclose "
        "different things." in said
    )
    assert 'class="point"' not in panel
    assert "-bound" not in said and "of what they allow" not in said
    assert "analytic counts" in said  # the intensity is still given, with its source
    assert "no point for this run" in said  # the chart's own title says so too


@pytest.mark.anyio
async def test_a_latency_run_is_drawn_under_the_same_roofs(
    bench_client: httpx.AsyncClient, runs: dict[str, RunResult]
) -> None:
    worker = await _measured_worker(bench_client)
    job_id = await _post(bench_client, worker, MATMUL, runs["latency"])
    panel = _roofline_panel((await bench_client.get(f"/runs/{job_id}")).text)
    said = _text(panel)
    assert panel.count('class="point"') == 2  # the wide chart and the narrow one
    assert re.search(r"so the roofs call it (memory|compute)-bound", said)
    assert "(analytic counts; ridge at" in said and "no point is drawn" not in said


# --- the roofline: the inputs' dtype ---------------------------------------------------


@pytest.mark.anyio
async def test_a_bfloat16_run_is_drawn_under_the_bfloat16_roof(
    bench_client: httpx.AsyncClient, runs: dict[str, RunResult]
) -> None:
    assert {i.dtype for i in runs["bf16"].inputs} == {"bfloat16"}
    worker = await _measured_worker(bench_client)
    job_id = await _post(bench_client, worker, BF16, runs["bf16"])
    panel = _roofline_panel((await bench_client.get(f"/runs/{job_id}")).text)
    assert f'data-peak="{9.0e10!r}"' in panel
    assert "bfloat16 matmul 90 GFLOP/s" in _text(panel)


def _uploaded(run: RunResult, inputs: list[InputInfo]) -> RunResult:
    """`run` as an uploaded program reports it: no dtype parameter, the compiler's counts."""
    params = {k: v for k, v in run.params.items() if k != "dtype"}
    assert run.rates is not None
    rates = run.rates.model_copy(update={"source": "XLA cost analysis (compiled, per device)"})
    update = {"ceilings": CEILINGS, "params": params, "inputs": inputs, "rates": rates}
    return run.model_copy(update=update)


def _render_panel(run: RunResult) -> str:
    """The run page's roofline panel, drawn by its own template."""
    template = make_environment().get_template("_run_extras_roofline.html")
    view = roofline_view(run)
    return _text(
        template.render(roofline=view, profile=None, run=run, job={"id": "j"}, token_needed=False)
    )


def test_an_upload_without_a_dtype_parameter_takes_its_inputs_dtype(
    runs: dict[str, RunResult],
) -> None:
    upload = _uploaded(runs["latency"], [InputInfo(name="x", shape=[64, 32], dtype="bfloat16")])
    r = build_roofline(upload)
    assert r is not None and r.dtype == "bfloat16" and r.peak == 9.0e10 and not r.notes
    said = _render_panel(upload)
    assert "the compiler's counts (XLA cost analysis, per device)" in said
    assert "analytic counts" not in said


def test_a_mixed_dtype_program_names_the_roof_it_used(runs: dict[str, RunResult]) -> None:
    inputs = [
        InputInfo(name="tokens", shape=[8, 4096], dtype="int32"),  # ids: no say in the roof
        InputInfo(name="weights", shape=[1024, 1024], dtype="bfloat16"),  # 2 MiB
        InputInfo(name="scale", shape=[1024], dtype="float32"),  # 4 KiB
    ]
    r = build_roofline(_uploaded(runs["latency"], inputs))
    assert r is not None and r.dtype == "bfloat16" and r.peak == 9.0e10
    said = _render_panel(_uploaded(runs["latency"], inputs))
    assert "bfloat16 matmul 90 GFLOP/s" in said
    note = next(n for n in r.notes if "mix" in n)
    assert "chosen by bfloat16" in note and "float32" in note and "int32" not in note
    assert note in said


def test_integer_inputs_alone_fall_back_to_the_dtype_parameter_then_float32(
    runs: dict[str, RunResult],
) -> None:
    ids = [InputInfo(name="tokens", shape=[8, 128], dtype="int32")]
    r = build_roofline(_uploaded(runs["latency"], ids))
    assert r is not None and r.dtype == "float32" and not r.notes
    half = _uploaded(runs["latency"], [InputInfo(name="x", shape=[4], dtype="float16")])
    fallback = build_roofline(half)
    assert fallback is not None and fallback.dtype == "float32"
    assert fallback.notes == (
        "No float16 matmul was measured on this worker; the roof is float32's.",
    )


# --- the compare page: two boundaries, two axes ---------------------------------------


def _dists_titles(page: str) -> list[str]:
    return re.findall(r'<svg class="dists"[^>]*><title id="[^"]+">([^<]*)</title>', page)


@pytest.mark.anyio
async def test_latency_against_throughput_draws_two_charts_each_on_its_own_boundary(
    bench_client: httpx.AsyncClient, runs: dict[str, RunResult]
) -> None:
    worker = await _measured_worker(bench_client)
    a = await _post(bench_client, worker, MATMUL, runs["latency"])
    b = await _post(bench_client, worker, THROUGHPUT, runs["throughput"])
    page = (await bench_client.get(f"/compare?a={a}&b={b}")).text
    said = _text(page)
    assert "Not comparable: no ratio is printed" in said
    titles = _dists_titles(page)
    assert len(titles) == 2
    assert titles[0].startswith("Side A: samples of the host-sync boundary")
    assert titles[1].startswith("Side B: samples of the host-throughput boundary")
    assert "Side A at host-sync" in said and "Side B at host-throughput" in said
    assert "each is drawn on its own axis" in said


@pytest.mark.anyio
async def test_a_comparable_pair_keeps_one_shared_axis(
    bench_client: httpx.AsyncClient, runs: dict[str, RunResult]
) -> None:
    worker = await _measured_worker(bench_client)
    a = await _post(bench_client, worker, MATMUL, runs["latency"])
    b = await _post(bench_client, worker, MATMUL, runs["again"])
    page = (await bench_client.get(f"/compare?a={a}&b={b}")).text
    titles = _dists_titles(page)
    assert titles == [
        "Samples of the host-sync boundary, run by run: 1 runs of side A, 1 of side B"
    ]
    assert "each is drawn on its own axis" not in _text(page)


# --- time axes: round ticks whose labels fit ------------------------------------------


def test_ticks_are_round_1_2_5_steps() -> None:
    assert nice_ticks(0.7012, 0.7153, (5, -3)) == [0.705, 0.71, 0.715]
    assert nice_ticks(0.0, 0.3, (1, -1)) == [0.0, 0.1, 0.2, 0.3]  # no 0.30000000000000004
    assert seconds_ticks(0.7012, 0.7153, room=64) == [
        (0.705, "705 ms"),
        (0.71, "710 ms"),
        (0.715, "715 ms"),
    ]
    assert [t for _, t in seconds_ticks(4.9e-5, 1.0e-4, room=64)] == ["60 µs", "80 µs", "100 µs"]
    assert [t for _, t in seconds_ticks(0.9, 1.2, room=64)] == ["0.9 s", "1.0 s", "1.1 s", "1.2 s"]


def test_a_narrow_spread_takes_a_coarser_step_rather_than_overflow() -> None:
    # 708.000 … 708.004 ms: a 1 µs step would print "708.001 ms", too wide for 64 px.
    assert seconds_ticks(0.708, 0.708004, room=64) == [(0.708, "708.00 ms")]
    # No round value in 708.0009 … 708.0041 ms has a label that fits: none is drawn
    # rather than one clipped to "'08.002 ms".
    assert seconds_ticks(0.7080009, 0.7080041, room=64) == []
    assert label_width("708.229 ms") > 66  # the old unrounded label: clipped at the left


def _axis_labels(chart_svg: str) -> list[str]:
    x = f"{plots.PAD_L - 6}"
    return re.findall(rf'<text class="axis" x="{x}"[^>]*>([^<]+)</text>', chart_svg)


@pytest.mark.parametrize("width", [plots.W, plots.NARROW_W])
@pytest.mark.parametrize(
    "samples",
    [
        [0.708229, 0.7091, 0.7103, 0.7124, 0.7153],
        [0.708001, 0.708005, 0.708013, 0.708021],
        [1.1e-6, 1.3e-6, 1.25e-6],
        [0.98, 1.02, 1.31],
    ],
    ids=["hundreds-of-ms", "tight", "microseconds", "around-a-second"],
)
def test_sample_chart_labels_are_round_and_fit_the_padding(
    samples: list[float], width: int
) -> None:
    m = Measurement(boundary=BoundaryId.HOST_SYNC, samples_s=samples, stats=summarize(samples))
    svg = str(render_chart(plots.samples_svg(m, title_id="s", width=width)))
    labels = [html.unescape(t) for t in _axis_labels(svg)]
    assert labels, svg
    assert all(label_width(label) <= plots.PAD_L - 8 for label in labels), labels
    assert len({label.split(" ")[1] for label in labels}) == 1  # one unit on an axis
    values = [float(label.split(" ")[0]) for label in labels]
    for step in {round(b - a, 9) for a, b in itertools.pairwise(values)}:
        assert round(step / 10 ** math.floor(math.log10(step)), 6) in (1, 2, 5), labels
        assert all(abs(v / step - round(v / step)) < 1e-6 for v in values), labels
