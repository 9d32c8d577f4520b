"""A target whose hardware is present runs on it (marked `gpu`; skipped with the reason
elsewhere). Run by `make gpu-check` on the GPU test machine, an H200: target `h200:1`
executes for real, while `b200:1` is refused, naming what would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.compiler.environment import devices_by_platform
from workers.protocol import JobSpec
from workers.run.engine import PathUnavailable, run_job

GPUS = devices_by_platform().get("gpu", [])
KIND = str(GPUS[0].device_kind) if GPUS else ""
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU visible to JAX in this process"),
    pytest.mark.skipif(
        bool(GPUS) and "H200" not in KIND, reason=f"written for an H200; this GPU is {KIND}"
    ),
]


def job(target: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "workload": "matmul",
            "path": "jax-gpu",
            "target": target,
            "stages": ["compile", "execute"],
            "params": {"m": 256, "n": 256, "k": 256},
            "measure": {"samples": 5},
        }
    )


def test_a_target_whose_gpu_is_here_runs_on_it(tmp_path: Path) -> None:
    run = run_job(job("h200:1"), cache_dir=tmp_path)
    assert run.target is not None and run.target.deviceless is False
    assert run.environment.platform == "gpu" and "H200" in run.environment.device_kind
    assert run.valid and run.measurements and run.measurements[0].stats is not None


def test_executing_a_target_of_another_model_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(PathUnavailable, match="a worker with 1 real NVIDIA B200 GPU"):
        run_job(job("b200:1"), cache_dir=tmp_path)
