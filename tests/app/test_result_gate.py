"""The server's half of the result gate: forged results posted through the real worker
API (register, lease, post), as a careless or hostile worker would send them.

Each forgery starts from a genuine run made by the engine (real samples, statistics,
rates, stopping reason, harness time) and changes what a worker could change. Whatever
the server keeps must show no speed on any read path: the API's job, `/runs/{id}.json`,
`samples.csv`, the run page, the matrix cell (`.json` and `.csv`) and the comparison.
"""

from __future__ import annotations

import copy
import csv
import io
import json
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

SIZES = {"m": 64, "n": 64, "k": 64}
MATRIX = {
    "workload": "matmul",
    "axis": {"name": "m", "values": [64]},
    "paths": ["jax-cpu"],
    "base_params": {"n": 64, "k": 64},
    "measure": {"samples": 12},
}


@pytest.fixture(scope="module")
def genuine() -> dict[str, Any]:
    """A real, valid run of the matrix cell's job, made by the engine."""
    from workers.run.engine import run_job

    spec = JobSpec.model_validate(
        {"workload": "matmul", "params": SIZES, "measure": {"samples": 12}}
    )
    run = run_job(spec)
    assert run.valid and run.harness_seconds and run.measurements[0].stats
    assert run.rates is not None and run.rates.flops_per_s
    return run.model_dump(mode="json")


async def leased_cell(client: httpx.AsyncClient) -> tuple[FakeWorker, str, dict[str, Any]]:
    """A registered worker holding the job of a fresh one-cell matrix: the worker, the
    matrix id and the lease's grant."""
    worker = FakeWorker(client)
    await worker.register()
    created = await client.post("/api/v1/matrices", json=MATRIX)
    assert created.status_code == 201, created.text
    grant = await worker.lease()
    assert grant is not None
    return worker, str(created.json()["id"]), grant


async def post(worker: FakeWorker, grant: dict[str, Any], result: dict[str, Any]) -> httpx.Response:
    body = {
        "worker_id": worker.id,
        "job_id": grant["job_id"],
        "result": {**result, "job": grant["spec"]},
        "run_seconds": 0.75,
    }
    return await worker.post("result", body)


def forged(genuine: dict[str, Any], case: str) -> dict[str, Any]:
    run = copy.deepcopy(genuine)
    c = run["correctness"]
    if case == "valid with a failed check":
        c.update(passed=False, error=0.4, detail="relative error 0.4 exceeds the tolerance")
        run["valid"] = True
    elif case == "invalid with its samples left in":
        c.update(passed=False, error=0.4)
        run["valid"] = False
    elif case == "passed with no finite error":
        c.update(passed=True, error=None)  # how a NaN error reads once it is JSON
    elif case == "passed with an error over the tolerance":
        c.update(passed=True, error=10 * c["tolerance"])
    elif case == "unchecked on a job with a reference":
        c.update(passed=False, checked=False, error=None, detail="output unchecked: trust me")
    else:
        raise AssertionError(case)
    return run


FORGERIES = (
    "valid with a failed check",
    "invalid with its samples left in",
    "passed with no finite error",
    "passed with an error over the tolerance",
    "unchecked on a job with a reference",
)


def speedless(run: dict[str, Any]) -> None:
    """`run` (a run's JSON as served) holds no sample, statistic, rate or time of its
    output, and nothing a speed could be worked out from."""
    assert run["valid"] is False
    for m in run["measurements"]:
        assert m["samples_s"] == [] and m["stats"] is None, m
        assert m["stopped_because"] is None and m["warmup_discarded"] is None
        assert m["warmup_samples_s"] == [] and m["shape"] is None
    assert run["rates"]["flops_per_s"] is None and run["rates"]["bytes_per_s"] is None
    assert run["rates"]["flops"] > 0  # work counts stay
    assert run["harness_seconds"] is None and run["stage_seconds"]["warm_up"] is None
    assert run["stage_seconds"]["compile"] is not None  # compile times stay
    assert not {"unreported_s", "warmed", "comparison"} & set(run["extra"])
    assert run.get("run_seconds") is None
    assert any("no result" in w for w in run["warnings"])


@pytest.mark.parametrize("case", FORGERIES)
async def test_a_forged_result_shows_no_speed_anywhere(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any], case: str
) -> None:
    worker, matrix_id, grant = await leased_cell(bench_client)
    job_id = grant["job_id"]
    answer = await post(worker, grant, forged(genuine, case))
    assert answer.status_code == 200, answer.text

    api = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    speedless(api["run"])
    assert (await bench_client.get(f"/runs/{job_id}.json")).json()["run"] == api["run"]
    rows = list(
        csv.reader(io.StringIO((await bench_client.get(f"/runs/{job_id}/samples.csv")).text))
    )
    assert len(rows) == 1  # the header alone
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "GFLOP/s" not in page and "Hidden: a run whose output failed" in page
    median = format(genuine["measurements"][0]["stats"]["median"] * 1e3, ".3f")
    assert median not in page

    cell = (await bench_client.get(f"/matrices/{matrix_id}.json")).json()["rows"][0]["cells"][0]
    assert cell["valid"] is False
    assert not {"median_s", "q1_s", "iqr_s", "rounds", "flops_per_s", "bytes_per_s"} & {
        k for k, v in cell.items() if v
    }
    table = list(
        csv.DictReader(io.StringIO((await bench_client.get(f"/matrices/{matrix_id}.csv")).text))
    )
    assert table[0]["median_s"] == table[0]["flops_per_s"] == table[0]["rounds"] == ""

    compared = (await bench_client.get(f"/compare.json?a={job_id}")).json()
    (side_run,) = compared["sides"]["a"]["runs"]
    assert side_run["median_s"] is None and side_run["samples_s"] == []


async def test_a_nan_verdict_never_reaches_the_store(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any]
) -> None:
    """A NaN error marked passed: the worker API refuses NaN as the public API does."""
    worker, _, grant = await leased_cell(bench_client)
    run = copy.deepcopy(genuine)
    run["correctness"].update(passed=True, error=float("nan"))
    body = json.dumps(
        {
            "worker_id": worker.id,
            "job_id": grant["job_id"],
            "lease_id": grant["lease_id"],
            "result": {**run, "job": grant["spec"]},
        }
    )
    assert "NaN" in body
    answer = await bench_client.post(
        "/api/v1/worker/result",
        content=body,
        headers={**worker_auth(), "content-type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["field"] == "body"
    job = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()
    assert job["status"] == "running" and job["run"] is None


def worker_auth() -> dict[str, str]:
    from tests.app.bench_fakes import AUTH

    return AUTH


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"params": {"m": 99999}}, "result.params"),
        ({"job": {"params": {"m": 99999, "n": 64, "k": 64}}}, "result.job.params"),
        ({"job": {"workload": "elementwise"}}, "result.job.workload"),
        ({"job": {"path": "jax-gpu"}}, "result.job.path"),
        ({"job": {"stages": ["compile"]}}, "result.job.stages"),
        ({"job": {"measure": {"samples": 500}}}, "result.job.measure"),
        ({"job": {"target": "b200:1"}}, "result.job.target"),
        # A run compiled with options its job did not ask for is another program.
        (
            {"job": {"compiler_options": {"xla_cpu_enable_fast_math": True}}},
            "result.job.compiler_options",
        ),
    ],
)
async def test_a_result_for_another_job_than_its_lease_is_refused(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    worker, _, grant = await leased_cell(bench_client)
    run = copy.deepcopy(genuine)
    run["job"] = grant["spec"]
    if "params" in change:
        run["params"] = {**run["params"], **change["params"]}
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": run}
    if "job" in change:
        body["result"] = {**run, "job": {**grant["spec"], **change["job"]}}
        answer = await worker.post("result", body)
    else:
        answer = await worker.post("result", body)
    assert answer.status_code == 422, answer.text
    assert field in [p["field"] for p in answer.json()["detail"]]
    job = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()
    assert job["run"] is None


async def test_a_genuine_result_passes_the_lease_check_and_keeps_its_speed(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any]
) -> None:
    worker, matrix_id, grant = await leased_cell(bench_client)
    answer = await post(worker, grant, genuine)
    assert answer.status_code == 200, answer.text
    run = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()["run"]
    assert run["valid"] and run["measurements"][0]["samples_s"] and run["rates"]["flops_per_s"]
    assert run["run_seconds"] == 0.75 and run["harness_seconds"]
    cell = (await bench_client.get(f"/matrices/{matrix_id}.json")).json()["rows"][0]["cells"][0]
    assert cell["median_s"] == genuine["measurements"][0]["stats"]["median"]


async def test_samples_of_a_job_that_never_executed_are_dropped(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any]
) -> None:
    worker = FakeWorker(bench_client)
    await worker.register()
    spec = {"workload": "matmul", "params": SIZES, "stages": ["compile"]}
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    run = {**copy.deepcopy(genuine), "correctness": None}
    answer = await post(worker, grant, run)
    assert answer.status_code == 200, answer.text
    stored = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()["run"]
    assert stored["valid"]  # a compile-only run is valid: it has no verdict to fail
    assert all(m["samples_s"] == [] and m["stats"] is None for m in stored["measurements"])


async def test_host_dispatch_never_gets_calls_per_second(
    bench_client: httpx.AsyncClient, genuine: dict[str, Any]
) -> None:
    """`Stats.ops` was 1/mean under host-dispatch too; a dispatch time is never a speed."""
    worker = FakeWorker(bench_client)
    await worker.register()
    spec = {"workload": "matmul", "params": SIZES, "measure": {"mode": "dispatch", "samples": 12}}
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    run = copy.deepcopy(genuine)
    run["measurements"][0]["boundary"] = "host-dispatch"
    run["rates"]["boundary"] = "host-dispatch"
    assert run["measurements"][0]["stats"]["ops"]
    answer = await post(worker, grant, run)
    assert answer.status_code == 200, answer.text
    stored = (await bench_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()["run"]
    assert stored["valid"] and stored["measurements"][0]["stats"]["median"]
    assert stored["measurements"][0]["stats"]["ops"] is None
    assert stored["rates"]["flops_per_s"] is None


def test_gating_a_gated_run_changes_nothing(genuine: dict[str, Any]) -> None:
    from workers.protocol import RunResult
    from workers.protocol.gate import gate

    failed = RunResult.model_validate(forged(genuine, "valid with a failed check"))
    once = gate(failed)
    assert gate(once) == once and not once.valid
