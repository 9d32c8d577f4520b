"""A run on a real chip, on its page and on its chip's page.

The runs are the TPU v5e's own (tests/workers/data/chip_runs.jsonl: the device tier's
record of what that chip's worker produced), posted again through the worker API by a
worker that registers as that chip, as its real worker posted them. The server reads the
compiler's estimates from the stored HLO and sets them beside the chip's device time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities
from workers.protocol import RunResult

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parents[1] / "workers" / "data" / "chip_runs.jsonl"
V5E = "TPU v5 lite"
MATMUL = "946794ec6c4bd7e0"  # 2048³ float32 at DEFAULT: one bfloat16 pass, a big fusion
SUM = "35c0875fb3218a2f"  # 16 row sums over 1M values: microseconds on the chip


def chip_runs() -> dict[str, dict[str, Any]]:
    lines = DATA.read_text().splitlines()
    return {job["id"]: job["run"] for job in map(json.loads, lines)}


async def post_as_the_chip(client: httpx.AsyncClient, run: dict[str, Any]) -> str:
    """Submit the run's job, lease it as a worker on a real v5e, post the chip's run (with
    the target report its worker sent: the chip's own target, run on the hardware, which
    the record, made before the server kept it, lacks)."""
    job = {k: run["job"][k] for k in ("workload", "path", "params", "stages", "measure")}
    said = {"id": "v5e:1x1", "model": "v5e", "count": 1, "compiler": "XLA:TPU (tpu)"}
    run = {**run, "target": run["target"] or {**said, "deviceless": False}}
    created = await client.post("/api/v1/jobs", json=job)
    assert created.status_code == 202, created.text
    caps = capabilities("tpu", device_kind=V5E, jax_version=run["environment"]["jax_version"])
    worker = FakeWorker(client, caps)
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    reply = await worker.finish(grant, **run)
    assert reply.status_code == 200, reply.text
    job_id: str = created.json()["id"]
    return job_id


async def test_a_chip_runs_page_sets_the_prediction_beside_the_chip(
    bench_client: httpx.AsyncClient,
) -> None:
    client = bench_client
    runs = chip_runs()
    job_id = await post_as_the_chip(client, runs[MATMUL])
    job = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    run = job["run"]
    assert run["valid"] and run["correctness"]["arithmetic"] == "bf16x1"
    assert run["target"]["id"] == "v5e:1x1" and run["prediction"]["target"] == "v5e:1x1"
    fusion = run["device_time"]["ops"][0]
    assert fusion["name"] == "fusion" and fusion["kind"] == "convolution fusion"
    assert fusion["estimated_cycles"] > 0  # read by the server from the stored HLO
    page = (await client.get(f"/runs/{job_id}")).text
    assert "On the chip: measured beside predicted" in page
    assert "the same, to the byte" in page  # predicted peak = the real compile's
    assert "one bfloat16 pass per float32 product" in page
    assert f'href="/chips/{V5E.replace(" ", "%20")}"' in page
    # The whole program's estimate says what it leaves out: the async copy states none.
    left_out = "(none stated, or inside a loop's body): <code>copy-start</code>"
    assert f"with no estimate beside their time {left_out}" in page
    assert "<code>copy-done</code>, under 0.1 % of the measured instructions' time" in page
    explained = page[page.index('id="explain-h"') :]
    assert "on the chip</th>" in explained and "(estimated 1.02×)" in explained

    # The real peak beside the prediction is the run's own memory analysis, not a figure
    # the worker states a second time: a forged one changes nothing.
    real = runs[MATMUL]["memory_analysis"]["peak_bytes"]
    assert run["prediction"]["real_peak_bytes"] == real
    forged = {**runs[MATMUL], "prediction": {**runs[MATMUL]["prediction"], "real_peak_bytes": 1}}
    again = (await client.get(f"/api/v1/jobs/{await post_as_the_chip(client, forged)}")).json()
    assert again["run"]["prediction"]["real_peak_bytes"] == real

    small = await post_as_the_chip(client, runs[SUM])
    page = (await client.get(f"/runs/{small}")).text
    assert "Why the host's figure is so much larger" in page
    assert "times</strong> the device time" in page


async def test_the_chips_page_gathers_its_runs_by_kind(bench_client: httpx.AsyncClient) -> None:
    client = bench_client
    runs = chip_runs()
    for name in (MATMUL, SUM):
        await post_as_the_chip(client, runs[name])
    answer = (await client.get(f"/api/v1/chips/{V5E}")).json()
    kinds = {k["kind"]: k for k in answer["by_kind"]}
    assert 0.5 < kinds["convolution fusion"]["median"] < 2  # the model is near on a matmul
    assert kinds["reduce"]["median"] > 5  # and far on a small reduction (11× on this chip)
    assert {p["job"] for p in answer["programs"]} >= set(kinds["reduce"]["runs"])
    page = (await client.get(f"/chips/{V5E}")).text
    assert "the compiler's estimate against the chip" in page and "convolution fusion" in page
    assert (await client.get("/api/v1/chips/no such chip")).status_code == 404


def test_a_small_programs_roofline_point_is_in_device_time() -> None:
    """On roofs a chip measured in its own time, a run's point is its device time (the
    run's FLOPs over its device-time median), and the page says so; on host-synced roofs
    the same run's host-sync rate stands, as before."""
    from app.pages.runs.roofline import build_roofline
    from workers.protocol import BoundaryId, Ceilings, RunResult

    run = RunResult.model_validate(chip_runs()[MATMUL])
    # The test's own roofs (a v5e's order of magnitude), on each boundary in turn.
    roofs = Ceilings(
        device_kind=V5E,
        copy_bytes_per_s=1.2e12,
        matmul_flops_per_s={"float32": 1.9e14},
        measured_at="2026-12-06T00:00:00+00:00",
        boundary=BoundaryId.DEVICE_TIME,
    )
    on_device = build_roofline(run.model_copy(update={"ceilings": roofs}))
    assert on_device is not None and on_device.withheld is None
    flops, device = 2 * 2048**3, 93.05e-6
    assert on_device.achieved == pytest.approx(flops / device, rel=1e-2)
    assert any("in device time" in n for n in on_device.notes)
    host = roofs.model_copy(update={"boundary": BoundaryId.HOST_SYNC})
    on_host = build_roofline(run.model_copy(update={"ceilings": host}))
    assert on_host is not None and on_host.achieved == run.rates.flops_per_s  # type: ignore[union-attr]


LOOPED = """HloModule jit_step, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %inner = f32[8]{0} multiply(%x, %x), backend_config={"estimated_cycles":"100"}
  ROOT %t = (s32[], f32[8]{0}) tuple(%i, %inner)
}

%cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %a)
  %loop = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={CYCLES}
  %out = f32[8]{0} get-tuple-element(%loop), index=1
  ROOT %copy = f32[8]{0} copy(%out)
}
""".replace("{CYCLES}", '{"estimated_cycles":"450"}')


def test_an_instruction_in_a_loops_body_gets_no_estimate_beside_its_time_per_call() -> None:
    """Its time per call adds up every trip, its estimate is for one: no ratio between them.
    The entry's own instructions keep theirs, and a measured one without an estimate is
    named on the page as left out of the program's estimate."""
    from app.ir.device_ops import with_estimates
    from app.pages.runs.chip import chip_view
    from workers.protocol import DeviceTime
    from workers.protocol.hlo import read_hlo

    ops = [
        {"name": "loop", "median_s": 4e-6, "calls": 10},
        {"name": "inner", "median_s": 4e-6, "calls": 10},
        {"name": "copy", "median_s": 1e-6, "calls": 10},
    ]
    measured = DeviceTime.model_validate({"planes": ["/device:TPU:0"], "calls": 10, "ops": ops})
    done = with_estimates(measured, read_hlo(LOOPED, cut=False))
    assert {op.name: op.estimated_cycles for op in done.ops} == {
        "loop": 450,
        "inner": None,
        "copy": None,
    }
    assert done.estimated_cycles == 450  # the entry's instructions alone
    run = chip_runs()[MATMUL]
    on_chip = RunResult.model_validate({**run, "device_time": done.model_dump()})
    view = chip_view(on_chip)
    assert view is not None and view.unestimated is not None
    share, names = view.unestimated
    assert names == ["inner", "copy"] and abs(share - 5 / 9) < 1e-9
