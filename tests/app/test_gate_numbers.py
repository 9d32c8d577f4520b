"""The server's half of the result gate, on the numbers a worker sends: what a run that
ran nothing may keep, which boundaries and how many samples a job's run may carry, which
statistics and rates the server stores (its own, from the samples), the whole-job time,
and the typed `extra` entries a page reads.

Every result is posted through the real worker API (register, lease, post), as a
careless or hostile worker would send it, and judged by what the API and the pages show.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import AUTH, MATMUL, FakeWorker, capabilities, run_result

pytestmark = pytest.mark.anyio

SPEEDS = {"flops": 524288.0, "bytes": 49152.0, "boundary": "host-sync"}
FORGED_STATS = {
    "min": 0.001,
    "max": 0.002,
    "mean": 0.0015,
    "stddev": 0.0001,
    "median": 0.00123456,
    "q1": 0.001,
    "q3": 0.002,
    "iqr": 0.001,
    "outliers": "0;0",
    "rounds": 3,
    "ops": 666.0,
}


async def leased(
    client: httpx.AsyncClient, spec: dict[str, Any], caps: dict[str, Any] | None = None
) -> tuple[FakeWorker, dict[str, Any]]:
    worker = FakeWorker(client, caps)
    await worker.register()
    created = await client.post("/api/v1/jobs", json=spec)
    assert created.status_code == 202, created.text
    grant = await worker.lease()
    assert grant is not None
    return worker, grant


async def post(
    worker: FakeWorker, grant: dict[str, Any], result: dict[str, Any], run_s: Any = 0.75
) -> httpx.Response:
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": result}
    if run_s is not None:
        body["run_seconds"] = run_s
    return await worker.post("result", body)


def fields(answer: httpx.Response) -> dict[str, str]:
    assert answer.status_code == 422, answer.text
    return {p["field"]: p["message"] for p in answer.json()["detail"]}


async def stored(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    return job


# --- H1: a job that ran nothing shows no speed ---------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {**MATMUL, "stages": ["compile"]},
        {"workload": "matmul", "path": "jax-gpu", "params": MATMUL["params"], "target": "h100:1"},
    ],
    ids=["compile only", "deviceless h100 compile"],
)
async def test_a_job_that_ran_nothing_keeps_no_speed_bearing_field(
    bench_client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    caps = capabilities(targets=["h100:1"])
    worker, grant = await leased(bench_client, spec, caps)
    result = run_result(grant["spec"])
    result["correctness"] = None
    result["rates"] = {**SPEEDS, "flops_per_s": 7.77e14, "bytes_per_s": 3.3e12}
    result["harness_seconds"] = 0.123
    result["stage_seconds"]["warm_up"] = 0.0042
    result["extra"] = {"unreported_s": {"bookkeeping": 0.01}, "warmed": 3}
    answer = await post(worker, grant, result)
    assert answer.status_code == 200, answer.text

    job = await stored(bench_client, grant["job_id"])
    run = job["run"]
    assert run["valid"]  # a compile-only run is valid: it has no verdict to fail
    assert run["rates"]["flops_per_s"] is None and run["rates"]["bytes_per_s"] is None
    assert run["rates"]["flops"] == SPEEDS["flops"]  # work counts stay
    assert run["harness_seconds"] is None and run["stage_seconds"]["warm_up"] is None
    assert run["stage_seconds"]["compile"] == 0.01  # compile times stay
    assert not {"unreported_s", "warmed"} & set(run["extra"])
    assert run["run_seconds"] is None
    assert all(m["samples_s"] == [] and m["stats"] is None for m in run["measurements"])
    page = (await bench_client.get(f"/runs/{grant['job_id']}")).text
    assert "GFLOP/s" not in page and "GB/s" not in page and "Achieved rates" not in page


# --- H2: a failed run keeps no samples, whatever note a measurement carries -----------------


async def test_a_failed_run_keeps_no_samples_whatever_note_they_carry(
    bench_client: httpx.AsyncClient,
) -> None:
    from workers.protocol.gate import NOTHING_EXECUTED

    worker, grant = await leased(bench_client, MATMUL)
    result = run_result(grant["spec"])
    result["correctness"] = {"passed": False, "error": 0.4, "tolerance": 1e-5}
    result["measurements"][0].update(stats=FORGED_STATS, note=NOTHING_EXECUTED)
    result["rates"] = {**SPEEDS, "flops_per_s": 4.2e8}
    assert (await post(worker, grant, result)).status_code == 200

    run = (await stored(bench_client, grant["job_id"]))["run"]
    assert run["valid"] is False
    (m,) = run["measurements"]
    assert m["samples_s"] == [] and m["stats"] is None
    samples = (await bench_client.get(f"/runs/{grant['job_id']}/samples.csv")).text
    assert len(list(csv.reader(io.StringIO(samples)))) == 1  # the header alone
    page = (await bench_client.get(f"/runs/{grant['job_id']}")).text
    assert "Hidden: a run whose output failed" in page and "1.500 ms" not in page


# --- M2: the boundary comes from the job's mode ---------------------------------------------


async def test_a_measurement_under_another_boundary_than_the_jobs_mode_is_refused(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {**MATMUL, "measure": {"samples": 5, "mode": "dispatch"}}
    worker, grant = await leased(bench_client, spec)
    result = run_result(grant["spec"])  # its measurement says host-sync
    result["rates"] = {**SPEEDS, "flops_per_s": 4.2e8, "bytes_per_s": 1e8}
    problems = fields(await post(worker, grant, result))
    assert "host-sync" in problems["result.measurements[0].boundary"]
    assert "host-dispatch" in problems["result.measurements[0].boundary"]
    assert "result.rates.boundary" in problems
    assert (await stored(bench_client, grant["job_id"]))["run"] is None


async def test_a_measurement_under_its_modes_boundary_is_kept(
    bench_client: httpx.AsyncClient,
) -> None:
    spec = {**MATMUL, "measure": {"samples": 5, "mode": "throughput"}}
    worker, grant = await leased(bench_client, spec)
    result = run_result(grant["spec"])
    result["measurements"][0]["boundary"] = "host-throughput"
    assert (await post(worker, grant, result)).status_code == 200
    run = (await stored(bench_client, grant["job_id"]))["run"]
    assert run["valid"] and run["measurements"][0]["boundary"] == "host-throughput"


# --- H5: sample counts are the job's ---------------------------------------------------------


@pytest.mark.parametrize(
    ("measure", "kept", "discarded", "field"),
    [
        ({"samples": 5}, 6, 0, "result.measurements[0].samples_s"),
        ({"samples": 5}, 1_000_000, 0, "result.measurements[0].samples_s"),
        ({"samples": 10}, 10, 91, "result.measurements[0].warmup_samples_s"),
        (
            {"samples": "auto", "auto_max_samples": 20},
            15,
            6,
            "result.measurements[0].warmup_samples_s",
        ),
        ({"samples": "auto", "auto_max_samples": 20}, 21, 0, "result.measurements[0].samples_s"),
    ],
    ids=["one too many", "a million", "warm-up past 10 x N", "auto past its cap", "auto kept"],
)
async def test_more_samples_than_the_job_takes_are_refused(
    bench_client: httpx.AsyncClient,
    measure: dict[str, Any],
    kept: int,
    discarded: int,
    field: str,
) -> None:
    worker, grant = await leased(bench_client, {**MATMUL, "measure": measure})
    result = run_result(grant["spec"])
    result["measurements"][0].update(
        samples_s=[0.001] * kept, warmup_samples_s=[0.002] * discarded, warmup_discarded=discarded
    )
    problems = fields(await post(worker, grant, result))
    assert field in problems, problems
    assert (await stored(bench_client, grant["job_id"]))["run"] is None


async def test_a_measurement_at_the_jobs_sample_caps_is_kept(
    bench_client: httpx.AsyncClient,
) -> None:
    """N kept after 9 x N discarded while the timings settled: what the sampling loop may
    genuinely send (it gives up discarding at 10 x N in all)."""
    worker, grant = await leased(bench_client, {**MATMUL, "measure": {"samples": 10}})
    result = run_result(grant["spec"])
    result["measurements"][0].update(
        samples_s=[0.001] * 10, warmup_samples_s=[0.002] * 90, warmup_discarded=7
    )
    assert (await post(worker, grant, result)).status_code == 200
    (m,) = (await stored(bench_client, grant["job_id"]))["run"]["measurements"]
    assert len(m["samples_s"]) == 10 and m["warmup_discarded"] == 90  # counted, not as sent


# --- L4: numbers the server works out itself ------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "field"),
    [
        ([-0.001, 0.002, 0.0015], "result.measurements[0].samples_s"),
        ([0.0, 0.002, 0.0015], "result.measurements[0].samples_s"),
    ],
    ids=["negative", "zero"],
)
async def test_samples_that_are_no_time_are_refused(
    bench_client: httpx.AsyncClient, samples: list[float], field: str
) -> None:
    worker, grant = await leased(bench_client, MATMUL)
    result = run_result(grant["spec"])
    result["measurements"][0]["samples_s"] = samples
    problems = fields(await post(worker, grant, result))
    assert "above zero" in problems[field]


async def test_an_infinite_sample_is_refused(bench_client: httpx.AsyncClient) -> None:
    worker, grant = await leased(bench_client, MATMUL)
    result = run_result(grant["spec"])
    result["measurements"][0]["samples_s"] = [0.001, 1e308, 0.0015]
    body = json.dumps(
        {
            "worker_id": worker.id,
            "job_id": grant["job_id"],
            "lease_id": grant["lease_id"],
            "result": result,
        }
    ).replace("1e+308", "1e999")
    assert "1e999" in body
    answer = await bench_client.post(
        "/api/v1/worker/result", content=body, headers={**AUTH, "content-type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert (await stored(bench_client, grant["job_id"]))["run"] is None


async def test_statistics_and_rates_are_the_servers_own_from_the_samples(
    bench_client: httpx.AsyncClient,
) -> None:
    worker, grant = await leased(bench_client, MATMUL)
    result = run_result(grant["spec"])
    result["measurements"][0].update(samples_s=[1.0, 1.0, 1.0], stats=FORGED_STATS)
    result["rates"] = {**SPEEDS, "flops_per_s": 7.77e14, "bytes_per_s": 3.3e12}
    assert (await post(worker, grant, result)).status_code == 200

    run = (await stored(bench_client, grant["job_id"]))["run"]
    stats = run["measurements"][0]["stats"]
    assert stats["median"] == stats["mean"] == stats["min"] == 1.0
    assert stats["rounds"] == 3 and stats["ops"] == 1.0
    assert run["rates"]["flops_per_s"] == SPEEDS["flops"] / 1.0
    assert run["rates"]["bytes_per_s"] == SPEEDS["bytes"] / 1.0
    page = (await bench_client.get(f"/runs/{grant['job_id']}")).text
    assert "1.235" not in page and "7.77e+05" not in page


@pytest.mark.parametrize("run_s", [-3.0, 1e300])
async def test_a_whole_job_time_out_of_range_is_refused(
    bench_client: httpx.AsyncClient, run_s: float
) -> None:
    worker, grant = await leased(bench_client, MATMUL)
    problems = fields(await post(worker, grant, run_result(grant["spec"]), run_s=run_s))
    assert any("run_seconds" in f for f in problems), problems
    assert (await stored(bench_client, grant["job_id"]))["run"] is None


# --- L2: the typed extra entries a page reads -----------------------------------------------


async def test_a_wrongly_typed_cuda_build_fact_is_refused_and_no_page_breaks(
    bench_client: httpx.AsyncClient,
) -> None:
    caps = capabilities("gpu", paths=["cuda", "jax-gpu"], cuda_compile=True, cuda_run=True)
    spec = {"workload": "matmul", "path": "cuda", "params": MATMUL["params"]}
    worker, grant = await leased(bench_client, {**spec, "measure": {"samples": 5}}, caps)
    result = run_result(grant["spec"])
    result["measurements"][0].update(boundary="device-events", subject="kernel")
    result["extra"] = {"cuda": {"build": {"ptx_s": "soon", "cubin_s": [1]}}}
    problems = fields(await post(worker, grant, result))
    assert "valid number" in problems["result.extra.cuda.build.ptx_s"]
    assert "result.extra.cuda.build.cubin_s" in problems

    result["extra"] = {"cuda": {"build": {"ptx_s": 0.25, "cubin_s": 0.5, "cache": "miss"}}}
    assert (await post(worker, grant, result)).status_code == 200
    page = await bench_client.get(f"/runs/{grant['job_id']}")
    assert page.status_code == 200 and "PTX in 250" in page.text


# --- genuine runs pass, and the server's numbers are the publish step's ----------------------


@pytest.mark.parametrize(
    "measure",
    [
        {"samples": 12, "mode": "throughput", "calls_per_sample": 3},
        {"samples": 12, "mode": "application"},
        {"samples": 12, "mode": "dispatch"},
        {"samples": "auto", "auto_max_samples": 40, "max_seconds": 2.0},
    ],
    ids=["throughput", "application", "dispatch", "auto"],
)
async def test_a_genuine_run_of_each_mode_is_stored_with_the_numbers_it_published(
    bench_client: httpx.AsyncClient, measure: dict[str, Any]
) -> None:
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    spec = {**MATMUL, "measure": measure}
    worker, grant = await leased(bench_client, spec)
    published = run_job(JobSpec.model_validate(grant["spec"])).model_dump(mode="json")
    assert published["valid"] and published["measurements"]
    answer = await post(worker, grant, published)
    assert answer.status_code == 200, answer.text

    run = (await stored(bench_client, grant["job_id"]))["run"]
    assert run["valid"]
    for mine, theirs in zip(run["measurements"], published["measurements"], strict=True):
        assert mine["boundary"] == theirs["boundary"]
        assert mine["samples_s"] == theirs["samples_s"] and mine["stats"] == theirs["stats"]
        assert mine["warmup_discarded"] == theirs["warmup_discarded"]
    assert run["rates"] == published["rates"]
    if measure.get("mode") == "dispatch":
        assert (
            run["rates"]["flops_per_s"] is None and run["measurements"][0]["stats"]["ops"] is None
        )
    else:
        assert run["rates"]["flops_per_s"] and run["rates"]["flops_per_s"] > 0


async def test_a_run_stored_before_the_extra_check_still_renders(
    bench_client: httpx.AsyncClient, bench_dispatcher: Any
) -> None:
    """A cuda run an older server stored with `extra.cuda` of the wrong types (it gated
    what it stored, but did not check `extra`): its page still renders."""
    from app.dispatch.results import prepare
    from workers.protocol import RunResult

    caps = capabilities("gpu", paths=["cuda", "jax-gpu"], cuda_compile=True, cuda_run=True)
    spec = {"workload": "matmul", "path": "cuda", "params": MATMUL["params"]}
    worker, grant = await leased(bench_client, {**spec, "measure": {"samples": 5}}, caps)
    result = run_result(grant["spec"])
    result["measurements"][0]["boundary"] = "device-events"
    result["extra"] = {"cuda": {"build": {"ptx_s": "soon", "cubin_s": [1]}, "launches": "x"}}
    prepared = prepare(
        RunResult.model_validate(result),
        artifact_max_bytes=1 << 20,
        inline_bytes=1 << 16,
        pipeline_max_bytes=1 << 20,
    )
    verdict = bench_dispatcher.complete(
        worker.id, grant["job_id"], grant["lease_id"], prepared, 0.5
    )
    assert verdict.accepted
    page = await bench_client.get(f"/runs/{grant['job_id']}")
    assert page.status_code == 200 and "PTX in —" in page.text
