"""Workload matrices: one submission, six real runs, a complete table, and a CSV that
matches the runs; cells that cannot run, or wait, say why."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

SHAPES = [{"m": 16, "n": 16, "k": 16}, {"m": 32, "n": 24, "k": 16}, {"m": 48, "n": 32, "k": 24}]


async def work_off(client: httpx.AsyncClient, count: int) -> None:
    """A worker in this process: lease each job, run it for real with the engine, report."""
    from workers.run.engine import run_job

    worker = FakeWorker(client)
    await worker.register()
    for _ in range(count):
        grant = await worker.lease()
        assert grant is not None
        result = run_job(JobSpec.model_validate(grant["spec"]))
        body = {
            "worker_id": worker.id,
            "job_id": grant["job_id"],
            "attempt": grant["attempt"],
            "result": json.loads(result.model_dump_json()),
            "run_seconds": 0.1,
        }
        assert (await worker.post("result", body)).status_code == 200


async def test_a_3x2_matrix_makes_six_runs_a_complete_table_and_a_matching_csv(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {
        "workload": "matmul",
        "axis": {"name": "shape", "values": SHAPES},
        "paths": ["jax-cpu"],
        "columns": {"name": "dtype", "values": ["float32", "bfloat16"]},
        "measure": {"samples": 5},
        "title": "small products",
    }
    created = await bench_client.post("/api/v1/matrices", json=spec)
    assert created.status_code == 201, created.text
    matrix = created.json()
    assert [c["label"] for c in matrix["columns"]] == [
        "jax-cpu · dtype=float32",
        "jax-cpu · dtype=bfloat16",
    ]
    assert not matrix["complete"] and matrix["counts"] == {"queued": 6}
    live = await bench_client.get(matrix["links"]["page"])
    assert 'hx-trigger="every 1s"' in live.text

    await work_off(bench_client, 6)
    done = (await bench_client.get(matrix["links"]["self"])).json()
    assert done["complete"] and done["counts"] == {"done": 6}
    jobs = [c["job"] for r in done["rows"] for c in r["cells"]]
    assert len(set(jobs)) == 6

    page = await bench_client.get(matrix["links"]["page"])
    assert "every 1s" not in page.text and "complete" in page.text
    assert page.text.count('class="cell status-done"') == 6
    assert "m=32, n=24, k=16" in page.text and "host-sync" in page.text

    text = (await bench_client.get(matrix["links"]["csv"])).text
    lines = list(csv.DictReader(io.StringIO(text)))
    assert len(lines) == 6
    for line in lines:
        job = (await bench_client.get(f"/api/v1/jobs/{line['job']}")).json()
        run = job["run"]
        params = job["params"]
        assert line["row"] == f"m={params['m']}, n={params['n']}, k={params['k']}"
        assert line["column"] == f"jax-cpu · dtype={params['dtype']}"
        stats = run["measurements"][0]["stats"]
        assert line["boundary"] == run["measurements"][0]["boundary"] == "host-sync"
        assert float(line["median_s"]) == stats["median"]
        assert float(line["iqr_s"]) == stats["iqr"]
        assert int(line["rounds"]) == len(run["measurements"][0]["samples_s"]) == 5
        assert float(line["compile_s"]) == run["stage_seconds"]["compile"]
        assert (
            line["correctness"] == "passed" and float(line["error"]) == run["correctness"]["error"]
        )
        assert float(line["flops_per_s"]) == run["rates"]["flops_per_s"]
        assert line["run"] == f"/runs/{line['job']}"

    as_json = (await bench_client.get(matrix["links"]["json"])).json()
    assert as_json["rows"][2]["cells"][1]["median_s"] == float(lines[5]["median_s"])


async def test_cells_that_cannot_run_or_must_wait_say_why(bench_client: httpx.AsyncClient) -> None:
    spec = {
        "workload": "attention",
        "axis": {"name": "seq_len", "values": [32, 64, 0]},
        "base_params": {"batch": 1, "heads": 1, "head_dim": 16},
        "paths": ["jax-cpu", "jax-gpu", "cuda"],
        "measure": {"samples": 3},
    }
    created = await bench_client.post("/api/v1/matrices", json=spec)
    assert created.status_code == 201, created.text
    rows = created.json()["rows"]
    cpu, gpu, cuda = rows[0]["cells"]
    assert cpu["status"] == "queued" and gpu["status"] == "queued"
    assert "no worker for jax-gpu is connected" in gpu["reason"]
    assert cuda["status"] == "not run" and "attention does not run on cuda" in cuda["reason"]
    assert cuda["job"] is None
    bad = rows[2]["cells"][0]
    assert bad["status"] == "not run" and "params.seq_len" in bad["reason"]
    page = await bench_client.get(created.json()["links"]["page"])
    assert "no worker for jax-gpu is connected" in page.text
    assert "attention does not run on cuda" in page.text
    # The list of matrices renders once one exists (it once read the dict's .values method).
    listing = await bench_client.get("/matrices")
    assert listing.status_code == 200
    assert f'href="/matrices/{created.json()["id"]}"' in listing.text and "(3 × 3)" in listing.text


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"axis": {"name": "m", "values": []}}, "axis.values", "values must not be empty"),
        ({"axis": {"name": "m", "values": [{"m": 1}]}}, "axis", "plain values"),
        ({"axis": {"name": "m", "values": [1, 1]}}, "axis", "given twice"),
        ({"paths": ["jax-cpu", "jax-cpu"]}, None, "a path is named twice"),
        (
            {
                "axis": {"name": "m", "values": list(range(1, 25))},
                "paths": ["jax-cpu", "jax-gpu", "jax-tpu", "cuda"],
                "columns": {"name": "dtype", "values": ["float32", "bfloat16"]},
            },
            None,
            "at most 96",
        ),
        ({"axis": {"name": "m", "values": [0, -1]}}, None, "no cell can run"),
        ({"surprise": 1}, "surprise", "unknown field"),
    ],
)
async def test_a_bad_matrix_is_refused_naming_what_is_wrong(
    bench_client: httpx.AsyncClient, change: dict[str, Any], field: str | None, message: str
) -> None:
    spec = {"workload": "matmul", "axis": {"name": "m", "values": [16]}, "paths": ["jax-cpu"]}
    r = await bench_client.post("/api/v1/matrices", json={**spec, **change})
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert any(p["field"] == field and message in p["message"] for p in problems), problems


async def test_the_form_creates_a_matrix(bench_client: httpx.AsyncClient) -> None:
    form = await bench_client.get("/matrices/new")
    assert form.status_code == 200 and 'name="axis.values"' in form.text
    sent = await bench_client.post(
        "/matrices",
        data={
            "workload": "matmul",
            "axis.name": "shape",
            "axis.values": "m=16, n=16, k=16; m=32, n=32, k=32",
            "paths": ["jax-cpu", "jax-gpu"],
            "samples": "3",
        },
    )
    assert sent.status_code == 303
    matrix = (await bench_client.get(sent.headers["location"] + ".json")).json()
    assert [r["label"] for r in matrix["rows"]] == ["m=16, n=16, k=16", "m=32, n=32, k=32"]
    assert len(matrix["columns"]) == 2
    wrong = await bench_client.post(
        "/matrices",
        data={"workload": "matmul", "axis.name": "m", "axis.values": "16", "samples": "3"},
    )
    assert wrong.status_code == 422 and "at least 1 item" in wrong.text


async def test_a_dispatch_matrix_says_its_medians_are_never_a_speed(
    bench_client: httpx.AsyncClient,
) -> None:
    """The finding: the engine, matrices and the compare guard each mapped modes to
    boundaries; a dispatch-mode matrix printed per-path medians without the note."""
    spec = {
        "workload": "matmul",
        "axis": {"name": "m", "values": [16]},
        "paths": ["jax-cpu"],
        "base_params": {"n": 16, "k": 16},
        "measure": {"mode": "dispatch", "samples": 12},
    }
    created = await bench_client.post("/api/v1/matrices", json=spec)
    assert created.status_code == 201, created.text
    await work_off(bench_client, 1)
    matrix = (await bench_client.get(f"/matrices/{created.json()['id']}.json")).json()
    assert matrix["boundary"] == "host-dispatch"
    assert "never a speed" in matrix["boundary_note"]
    (cell,) = matrix["rows"][0]["cells"]
    assert cell["valid"] and cell["median_s"] and cell.get("flops_per_s") is None
    page = (await bench_client.get(f"/matrices/{created.json()['id']}")).text
    assert "never a speed" in page and "GFLOP/s" not in page
    job = (await bench_client.get(f"/api/v1/jobs/{cell['job']}")).json()
    (m,) = job["run"]["measurements"]
    assert m["boundary"] == "host-dispatch" and m["stats"]["ops"] is None
    assert job["run"]["rates"]["flops_per_s"] is None
