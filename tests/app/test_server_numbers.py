"""The server's own numbers: a real run's JSON with one lie, posted under a valid lease and
worker key, and what the API, `samples.csv` and the run page then show.

Each test is one way a buggy or forged worker can lie (the rows of the rules' table in
docs/design/result-rules.md). The runs are real: small catalog jobs run once per session
through the real engine on this machine's CPU, then posted as a worker would post them.
"""

from __future__ import annotations

import copy
import csv
import io
import statistics
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app.bench_fakes import MATMUL, FakeWorker, capabilities, run_result
from workers.catalog import parse_params
from workers.catalog.arithmetic import Arithmetic

pytestmark = pytest.mark.anyio

INTERPRET = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 128, "n": 128, "k": 128, "kernel": "pallas"},
    "measure": {"samples": 3},
}
THROUGHPUT = {**MATMUL, "measure": {"samples": 5, "mode": "throughput", "calls_per_sample": 4}}
SWEEP = {
    "workload": "shape-sweep",
    "path": "jax-cpu",
    "params": {"shapes": [3, 5, 8], "features": 16, "out_features": 16},
    "measure": {"samples": 3},
}
SPECS = {"matmul": MATMUL, "throughput": THROUGHPUT, "sweep": SWEEP, "interpret": INTERPRET}


@pytest.fixture(scope="session")
def real_runs() -> dict[str, dict[str, Any]]:
    """One real run of each spec, as its worker would post it."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    return {
        name: run_job(JobSpec.model_validate(spec)).model_dump(mode="json")
        for name, spec in SPECS.items()
    }


async def posted(
    client: httpx.AsyncClient,
    spec: dict[str, Any],
    result: dict[str, Any],
    run_s: float | None = None,
    caps: dict[str, Any] | None = None,
) -> tuple[httpx.Response, str]:
    """`result` posted for a fresh job of `spec` by a fresh worker: the answer, the job id."""
    worker = FakeWorker(client, caps)
    await worker.register()
    created = await client.post("/api/v1/jobs", json=spec)
    assert created.status_code == 202, created.text
    grant = await worker.lease()
    assert grant is not None
    body: dict[str, Any] = {"worker_id": worker.id, "job_id": grant["job_id"], "result": result}
    if run_s is not None:
        body["run_seconds"] = run_s
    return await worker.post("result", body), grant["job_id"]


async def published(
    client: httpx.AsyncClient, spec: dict[str, Any], result: dict[str, Any], **kw: Any
) -> tuple[dict[str, Any], list[list[str]], str]:
    """What a reader gets of `result` once posted: the API's job, the CSV rows, the page."""
    answer, job_id = await posted(client, spec, result, **kw)
    assert answer.status_code == 200, answer.text
    job = (await client.get(f"/api/v1/jobs/{job_id}")).json()
    rows = list(csv.reader(io.StringIO((await client.get(f"/runs/{job_id}/samples.csv")).text)))
    page = (await client.get(f"/runs/{job_id}")).text
    return job, rows[1:], page


def lie(run: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(run)


def main_median(run: dict[str, Any]) -> float:
    return float(statistics.median(run["measurements"][0]["samples_s"]))


# --- interpret mode ----------------------------------------------------------------------


async def test_interpret_mode_shows_no_time_whatever_the_worker_sends(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["interpret"])
    forged["measurements"][0]["samples_s"] = [1e-4, 1.1e-4, 1.2e-4]  # an ordinary run's
    forged["rates"] = {"flops": 4.2e6, "bytes": 1.0, "boundary": "host-sync"}
    job, rows, page = await published(bench_client, INTERPRET, forged, run_s=0.5)
    run = job["run"]
    assert run["correctness"]["passed"] and run["valid"]  # its verdict stands
    assert all(m["samples_s"] == [] and m["stats"] is None for m in run["measurements"])
    assert run["rates"]["flops_per_s"] is None and run["run_seconds"] is None
    assert rows == []
    assert "interpret mode" in page and "GFLOP/s" not in page and "MFLOP/s" not in page


# --- the shape sweep -----------------------------------------------------------------------


async def test_a_sweeps_times_are_the_samples_not_the_workers_figures(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    honest = real_runs["sweep"]
    forged = lie(honest)
    for p in forged["sweep"]["policies"]:
        p.update(first_pass_s=-1.0, steady_pass_s=1e-12, steady_call_s=1e-12, flops=1.0)
    forged["rates"]["calls"] = 1
    job, _, page = await published(bench_client, SWEEP, forged)
    policies = job["run"]["sweep"]["policies"]
    by_subject = {m["subject"]: m for m in honest["measurements"]}
    for p, h in zip(policies, honest["sweep"]["policies"], strict=True):
        per_call = statistics.median(by_subject[f"bucketing {p['policy']}"]["samples_s"])
        assert p["steady_call_s"] == pytest.approx(per_call)
        assert p["steady_pass_s"] == pytest.approx(per_call * 3)
        assert p["first_pass_s"] is None  # negative: withheld, never shown as a time
        assert p["flops"] == h["flops"]  # the catalog's count
    assert job["run"]["rates"]["calls"] == 3
    assert "-1000000" not in page and ">0.0 µs<" not in page and "1e-12" not in page
    assert "0.001 ns" not in page  # 1e-12 s as the pages write a few nanoseconds


# --- work counts ---------------------------------------------------------------------------


async def test_flop_and_byte_counts_are_the_catalogs(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    honest = real_runs["matmul"]
    forged = lie(honest)
    forged["rates"].update(
        flops=honest["rates"]["flops"] * 10, bytes=honest["rates"]["bytes"] * 10, subject="x"
    )
    job, _, page = await published(bench_client, MATMUL, forged)
    rates = job["run"]["rates"]
    params = parse_params("matmul", MATMUL["params"])
    assert rates["flops"] == 2 * 64**3 == params.flop_count()
    assert rates["bytes"] == params.byte_count() and rates["subject"] is None
    assert rates["flops_per_s"] == pytest.approx(rates["flops"] / main_median(honest))
    wrong = f"{rates['flops_per_s'] * 10 / 1e9:.3g} GFLOP/s"
    assert wrong not in page


# --- correctness ---------------------------------------------------------------------------


async def test_the_tolerance_is_the_catalogs_not_the_workers(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["correctness"].update(passed=True, error=5.0, tolerance=1e9)
    job, rows, page = await published(bench_client, MATMUL, forged, run_s=1.0)
    run = job["run"]
    # The catalog's at the arithmetic a CPU runs float32 products at (its own float32).
    params = parse_params("matmul", MATMUL["params"])
    tolerance = params.tolerance_at(Arithmetic.FLOAT32)
    assert run["correctness"]["tolerance"] == tolerance and not run["correctness"]["passed"]
    assert run["correctness"]["arithmetic"] == "float32"
    assert run["valid"] is False and run["rates"]["flops_per_s"] is None
    assert rows == [] and run["run_seconds"] is None
    assert "Hidden: a run whose output failed" in page


async def test_a_run_the_worker_marks_not_valid_stays_not_valid(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["valid"] = False
    job, rows, _ = await published(bench_client, MATMUL, forged)
    assert job["run"]["valid"] is False and rows == []
    assert job["run"]["rates"]["flops_per_s"] is None


# --- run time --------------------------------------------------------------------------------


async def test_a_run_time_shorter_than_its_samples_is_withheld(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    job, _, _ = await published(bench_client, MATMUL, lie(real_runs["matmul"]), run_s=1e-9)
    assert job["run"]["run_seconds"] is None
    job, _, _ = await published(bench_client, MATMUL, lie(real_runs["matmul"]), run_s=3600.0)
    assert job["run"]["run_seconds"] is None  # longer than the server held the lease
    job, _, _ = await published(bench_client, MATMUL, lie(real_runs["matmul"]), run_s=1.5)
    assert job["run"]["run_seconds"] == 1.5


# --- other figures ---------------------------------------------------------------------------


async def test_negative_and_inconsistent_figures_are_withheld(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["stage_seconds"].update(trace=-1.0, compile=-0.5)
    forged["harness_seconds"] = -3.0
    forged["extra"]["unreported_s"] = {"inputs": -2.0, "check": 0.001}
    forged["extra"]["made_up"] = {"gflops": 999}
    forged["cost_analysis"] = {"flops": -5.0, "bytes_accessed": 12.0}
    forged["memory_analysis"] = {"argument_bytes": -1, "peak_bytes": 100}
    forged["measurements"][0]["calls_per_sample"] = 1000
    job, _, page = await published(bench_client, MATMUL, forged)
    run = job["run"]
    assert run["stage_seconds"]["trace"] is None and run["stage_seconds"]["compile"] is None
    assert run["harness_seconds"] is None
    assert run["extra"]["unreported_s"] == {"check": 0.001} and "made_up" not in run["extra"]
    assert run["cost_analysis"] == {"flops": None, "bytes_accessed": 12.0}
    assert run["memory_analysis"]["argument_bytes"] is None
    assert run["memory_analysis"]["peak_bytes"] == 100
    assert run["measurements"][0]["calls_per_sample"] == 1
    assert "-1.000 s" not in page and "-500" not in page


async def test_throughput_samples_span_the_jobs_k(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["throughput"])
    forged["measurements"][0]["calls_per_sample"] = 1000
    job, _, _ = await published(bench_client, THROUGHPUT, forged)
    assert job["run"]["measurements"][0]["calls_per_sample"] == 4


async def test_a_device_kind_the_worker_never_registered_fails_the_job(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["environment"]["device_kind"] = "NVIDIA H100"
    answer, job_id = await posted(bench_client, MATMUL, forged)
    assert answer.status_code == 409
    assert answer.json()["detail"][0]["field"] == "result.environment.device_kind"
    job = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()
    assert job["status"] == "failed" and job["run"] is None
    assert "NVIDIA H100" in job["reason"] and "environment" in job["reason"]


async def test_more_devices_than_registered_are_refused(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["environment"]["device_count"] = 64  # the CPU worker has at most 8 virtual
    answer, _ = await posted(bench_client, MATMUL, forged)
    assert answer.status_code == 409
    assert answer.json()["detail"][0]["field"] == "result.environment.device_count"


# --- scaling points and groups ----------------------------------------------------------------

SCALE = {
    "workload": "sharded-matmul",
    "path": "jax-cpu",
    "params": {"m": 64, "n": 64, "k": 64, "devices": 2},
    "stages": ["compile", "execute", "scale"],
    "measure": {"samples": 5},
}


def scaling_result(spec: dict[str, Any], **point: Any) -> dict[str, Any]:
    result = run_result(spec)
    base = {"devices": 1, "mode": "strong", "mesh_shape": [1], "samples_s": [2e-4, 3e-4]}
    result["scaling"] = {"label": "virtual devices", "points": [{**base, **point}]}
    return result


@pytest.mark.parametrize(
    "point",
    [{"correct": True, "error": None}, {"correct": True, "error": 0.5}],
    ids=["no error figure", "error over the tolerance"],
)
async def test_a_scaling_point_keeps_times_only_within_the_catalogs_tolerance(
    bench_client: httpx.AsyncClient, point: dict[str, Any]
) -> None:
    result = scaling_result(SCALE, **point)
    job, _, _ = await published(bench_client, SCALE, result)
    (p,) = job["run"]["scaling"]["points"]
    assert p["samples_s"] == [] and p["median_s"] is None and p["correct"] is False
    honest = scaling_result(SCALE, correct=True, error=1e-7)
    job, _, _ = await published(bench_client, SCALE, honest)
    (p,) = job["run"]["scaling"]["points"]
    assert p["median_s"] == pytest.approx(2.5e-4) and "slowest_device_s" not in p


def group_result(spec: dict[str, Any], devices: int) -> dict[str, Any]:
    result = run_result(spec)
    result["measurements"][0]["samples_s"] = [1.2e-4, 1.3e-4, 1.4e-4]
    member = {"local_devices": 1, "passed": True, "error": 1e-7, "digest": "d"}
    result["group"] = {
        "processes": 2,
        "coordinator": "127.0.0.1:1",
        "devices": devices,
        "agreed": True,
        "members": [
            {**member, "process_id": 0, "median_s": 1e-9},
            {**member, "process_id": 1, "median_s": 1e-9},
        ],
    }
    return result


async def test_a_groups_member_medians_are_its_samples(bench_client: httpx.AsyncClient) -> None:
    caps = capabilities(device_count=2)
    job, _, _ = await published(bench_client, MATMUL, group_result(MATMUL, 2), caps=caps)
    first, second = job["run"]["group"]["members"]
    assert first["median_s"] == pytest.approx(1.3e-4) and second["median_s"] is None


async def test_a_group_larger_than_the_workers_devices_is_refused(
    bench_client: httpx.AsyncClient,
) -> None:
    answer, _ = await posted(bench_client, MATMUL, group_result(MATMUL, 8))
    assert answer.status_code == 409
    assert answer.json()["detail"][0]["field"] == "result.group.devices"


# --- any lie at all ------------------------------------------------------------------------

FIGURES: tuple[tuple[str | int, ...], ...] = (
    ("rates", "flops"),
    ("rates", "bytes"),
    ("rates", "calls"),
    ("rates", "subject"),
    ("rates", "boundary"),
    ("rates", "flops_per_s"),
    ("rates", "bytes_per_s"),
    ("correctness", "tolerance"),
    ("measurements", 0, "calls_per_sample"),
    ("measurements", 0, "stats", "median"),
    ("measurements", 0, "stats", "ops"),
)
"""What the server publishes of a run that a lie must not change: each either what the
honest run publishes, or withheld."""

LIES: tuple[tuple[str | int, ...], ...] = (
    *FIGURES,
    ("correctness", "error"),
    ("correctness", "passed"),
    ("measurements", 0, "stats"),
    ("measurements", 0, "boundary"),
    ("stage_seconds", "compile"),
    ("harness_seconds",),
    ("valid",),
    ("environment", "device_count"),
)


def _at(data: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        if data is None:
            return None
        data = data[key]
    return data


def _set(data: Any, path: tuple[str | int, ...], value: Any) -> None:
    """Put `value` at `path`; nothing when an earlier lie already replaced a part above it
    with a value that has no parts (e.g. `measurements[0].stats` forged to None)."""
    for key in path[:-1]:
        if not isinstance(data, dict | list):
            return
        data = data[key]
    if isinstance(data, dict | list):
        data[path[-1]] = value


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["host-sync", "host-throughput", "kernel", "x"]),
)


@pytest.fixture(scope="session")
def honest_figures(real_runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The figures the server publishes of the honest run: filled in by the first example
    (which posts it and reads it back), kept for the rest."""
    return {}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lies=st.lists(st.tuples(st.sampled_from(LIES), values), min_size=1, max_size=3))
async def test_any_lie_leaves_the_published_figures_as_they_were_or_withheld(
    bench_client: httpx.AsyncClient,
    real_runs: dict[str, dict[str, Any]],
    honest_figures: dict[str, Any],
    lies: list[tuple[tuple[str | int, ...], Any]],
) -> None:
    if not honest_figures:
        job, _, _ = await published(bench_client, MATMUL, lie(real_runs["matmul"]))
        honest_figures.update({str(p): _at(job["run"], p) for p in FIGURES})
    forged = lie(real_runs["matmul"])
    for path, value in lies:
        _set(forged, path, value)
    answer, job_id = await posted(bench_client, MATMUL, forged)
    assert answer.status_code in (200, 409, 422), answer.text
    if answer.status_code != 200:
        return  # refused: nothing of it was stored
    run = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    for path in FIGURES:
        shown = _at(run, path)
        assert shown is None or shown == honest_figures[str(path)], (path, lies)


# --- what a second look found --------------------------------------------------------------

CUDA = {"workload": "matmul", "path": "cuda", "params": {"m": 64, "n": 64, "k": 64}}
CUDA_CAPS = {"paths": ["cuda"], "cuda_compile": True, "cuda_run": True}


def cuda_result(spec: dict[str, Any]) -> dict[str, Any]:
    """A cuda-path run with its kernel and the cuBLAS baseline, each judged."""
    result = run_result(spec)
    kernel = {"boundary": "device-events", "samples_s": [2e-5, 3e-5], "stats": None}
    result["measurements"] = [
        {**kernel, "subject": "kernel"},
        {**kernel, "subject": "cuBLAS", "samples_s": [1e-7, 1e-7]},
    ]
    lax = {"passed": True, "error": 0.5, "tolerance": 1e9}
    result["extra"] = {"baselines": {"cuBLAS": lax}, "comparison": []}
    return result


async def test_a_baseline_is_judged_at_the_catalogs_tolerance(
    bench_client: httpx.AsyncClient,
) -> None:
    caps = capabilities("gpu", **CUDA_CAPS)
    job, rows, _ = await published(
        bench_client, CUDA, cuda_result(run_result(CUDA)["job"]), caps=caps
    )
    run = job["run"]
    cublas = next(m for m in run["measurements"] if m["subject"] == "cuBLAS")
    assert cublas["samples_s"] == [] and cublas["stats"] is None
    assert run["extra"]["baselines"]["cuBLAS"]["passed"] is False
    assert {r["subject"] for r in run["extra"]["comparison"]} == {"kernel"}
    assert all(r[0] != "cuBLAS" for r in rows)


async def test_an_invented_baseline_or_a_second_measurement_is_refused(
    bench_client: httpx.AsyncClient,
) -> None:
    caps = capabilities("gpu", **CUDA_CAPS)
    invented = cuda_result(run_result(CUDA)["job"])
    invented["measurements"][1]["subject"] = "MagicLib"
    answer, _ = await posted(bench_client, CUDA, invented, caps=caps)
    assert answer.status_code == 422 and "MagicLib" in answer.text
    twice = run_result(MATMUL)
    twice["measurements"] = twice["measurements"] * 2
    answer, _ = await posted(bench_client, MATMUL, twice)
    assert answer.status_code == 422 and "second measurement" in answer.text


async def test_a_platform_the_jobs_path_cannot_run_on_is_refused(
    bench_client: httpx.AsyncClient,
) -> None:
    """A CPU worker that leased a jax-cpu job, registered again as a GPU with its own id
    and key, then posted the run as made on that GPU."""
    worker = FakeWorker(bench_client)
    await worker.register()
    assert (await bench_client.post("/api/v1/jobs", json=MATMUL)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    gpu = capabilities("gpu", paths=["jax-cpu", "jax-gpu"])
    again = {"capabilities": gpu, "worker_id": worker.id, "worker_key": worker.key}
    assert (await worker.post("register", again)).status_code == 200
    forged = run_result(grant["spec"])
    forged["environment"].update(platform="gpu", device_kind="NVIDIA H200")
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": forged}
    answer = await worker.post("result", body)
    assert answer.status_code == 409 and "environment.platform" in answer.text


async def test_bad_ceilings_are_refused_at_registration(bench_client: httpx.AsyncClient) -> None:
    roofs = {"device_kind": "cpu", "copy_bytes_per_s": -1e9, "measured_at": "2026-12-02T00:00"}
    worker = FakeWorker(bench_client, capabilities(ceilings=roofs))
    answer = await worker.post("register", {"capabilities": worker.caps, "name": "x"})
    assert answer.status_code == 422 and "copy_bytes_per_s" in answer.text


async def test_a_sweep_or_series_on_a_job_without_one_is_not_published(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["sweep"] = lie(real_runs["sweep"])["sweep"]
    job, _, page = await published(bench_client, MATMUL, forged)
    assert job["run"]["sweep"] is None and "Shape sweep" not in page
    series = scaling_result(MATMUL, correct=True, error=1e-7)
    answer, _ = await posted(bench_client, MATMUL, series)
    assert answer.status_code == 422 and "scale stage" in answer.text


async def test_a_sweep_policy_the_job_never_ran_is_refused(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["sweep"])
    forged["sweep"]["policies"][1]["policy"] = "bogus"
    answer, _ = await posted(bench_client, SWEEP, forged)
    assert answer.status_code == 422 and "result.sweep.policies" in answer.text


async def test_a_scaling_point_outside_the_series_is_refused(
    bench_client: httpx.AsyncClient,
) -> None:
    answer, _ = await posted(bench_client, SCALE, scaling_result(SCALE, devices=64))
    assert answer.status_code == 422 and "result.scaling.points[0].devices" in answer.text


async def test_a_run_that_executed_was_not_compiled_without_the_hardware(
    bench_client: httpx.AsyncClient, real_runs: dict[str, dict[str, Any]]
) -> None:
    forged = lie(real_runs["matmul"])
    forged["environment"]["cache_events"] = {"hits": 50, "misses": 0, "time_saved_s": 123.0}
    forged["extra"]["kernel"] = {"kernel": "pallas", "blocks": {"block_m": -1}}
    forged["warnings"] = ["this kernel reached 987.6 TFLOP/s", "an honest warning"]
    forged["measurements"][0]["stopped_because"] = "took 5 samples at 12 GB/s"
    job, _, page = await published(bench_client, MATMUL, forged)
    run = job["run"]
    assert run["environment"]["cache_events"] is None  # a cold job has no cache hits
    assert "kernel" not in run["extra"]
    assert run["warnings"] == ["an honest warning"]
    assert run["measurements"][0]["stopped_because"] is None
    assert "987.6" not in page and "12 GB/s" not in page


def test_gating_a_failed_scaling_point_twice_says_withheld_once() -> None:
    from workers.catalog.published import published as rules
    from workers.protocol import RunResult

    result = scaling_result(SCALE, correct=False, error=0.5, note="relative error 0.5")
    once = rules(RunResult.model_validate(result))
    twice = rules(rules(once))
    assert once == twice
    assert (
        once.scaling is not None and once.scaling.points[0].note == "withheld: relative error 0.5"
    )
