"""kernel=pallas executed and timed on a real GPU, like kernel=xla (marked `gpu`; skipped
with the reason where no GPU is visible, as on the project's build machine). Run by
`make gpu-check`: each Pallas kernel compiles for the GPU that is there, runs, passes the
float64 check and is timed at the host-sync boundary, with its kernel's registers read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.compiler.environment import devices_by_platform
from workers.protocol import JobSpec, RunResult
from workers.run.engine import run_job

GPUS = devices_by_platform().get("gpu", [])
CAPABILITY = str(getattr(GPUS[0], "compute_capability", "")) if GPUS else ""
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU visible to JAX in this process"),
]
needs_hopper = pytest.mark.skipif(
    bool(GPUS) and not CAPABILITY.startswith(("9.", "10.")),
    reason=f"Mosaic GPU needs Hopper or newer; this GPU is compute capability {CAPABILITY}",
)


def executed(workload: str, params: dict[str, Any], tmp: Path) -> RunResult:
    job = JobSpec.model_validate(
        {
            "workload": workload,
            "path": "jax-gpu",
            "params": {**params, "kernel": "pallas"},
            "stages": ["compile", "execute"],
            "measure": {"samples": 10},
        }
    )
    return run_job(job, cache_dir=tmp)


def timed(run: RunResult) -> None:
    assert run.valid and run.correctness is not None and run.correctness.passed
    assert run.target is None and run.environment.platform == "gpu"
    [m] = run.measurements
    assert m.boundary.value == "host-sync" and m.stats is not None and len(m.samples_s) == 10
    assert run.rates is not None and run.rates.flops_per_s
    assert not any("interpret" in w for w in run.warnings)


@pytest.mark.parametrize(
    ("workload", "params"),
    [
        ("matmul", {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}),
        ("matmul", {"m": 512, "n": 512, "k": 512, "dtype": "float32"}),
        ("elementwise", {"n": 1 << 20, "ops": 8}),
        (
            "attention",
            {"batch": 1, "heads": 2, "seq_len": 512, "head_dim": 64, "dtype": "bfloat16"},
        ),
    ],
)
def test_a_triton_kernel_runs_and_is_timed_like_xla(
    workload: str, params: dict[str, Any], tmp_path: Path
) -> None:
    run = executed(workload, params, tmp_path)
    timed(run)
    assert run.params["pallas_backend"] == "triton"
    assert "__gpu$xla.gpu.triton" in (run.artifacts.hlo or "")
    assert run.artifacts.triton


@needs_hopper
def test_a_mosaic_gpu_matmul_runs_on_the_gpu_it_was_built_for(tmp_path: Path) -> None:
    params = {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16", "pallas_backend": "mosaic-gpu"}
    run = executed("matmul", params, tmp_path)
    timed(run)
    assert "mosaic_gpu_v2" in (run.artifacts.hlo or "")
    assert run.artifacts.mosaic_gpu


def compared(run: RunResult, name: str) -> Any:
    """A finished run as the comparison pages read it (the job JSON's fields they use)."""
    from app.pages.compare.facts import run_facts

    job = run.job
    return run_facts(
        {
            "id": name,
            "status": "done",
            "workload": job.workload,
            "path": job.path.value,
            "stages": [s.value for s in job.stages],
            "run": run.model_dump(mode="json"),
        }
    )


def test_xla_against_pallas_is_one_experiment_naming_the_kernel_and_its_blocks(
    tmp_path: Path,
) -> None:
    """Two executed runs on one GPU, the kernel the only change: a ratio may be printed, and
    the implementation a decision record states for the Pallas side is its compiler and
    every block size it used."""
    from app.pages.compare.guard import guard

    params = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}
    pallas = executed("matmul", params, tmp_path)
    xla = run_job(
        JobSpec.model_validate(
            {
                "workload": "matmul",
                "path": "jax-gpu",
                "params": {**params, "kernel": "xla"},
                "stages": ["compile", "execute"],
                "measure": {"samples": 10},
            }
        ),
        cache_dir=tmp_path,
    )
    timed(pallas)
    verdict = guard([compared(xla, "a")], [compared(pallas, "b")])
    assert verdict.comparable, (verdict.problems, verdict.mismatches)
    [(variable, side_a, side_b)] = verdict.experimental
    blocks = pallas.extra["kernel"]["blocks"]
    assert variable == "implementation" and side_a.startswith("XLA")
    assert side_b.startswith("Pallas (triton), ")
    for name in ("block_m", "block_n", "block_k"):
        assert f"{name}={blocks[name]}" in side_b
