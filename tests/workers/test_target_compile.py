"""Real compiles for targets this machine does not have: a TPU v6e slice through libtpu,
B200 and H100 through JAX's CUDA plugin, and hand-written CUDA for sm_100 and sm_90.

Nothing here is mocked: each test runs the real compiler and reads what it produced.
The compiles take a second or a few each, so they are few and marked `slow`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dependencies import require
from workers.cli.run import EXIT_BAD_JOB, run_command
from workers.cuda import env as cuda_env
from workers.protocol import JobSpec, RunResult
from workers.run.engine import run_job
from workers.xla_targets.ptx_dump import SECTION

ROOT = Path(__file__).resolve().parents[2]


def target_job(workload: str, path: str, target: str, **params: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"workload": workload, "path": path, "target": target, "params": params}
    )


def deviceless_and_honest(run: RunResult, target: str) -> None:
    """What every run compiled without the hardware must say and must not show."""
    assert run.target is not None and run.target.id == target and run.target.deviceless
    assert run.warnings[0].startswith("Compiled without the hardware")
    assert run.measurements == [] and run.correctness is None
    assert run.rates is not None and run.rates.flops_per_s is None
    assert run.environment.platform == "cpu"  # the host that compiled
    assert run.environment.cache.value == "cold"
    assert run.stage_seconds.compile is not None and run.stage_seconds.compile > 0
    # Nothing ran, so no time but the stages' is published (the gate's rule).
    assert run.harness_seconds is None and "unreported_s" not in run.extra


@pytest.mark.slow
def test_a_tensor_sharded_matmul_for_a_v6e_2x4_slice(tmp_path: Path) -> None:
    job = target_job("sharded-matmul", "jax-tpu", "v6e:2x4", sharding="tensor")
    run = run_job(job, cache_dir=tmp_path / "cache")
    deviceless_and_honest(run, "v6e:2x4")
    assert run.target is not None and run.target.compiler == "libtpu"
    assert run.target.compiler_version  # libtpu's own version, from its package
    hlo = run.artifacts.hlo or ""
    assert "T(8,128)" in hlo  # TPU tiled layouts: only XLA:TPU writes these
    assert run.hlo_summary is not None
    reduces = [c for c in run.hlo_summary.collectives if c.kind.startswith("all-reduce")]
    assert reduces and reduces[0].replica_groups
    assert reduces[0].groups is not None and sorted(
        d for g in reduces[0].groups for d in g
    ) == list(range(8))
    # The mesh follows the slice's torus (mesh_utils.create_device_mesh), not 0…7.
    assert run.placement is not None and run.placement.devices == 8
    assert [s.device for s in run.placement.shards] == [0, 1, 2, 3, 7, 6, 5, 4]
    memory = run.target.memory
    assert memory is not None and memory.hbm_bytes == 32 * 2**30  # Google's 32 GiB
    assert memory.usable_bytes is not None and 31 * 2**30 < memory.usable_bytes < 32 * 2**30
    assert memory.usable_source and memory.usable_source.startswith("libtpu 0.0.")
    assert memory.peak_bytes and memory.fraction is not None and memory.fraction < 1
    assert any("optimal_seconds" in note for note in run.target.notes)
    assert "optimal_seconds" not in run.model_dump_json(include={"cost_analysis"})


@pytest.mark.slow
def test_a_bfloat16_matmul_for_one_b200_has_a_gemm_and_ptx_for_sm_100(tmp_path: Path) -> None:
    job = target_job("matmul", "jax-gpu", "b200:1", m=1024, n=1024, k=1024, dtype="bfloat16")
    run = run_job(job, cache_dir=tmp_path / "cache")
    deviceless_and_honest(run, "b200:1")
    assert any(w.startswith("XLA chose the configuration of its GEMM") for w in run.warnings)
    assert run.target is not None and run.target.arch == "sm_100"
    summary = run.hlo_summary
    assert summary is not None
    kinds = [f.backend_kind or "" for f in summary.fusions]
    calls = [c.target for c in summary.custom_calls]
    assert any("gemm" in k for k in kinds) or any("cublas" in c for c in calls), (kinds, calls)
    ptx = run.artifacts.ptx or ""
    assert ".target sm_100a" in ptx
    assert SECTION.split("{")[0] in ptx  # one section per kernel, from the per-compile dump
    assert run.cost_analysis is None  # GPU cost_analysis() is None: analytic counts stand
    assert run.rates is not None and run.rates.flops == 2 * 1024**3
    assert run.target.memory is not None and run.target.memory.hbm_label.startswith("180 GB")


@pytest.mark.slow
def test_h100_compiles_for_sm_90(tmp_path: Path) -> None:
    run = run_job(target_job("elementwise", "jax-gpu", "h100:1"), cache_dir=tmp_path / "cache")
    deviceless_and_honest(run, "h100:1")
    assert ".target sm_90a" in (run.artifacts.ptx or "")
    assert run.target is not None and run.target.memory is not None
    assert run.target.memory.hbm_label == "80 GB HBM3 per GPU, 3.35 TB/s"


def test_executing_a_deviceless_target_exits_2_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["matmul", "--path", "jax-tpu", "--target", "v6e:1x1", "--stages", "compile,execute"]
    assert run_command(argv) == EXIT_BAD_JOB
    err = capsys.readouterr().err
    assert "execute needs the hardware" in err
    assert "a worker with 1 real TPU v6e (Trillium) chip" in err


def boundary_run(*argv: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "run", *argv],
        cwd=ROOT,
        env={**os.environ, **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_compile_tpu_targets_at_the_same_time() -> None:
    argv = ("sharded-matmul", "sharding=data", "--path", "jax-tpu", "--target", "v6e:2x2")
    first, second = boundary_run(*argv, "--json"), boundary_run(*argv, "--json")
    outputs = [p.communicate(timeout=240) for p in (first, second)]
    for process, (out, err) in zip((first, second), outputs, strict=True):
        assert process.returncode == 0, err[-2000:]
        run = RunResult.model_validate(json.loads(out))
        assert run.target is not None and run.target.deviceless and run.target.count == 4


@pytest.mark.slow
def test_cuda_for_b200_with_nvrtc_gives_ptx_sass_and_resources(tmp_path: Path) -> None:
    if cuda_env.detect_tools().nvrtc_version is None:
        require("nvrtc", "NVRTC not importable (pip install -e . brings cuda-bindings)")
    process = boundary_run(
        "matmul",
        "--path",
        "cuda",
        "--target",
        "b200:1",
        "--json",
        extra_env={"BOUNDARY_CUDA_COMPILER": "nvrtc", "BOUNDARY_CUDA_CACHE_DIR": str(tmp_path)},
    )
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err[-2000:]
    run = RunResult.model_validate(json.loads(out))
    assert run.target is not None and run.target.compiler == "NVRTC" and run.target.arch == "sm_100"
    assert run.warnings[0].startswith("Compiled without the hardware")
    assert ".target sm_100" in (run.artifacts.ptx or "")
    assert "sm_100" in (run.artifacts.sass or "")
    assert run.kernel_resources and run.kernel_resources[0].registers
