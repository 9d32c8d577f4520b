"""Helpers for the bench engine's tests: small jobs that run in milliseconds on a CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from workers.protocol import JobSpec

SMALL: dict[str, dict[str, Any]] = {
    "matmul": {"m": 48, "n": 40, "k": 32},
    "elementwise": {"n": 4096, "ops": 6},
    "reduction": {"rows": 64, "cols": 96},
    "gather": {"rows": 512, "width": 8, "count": 256},
    "attention": {"batch": 1, "heads": 2, "seq_len": 32, "head_dim": 16},
    "ffi": {"n": 4096, "scale": 1.5, "shift": -0.25},  # the C++ FFI handler, built on first use
    # The scale workloads on a mesh of one device (this test process has one CPU device;
    # tests/workers/test_scale_*.py run them on eight, in child processes).
    "sharded-matmul": {"m": 48, "n": 40, "k": 32, "devices": 1},
    "collective": {"bytes": 1024, "devices": 1},
}
"""Parameters small enough that a whole run is dominated by compiling."""


def make_job(workload: str, params: dict[str, Any] | None = None, **measure: Any) -> JobSpec:
    """A job for `workload` with SMALL parameters (overridden by `params`), 5 samples."""
    merged = {**SMALL[workload], **(params or {})}
    options = {"samples": 5, **measure}
    return JobSpec.model_validate({"workload": workload, "params": merged, "measure": options})


@pytest.fixture
def job() -> Callable[..., JobSpec]:
    return make_job
