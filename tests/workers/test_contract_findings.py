"""Six ways a run once broke the measurement contract, each pinned by a test.

A failed shape sweep showed its speeds; a NaN output of an exported function without a
reference passed; complex outputs were judged by their real part; a tiny .npz could
declare gigabytes and throughput mode kept K outputs alive past the byte cap; the
application path sampled cold transfers; and under the persistent cache the sweep's two
policies shared compiles.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workers.catalog import CatalogError, check_live_outputs, parse_params
from workers.catalog.npz import read_npz
from workers.cli.export_fn import export_function
from workers.compiler.compile_cache import apply_cache_policy
from workers.compiler.environment import detect_environment
from workers.files import FileCache
from workers.measure.correctness import check_output
from workers.measure.faults import perturbed
from workers.measure.publish import Measured
from workers.protocol import CacheEvents, CachePolicy, JobSpec, MeasureOptions, PathId
from workers.run.engine import run_job
from workers.workloads.exported import ExportedFunction


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def exported_job(files: FileCache, function: Any, shape: tuple[int, ...], **params: Any) -> JobSpec:
    data, _ = export_function(function, [("float32", shape)], ["cpu"])
    body = {"artifact": files.put(data), **params}
    return JobSpec.model_validate(
        {"workload": "exported", "params": body, "measure": {"samples": 3}}
    )


# --- 1. a failed shape sweep shows no speed -------------------------------------------------


def test_a_failed_sweep_shows_no_pass_or_call_time() -> None:
    spec = JobSpec.model_validate(
        {"workload": "shape-sweep", "params": {"shapes": [3, 5, 8]}, "measure": {"samples": 2}}
    )
    with perturbed(0.5):
        run = run_job(spec)
    assert not run.valid and run.sweep is not None
    for policy in run.sweep.policies:
        assert policy.steady_call_s is None and policy.steady_pass_s is None
        assert policy.first_pass_s is None
        assert policy.compile_s > 0  # compile time is no speed of the output: it stays
    assert all(m.samples_s == [] for m in run.measurements)


# --- 2. NaN fails, checked or not -------------------------------------------------------------


def _times_nan(x: jax.Array) -> jax.Array:
    return x * jnp.nan


def _double(x: jax.Array) -> jax.Array:
    return x * 2.0


def test_a_nan_output_without_a_reference_fails(tmp_path: Path) -> None:
    files = FileCache(tmp_path)
    run = run_job(exported_job(files, _times_nan, (8, 4)), files_dir=tmp_path)
    assert not run.valid and run.correctness is not None and not run.correctness.passed
    assert run.correctness.detail is not None and "NaN" in run.correctness.detail
    assert run.rates is not None and run.rates.bytes_per_s is None


def test_a_finite_output_without_a_reference_stays_unchecked(tmp_path: Path) -> None:
    files = FileCache(tmp_path)
    run = run_job(exported_job(files, _double, (8, 4)), files_dir=tmp_path)
    assert run.valid and run.correctness is not None and not run.correctness.checked
    assert run.rates is not None and run.rates.bytes_per_s is not None


def test_the_cpu_stand_in_reference_names_its_dtype(tmp_path: Path) -> None:
    files = FileCache(tmp_path)
    data, _ = export_function(_double, [("float32", (4, 4))], ["cpu", "cuda"])
    params = parse_params("exported", {"artifact": files.put(data)})
    bound = ExportedFunction().bind(params, PathId.JAX_GPU, tmp_path)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    verdict = bound.judge(params, [x], x * 2)
    assert verdict.passed and verdict.reference == "the same artifact on the CPU, in float32"


def _sorts(x: jax.Array) -> jax.Array:
    """Small results from a large argument, through temporaries larger than either."""
    head = x[:2048]
    return jnp.sort(x)[:4] + jnp.sort(jnp.outer(head, head).ravel())[:4]


STAND_IN = re.compile(
    r"^output unchecked: no reference outputs were uploaded, and the same artifact on the CPU "
    r"would need [\d.]+ MB \(([\d,]+) bytes\) of host memory \(its CPU compile's memory "
    r"analysis\) beside the [\d.]+ (?:MB|kB) \(([\d,]+) bytes\) this run holds on the host, "
    r"over the worker's job limit of [\d.]+ MB \(([\d,]+) bytes\) \(BOUNDARY_MAX_JOB_BYTES\)$"
)


def test_a_cpu_stand_in_runs_only_within_the_job_limit_with_what_the_run_holds(
    tmp_path: Path,
) -> None:
    """On a TPU v5e, a training step at its largest fitting batch needed 82 GB of host
    memory as its CPU stand-in, and the host went down. The stand-in is compiled from
    shapes first; its peak and what the run already holds on the host (its inputs and
    results) must fit the job limit, or it is not run and the verdict says why."""
    files = FileCache(tmp_path)
    data, _ = export_function(_sorts, [("float32", (512 * 1024,))], ["cpu", "cuda"])
    params = parse_params("exported", {"artifact": files.put(data)})
    x = np.linspace(-1.0, 1.0, 512 * 1024, dtype=np.float32)
    head = x[:2048]
    out = np.sort(x)[:4] + np.sort(np.outer(head, head).ravel())[:4]

    def verdict(limit: int) -> Any:
        bound = ExportedFunction().bind(params, PathId.JAX_GPU, tmp_path, limit)
        return bound.judge(params, [x], out)

    tight = verdict(9 * 1024**2)  # room for the job itself (bind's estimate), not the CPU run
    assert not tight.checked and tight.reference == "none"
    said = STAND_IN.match(tight.detail or "")
    assert said is not None, tight.detail
    need, held, limit = (int(group.replace(",", "")) for group in said.groups())
    assert limit == 9 * 1024**2 and held == x.nbytes + out.nbytes
    assert need > x.nbytes  # the argument and the temporaries of two sorts
    short = verdict(need + held - 1)  # the CPU run alone would fit; with what is held, not
    assert not short.checked and STAND_IN.match(short.detail or "") is not None
    enough = verdict(need + held)
    assert enough.checked and enough.passed
    assert enough.reference == "the same artifact on the CPU, in float32"


def test_a_stand_in_over_several_cpu_devices_counts_each_and_an_unreported_peak_stops_it(
    tmp_path: Path,
) -> None:
    """memory_analysis() speaks for one device; a CPU run over four keeps four such peaks
    in the same host memory. Without a reported peak the stand-in does not run."""
    from workers.protocol import MemoryAnalysis

    bound = ExportedFunction(PathId.JAX_GPU, FileCache(tmp_path), max_bytes=1000)
    one = MemoryAnalysis(argument_bytes=100, output_bytes=50, temp_bytes=60, peak_bytes=200)
    assert bound._too_big(one, 1, 740) is None  # 200 + 60 (the CPU rule) + 740 ≤ 1,000
    said = bound._too_big(one, 4, 0) or ""
    assert "would need 1.04 kB (1,040 bytes) of host memory" in said and "on 4 devices" in said
    assert "over the worker's job limit of 1 kB (1,000 bytes)" in said
    assert bound._too_big(one.model_copy(update={"temp_bytes": None}), 1, 0) == (
        "the same artifact on the CPU would need memory its compile did not report, "
        "so it was not run"
    )


# --- 3. complex values are compared as complex ------------------------------------------------


def test_a_dropped_imaginary_part_fails() -> None:
    reference = np.array([1 + 1j, 2 + 2j])
    verdict = check_output(np.array([1.0, 2.0]), reference, 1e-6)
    assert not verdict.passed and verdict.error == pytest.approx(np.sqrt(5) / np.sqrt(10))
    assert check_output(reference.astype(np.complex64), reference, 1e-6).passed


# --- 4. memory is bounded before a job runs ---------------------------------------------------


def test_an_npz_declaring_more_than_the_cap_is_refused_before_loading(tmp_path: Path) -> None:
    files = FileCache(tmp_path)
    zeros = npz(arg0=np.zeros((2048, 1024), dtype=np.float32))  # 8 MiB declared, tiny file
    assert len(zeros) < 100_000
    assert [a.nbytes for a in read_npz(io.BytesIO(zeros))] == [8 * 2**20]
    job = exported_job(files, _double, (8, 4), inputs=files.put(zeros))
    with pytest.raises(CatalogError, match=r"params\.inputs: arg0: dimension 1 \(1,024\) makes"):
        run_job(job, files_dir=tmp_path, max_bytes=2**20)


def test_throughput_counts_its_k_live_outputs_against_the_cap() -> None:
    params = {"m": 512, "n": 512, "k": 512, "dtype": "float32"}  # a 1 MiB output
    spec = JobSpec.model_validate(
        {
            "workload": "matmul",
            "params": params,
            "measure": {"mode": "throughput", "calls_per_sample": 300, "samples": 1},
        }
    )
    with pytest.raises(CatalogError, match=r"measure\.calls_per_sample: 300 calls keep 300"):
        run_job(spec, max_bytes=100 * 2**20)
    parsed = parse_params("matmul", params)
    check_live_outputs(parsed, MeasureOptions(mode="throughput", calls_per_sample=10), 100 * 2**20)


def test_the_compiled_programs_output_size_bounds_an_exported_function(tmp_path: Path) -> None:
    files = FileCache(tmp_path)
    job = exported_job(files, _double, (512, 512))  # 1 MiB out
    measure = {"mode": "throughput", "calls_per_sample": 200, "samples": 1}
    job = job.model_copy(update={"measure": MeasureOptions.model_validate(measure)})
    with pytest.raises(CatalogError, match=r"measure\.calls_per_sample"):
        run_job(job, files_dir=tmp_path, max_bytes=50 * 2**20)


# --- 5. the application path warms its transfers ----------------------------------------------


def test_application_mode_warms_transfer_in_the_call_and_transfer_out() -> None:
    spec = JobSpec.model_validate(
        {
            "workload": "matmul",
            "params": {"m": 32, "n": 32, "k": 32},
            "measure": {"mode": "application", "samples": 2},
        }
    )
    run = run_job(spec)
    assert run.extra["warmed"]["covers"] == ["transfer-in", "call", "transfer-out"]
    latency = run_job(spec.model_copy(update={"measure": MeasureOptions(samples=2)}))
    assert latency.extra["warmed"]["covers"] == ["call"]


# --- 6. the sweep's policies never share a persistent compile ---------------------------------


def test_persistent_cache_does_not_let_the_policies_share(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "workload": "shape-sweep",
            "params": {"shapes": [3, 5, 8], "bucketing": "pow2"},
            "stages": ["compile"],
            "measure": {"cache": "persistent"},
        }
    )
    try:
        run = run_job(spec, cache_dir=tmp_path)
    finally:
        apply_cache_policy(CachePolicy.COLD, tmp_path)
    assert run.sweep is not None
    # Size 8 is compiled by both policies: each must compile it, neither may load it.
    assert [p.compilations for p in run.sweep.policies] == [3, 2]
    events = run.environment.cache_events
    assert events is not None and events.hits == 0


def test_a_negative_time_saved_is_explained() -> None:
    device = jax.devices()[0]
    environment = detect_environment(
        device, CachePolicy.PERSISTENT, CacheEvents(hits=1, time_saved_s=-0.004), [device]
    )
    measured = Measured(
        job=JobSpec.model_validate({"workload": "matmul"}),
        params={},
        environment=environment,
        started=time.perf_counter(),
    )
    run = measured.check(None).publish()
    assert any("time_saved_s is -4 ms" in w and "saving is not" in w for w in run.warnings)
