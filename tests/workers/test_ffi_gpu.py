"""The FFI boundary on an NVIDIA GPU: the CUDA handler, built here against this jaxlib
with nvcc, launched on the stream XLA provides (marked `gpu`; skipped with the reason
where JAX sees no GPU or nvcc is missing)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.dependencies import require
from workers.compiler.environment import devices_by_platform
from workers.cuda import ffi
from workers.cuda.env import find_tool
from workers.protocol import JobSpec
from workers.run.engine import run_job

GPUS = devices_by_platform().get("gpu", [])
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU visible to JAX in this process"),
]


@pytest.fixture(autouse=True)
def nvcc() -> None:
    """On a GPU, the CUDA handler is built with nvcc: its absence fails the test."""
    if find_tool("nvcc") is None:
        require("nvcc", "nvcc not found: the CUDA FFI handler is built with it")


def test_the_cuda_handler_runs_in_the_xla_program() -> None:
    ffi.ensure_registered("cuda")
    f = jax.jit(ffi.make_scale_shift(-2.0, 0.75))
    x = jax.device_put(np.linspace(-3, 3, 100_003, dtype=np.float32), GPUS[0])
    hlo = f.lower(x).compile().as_text()
    assert f'custom_call_target="{ffi.TARGET}"' in hlo
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(x) * -2.0 + 0.75, rtol=1e-6)
    batched = jax.vmap(f)(x.reshape(1, -1))
    np.testing.assert_allclose(np.asarray(batched)[0], np.asarray(x) * -2.0 + 0.75, rtol=1e-6)


def test_the_ffi_workload_on_jax_gpu() -> None:
    job = JobSpec.model_validate(
        {"workload": "ffi", "path": "jax-gpu", "params": {"n": 1 << 20}, "measure": {"samples": 5}}
    )
    run = run_job(job)
    assert run.valid and run.environment.platform == "gpu"
    assert run.hlo_summary is not None
    assert ffi.TARGET in [c.target for c in run.hlo_summary.custom_calls]
