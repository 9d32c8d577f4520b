"""The scale stage on the server: bad meshes refused with 422, and a run page that shows
placement, collectives and a scaling series made by the real engine (8 virtual CPU
devices, in a child process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker
from workers.protocol import RunResult

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SPEC: dict[str, Any] = {
    "workload": "sharded-matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "sharding": "tensor"},
    "stages": ["compile", "execute", "scale"],
    "measure": {"samples": 3},
}


@pytest.fixture(scope="module")
def scale_result() -> dict[str, Any]:
    """A tensor-sharded matmul with its scaling series, from `boundary run --json`."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "run", "sharded-matmul"]
        + [f"{k}={v}" for k, v in SPEC["params"].items()]
        + ["--stages", "compile,execute,scale", "--samples", "3", "--json"],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_a_bad_mesh_spec_is_a_422_naming_the_field(bench_client: httpx.AsyncClient) -> None:
    for params, field, words in (
        ({"mesh": "3x3"}, "params.mesh", "make 9 devices, but devices=8"),
        ({"sharding": "data", "m": 100}, "params.m", "does not divide evenly"),
        ({"mesh": "2x4", "axes": "x"}, "params.axes", "axis name"),
        ({"sharding": "custom", "a_spec": "x,-", "b_spec": "-,-", "out_spec": "q,-"}, None, "q"),
    ):
        body = {"workload": "sharded-matmul", "path": "jax-cpu", "params": params}
        r = await bench_client.post("/api/v1/jobs", json=body)
        assert r.status_code == 422, r.text
        text = r.text
        assert words in text
        if field is not None:
            assert field in text
    r = await bench_client.post(
        "/api/v1/jobs",
        json={"workload": "collective", "path": "jax-cpu", "params": {"bytes": 6}},
    )
    assert r.status_code == 422 and "params.bytes" in r.text


async def test_a_scale_job_waits_for_enough_devices(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post("/api/v1/jobs", json=SPEC)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "queued"
    # A CPU worker offering only 4 virtual devices cannot take an 8-device job.
    small = FakeWorker(bench_client, {**FakeWorker(bench_client).caps, "max_virtual_devices": 4})
    await small.register()
    assert await small.lease() is None
    big = FakeWorker(bench_client)
    await big.register()
    grant = await big.lease()
    assert grant is not None and grant["requirements"]["devices"] == 8


async def test_the_run_page_shows_placement_and_the_scaling_series(
    bench_client: httpx.AsyncClient, scale_result: dict[str, Any]
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    r = await bench_client.post("/api/v1/jobs", json=SPEC)
    job_id = r.json()["id"]
    grant = await worker.lease()
    assert grant is not None
    posted = await worker.post(
        "result",
        {
            "worker_id": worker.id,
            "job_id": job_id,
            "attempt": grant["attempt"],
            "result": {**scale_result, "job": grant["spec"]},
            "run_seconds": 1.0,
        },
    )
    assert posted.status_code == 200, posted.text

    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert 'id="placement-h"' in page
    # The collective, and why the tensor sharding put it there.
    assert "<strong>all-reduce</strong>" in page and "contracted dimension" in page
    # Shard shapes: A's columns and B's rows split 8 ways; C whole on every device.
    assert "[64, 8] at [:, 0:8]" in page and "[8, 64] at [8:16, :]" in page
    assert "[64, 64] at [:, :]" in page
    assert "temporaries" in page and "memory_analysis()" in page
    assert "gathered-and-redistributed" in page and "partial sums" in page
    # The series: both lines, labelled, and the CPU caveat.
    assert '<svg class="scaling"' in page
    assert 'data-mode="strong"' in page and 'data-mode="weak"' in page
    assert "strong scaling (global workload fixed)" in page
    assert "weak scaling (per-device workload fixed)" in page
    assert "timings not hardware scaling" in page
    assert "not separable" in page
    points = re.findall(r'<circle class="point"', page)
    assert len(points) == 8  # 1, 2, 4 and 8 devices, strong and weak

    # The JSON twin carries the same placement and series.
    twin = (await bench_client.get(f"/runs/{job_id}.json")).json()
    run = RunResult.model_validate(twin["run"])
    assert run.placement is not None and run.placement.devices == 8
    assert run.scaling is not None and {p.mode for p in run.scaling.points} == {"strong", "weak"}

    # The IR view marks the collective in the optimized HLO.
    ir = await bench_client.get(f"/runs/{job_id}/ir/hlo", headers={"HX-Request": "true"})
    assert '<span class="bi">all-reduce</span>' in ir.text  # collectives in their own colour


async def test_runs_without_a_mesh_have_no_placement_section(
    bench_client: httpx.AsyncClient,
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    spec = {"workload": "matmul", "path": "jax-cpu", "params": {"m": 8, "n": 8, "k": 8}}
    job_id = (await bench_client.post("/api/v1/jobs", json=spec)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.finish(grant)).status_code == 200
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Strong" not in page and 'id="placement-h"' not in page


async def test_the_run_form_offers_the_mesh_parameters(bench_client: httpx.AsyncClient) -> None:
    page = (await bench_client.get("/runs/new?workload=sharded-matmul")).text
    for name in ("devices", "mesh", "axes", "sharding", "a_spec", "series"):
        assert f'name="param.{name}"' in page
    for option in ("data", "tensor", "gathered", "custom"):
        assert f"<option>{option}</option>" in page or f"<option selected>{option}</option>" in page
    data = {
        "workload": "sharded-matmul",
        "path": "jax-cpu",
        "param.devices": "4",
        "param.mesh": "2x2",
        "param.sharding": "data",
        "param.m": "30",
        "stages": ["compile", "execute"],
    }
    r = await bench_client.post("/runs", data=data)
    # m=30 does not split over 4 devices: the form says so on the field, nothing is queued.
    assert r.status_code == 422
    assert "does not divide evenly" in r.text
    r = await bench_client.post("/runs", data={**data, "param.m": "32"})
    assert r.status_code == 303
    job = (await bench_client.get(r.headers["location"] + ".json")).json()
    assert job["params"]["devices"] == 4 and job["params"]["mesh"] == "2x2"
