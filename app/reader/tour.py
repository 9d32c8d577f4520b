"""The first tour: one program compiled for a TPU v6e:2x4 slice, then for 8 H100s beside
it, and the memory each device needs. The landing page offers it as two buttons (plain
forms: they queue through the one admission and work without JavaScript); the README
walks the same three steps on the command line.
"""

from __future__ import annotations

from typing import Any

from workers.protocol import StageId

PROGRAM: dict[str, Any] = {
    "workload": "sharded-matmul",
    "params": {"m": 8192, "n": 8192, "k": 8192, "dtype": "bfloat16", "sharding": "tensor"},
    "stages": [StageId.COMPILE.value],
}
"""An 8192³ bfloat16 matmul with its contracted dimension split over 8 devices."""

TPU_JOB: dict[str, Any] = {**PROGRAM, "path": "jax-tpu", "target": "v6e:2x4"}
GPU_JOB: dict[str, Any] = {**PROGRAM, "path": "jax-gpu", "target": "h100:8"}
TOUR_JOBS: tuple[dict[str, Any], dict[str, Any]] = (TPU_JOB, GPU_JOB)
"""Side A and side B of the tour's comparison."""


def run_form_fields(job: dict[str, Any]) -> list[tuple[str, str]]:
    """`job` as the hidden fields of a form posting to /runs (named as the run form names
    its fields)."""
    fields = [("workload", job["workload"]), ("path", job["path"]), ("target", job["target"])]
    fields += [("stages", stage) for stage in job["stages"]]
    fields += [(f"param.{k}", str(v)) for k, v in job["params"].items()]
    return fields


def command(job: dict[str, Any]) -> str:
    """`job` as a `boundary run` line."""
    params = " ".join(f"{k}={v}" for k, v in job["params"].items())
    return f"boundary run {job['workload']} {params} --path {job['path']} --target {job['target']}"
