"""The cuda path's execute stage on a real NVIDIA GPU (marked `gpu`; skipped, with the
reason, where CuPy sees none). Run by `make gpu-check` on the GPU test machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workers.catalog import CatalogError, parse_params
from workers.cuda import env
from workers.cuda.build import build
from workers.cuda.plan import plan_for
from workers.measure.faults import perturbed
from workers.protocol import BoundaryId, JobSpec, RunResult
from workers.run.base import SEED
from workers.run.engine import run_job
from workers.workloads import get_workload

PROBE = env.probe_gpu()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(PROBE.count == 0, reason=f"no NVIDIA GPU: {PROBE.reason}"),
]


def cuda_run(
    workload: str,
    params: dict[str, Any],
    tmp_path: Path,
    *,
    perturb: float | None = None,
    **measure: Any,
) -> RunResult:
    job = JobSpec.model_validate(
        {
            "workload": workload,
            "path": "cuda",
            "params": params,
            "measure": {"samples": 5, "cache": "persistent", **measure},
        }
    )
    if perturb is None:
        return run_job(job, cache_dir=tmp_path / "jax")
    with perturbed(perturb):
        return run_job(job, cache_dir=tmp_path / "jax")


def by_subject(run: RunResult) -> dict[str, set[BoundaryId]]:
    found: dict[str, set[BoundaryId]] = {}
    for m in run.measurements:
        found.setdefault(m.subject or "", set()).add(m.boundary)
    return found


@pytest.mark.parametrize("kernel", ["naive", "tiled"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(100, 70, 33), (512, 512, 512)])
def test_matmul_kernels_pass_and_are_compared_with_cublas_and_jax(
    kernel: str, dtype: str, shape: tuple[int, int, int], tmp_path: Path
) -> None:
    m, n, k = shape
    run = cuda_run("matmul", {"m": m, "n": n, "k": k, "kernel": kernel, "dtype": dtype}, tmp_path)
    assert run.valid, run.warnings
    assert run.correctness is not None and run.correctness.passed
    subjects = by_subject(run)
    assert subjects["kernel"] == {BoundaryId.DEVICE_EVENTS, BoundaryId.HOST_SYNC}
    assert subjects["cuBLAS"] == {BoundaryId.DEVICE_EVENTS, BoundaryId.HOST_SYNC}
    assert run.extra["baselines"]["cuBLAS"]["passed"] is True
    if "JAX" in subjects:  # present whenever this process's JAX sees the GPU
        assert subjects["JAX"] == {BoundaryId.HOST_SYNC}
    assert run.rates is not None and run.rates.boundary is BoundaryId.DEVICE_EVENTS
    assert run.rates.flops_per_s is not None and run.rates.flops_per_s > 0
    rows = run.extra["comparison"]
    assert {(r["subject"], r["boundary"]) for r in rows} >= {
        ("kernel", "device-events"),
        ("cuBLAS", "device-events"),
    }
    assert all(r["speedup_over_kernel"] is not None for r in rows if r["subject"] != "JAX")
    assert run.environment.platform == "gpu" and run.environment.device_kind == PROBE.name
    for key in ("driver", "cuda_runtime", "cublas", "compute_capability", "sm_clock_mhz"):
        assert key in run.environment.extra, key


CASES: list[tuple[str, dict[str, Any]]] = [
    ("elementwise", {"n": 1_000_003, "ops": 8}),
    ("elementwise", {"n": 4097, "ops": 5, "kernel": "unfused"}),
    ("elementwise", {"n": 65536, "ops": 4, "dtype": "bfloat16"}),
    ("reduction", {"rows": 333, "cols": 1025, "op": "sum", "axis": 1}),
    ("reduction", {"rows": 333, "cols": 1025, "op": "sum", "axis": 0}),
    ("reduction", {"rows": 257, "cols": 129, "op": "softmax", "axis": 1}),
    ("reduction", {"rows": 257, "cols": 129, "op": "softmax", "axis": 0, "dtype": "bfloat16"}),
    ("reduction", {"rows": 100, "cols": 300, "op": "sum", "axis": 1, "kernel": "naive"}),
    ("reduction", {"rows": 100, "cols": 300, "op": "softmax", "axis": 0, "kernel": "naive"}),
    ("reduction", {"rows": 64, "cols": 64, "op": "sum", "axis": 1, "dtype": "float16"}),
]


@pytest.mark.parametrize(("workload", "params"), CASES)
def test_memory_bound_kernels_pass_their_check(
    workload: str, params: dict[str, Any], tmp_path: Path
) -> None:
    run = cuda_run(workload, params, tmp_path)
    assert run.valid, run.warnings
    assert by_subject(run)["kernel"] == {BoundaryId.DEVICE_EVENTS, BoundaryId.HOST_SYNC}
    assert run.rates is not None and run.rates.bytes_per_s is not None


def test_the_device_interval_sits_inside_the_host_interval(tmp_path: Path) -> None:
    run = cuda_run("elementwise", {"n": 1 << 22, "ops": 8}, tmp_path, samples=30)
    medians = {
        m.boundary: m.stats.median for m in run.measurements if m.subject == "kernel" and m.stats
    }
    assert 0 < medians[BoundaryId.DEVICE_EVENTS] <= medians[BoundaryId.HOST_SYNC]


def test_flushing_the_l2_before_each_sample(tmp_path: Path) -> None:
    run = cuda_run("elementwise", {"n": 1 << 20, "ops": 2}, tmp_path, flush_l2=True)
    assert run.valid and any("L2 flushed" in w for w in run.warnings)


def test_throughput_mode_divides_k_calls(tmp_path: Path) -> None:
    run = cuda_run("matmul", {"m": 256, "n": 256, "k": 256}, tmp_path, mode="throughput")
    kernel = [m for m in run.measurements if m.subject == "kernel"]
    assert {m.boundary for m in kernel} == {BoundaryId.DEVICE_EVENTS, BoundaryId.HOST_THROUGHPUT}
    assert all(m.calls_per_sample == 10 for m in kernel)


def test_a_wrong_output_shows_no_speed(tmp_path: Path) -> None:
    run = cuda_run("matmul", {"m": 64, "n": 64, "k": 64}, tmp_path, perturb=0.05)
    assert not run.valid and all(m.stats is None for m in run.measurements)
    assert "comparison" not in run.extra


def test_a_failed_launch_raises_and_yields_no_timing(tmp_path: Path) -> None:
    from workers.cuda.launch import KernelFailed, execute

    params = parse_params("matmul", {"m": 64, "n": 64, "k": 64})
    plan = plan_for(params)
    # 2048 threads per block is over every NVIDIA GPU's limit of 1024: the launch fails.
    broken = dataclasses.replace(
        plan, launches=(dataclasses.replace(plan.launches[0], block=(2048, 1, 1)),)
    )
    built = build(plan.source, env.target_arch(), cache_dir=tmp_path)
    workload = get_workload("matmul")
    inputs = workload.make_inputs(params, np.random.default_rng(SEED))
    options = JobSpec.model_validate({"workload": "matmul"}).measure
    with pytest.raises(KernelFailed, match="launch or execution failed"):
        execute(
            broken,
            cubin=str(built.cubin),
            workload=workload,
            params=params,
            host_inputs=inputs,
            options=options,
            l2_bytes=None,
        )
    # The context survives a refused launch: the next run is fine.
    assert cuda_run("matmul", {"m": 64, "n": 64, "k": 64}, tmp_path).valid


def test_modes_without_a_cuda_meaning_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"measure\.mode"):
        cuda_run("matmul", {"m": 8}, tmp_path, mode="application")


def test_the_worker_advertises_cuda_run() -> None:
    assert env.cuda_capabilities() == {"cuda_compile": True, "cuda_run": True}
