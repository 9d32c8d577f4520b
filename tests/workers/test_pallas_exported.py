"""A user's own Pallas kernel, exported with `jax.export` and uploaded as an exported
program, takes the same targets as the catalog's kernels: on v6e its Mosaic IR and VLIW
bundles, on H100 its Triton kernel, PTX with wgmma and SASS, each kernel's IR still naming
the user's own lines. Compiled without the hardware, by the worker's own code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from workers.files import FileCache
from workers.protocol import JobSpec, RunResult
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

N = 256
BLOCK = 128


def _kernel(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
    product = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)
    o_ref[...] = product.astype(o_ref.dtype)


def users_matmul(x: jax.Array, y: jax.Array, params: Any = None) -> jax.Array:
    """A user's tiled Pallas matmul: rows of x against columns of y, one block of C each."""
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((N, N), jnp.bfloat16),
        grid=(N // BLOCK, N // BLOCK),
        in_specs=[
            pl.BlockSpec((BLOCK, N), lambda i, j: (i, 0)),
            pl.BlockSpec((N, BLOCK), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((BLOCK, BLOCK), lambda i, j: (i, j)),
        compiler_params=params,
    )
    result: jax.Array = call(x, y)
    return result


def exported(platform: str) -> bytes:
    """The kernel exported as a user would for one platform. Triton's custom call is not in
    jax's list of stable targets, so a GPU export says it accepts it."""
    arg = jax.ShapeDtypeStruct((N, N), jnp.bfloat16)
    if platform == "tpu":
        exp = jax.export.export(jax.jit(users_matmul), platforms=["tpu"])(arg, arg)
    else:
        triton = pltriton.CompilerParams(num_warps=4, num_stages=2)
        exp = jax.export.export(
            jax.jit(lambda x, y: users_matmul(x, y, triton)),
            platforms=["cuda"],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
        )(arg, arg)
    return bytes(exp.serialize())


def compiled_for(target: str, path: str, platform: str, tmp_path: Path) -> RunResult:
    files = FileCache(tmp_path / "files")
    digest = files.put(exported(platform))
    job = {
        "workload": "exported",
        "path": path,
        "target": target,
        "stages": ["compile"],
        "params": {"artifact": digest},
    }
    return run_job(JobSpec.model_validate(job), files_dir=files.directory)


def test_an_exported_pallas_kernel_compiles_down_to_v6e_bundles(tmp_path: Path) -> None:
    run = compiled_for("v6e:1x1", "jax-tpu", "tpu", tmp_path)
    assert run.target is not None and run.target.deviceless
    assert 'custom_call_target="tpu_custom_call"' in (run.artifacts.hlo or "")
    mosaic = run.artifacts.mosaic or ""
    assert "tpu.matmul" in mosaic
    assert Path(__file__).name in mosaic  # the kernel body's own lines, through the export
    assert "vmatpush" in (run.artifacts.bundles or "")
    [schedule] = run.target.kernels
    assert schedule.bundles > 0 and schedule.mxu_pushes > 0
    assert schedule.vmem_bytes is not None and schedule.vmem_bytes > 0


def test_an_exported_triton_kernel_compiles_down_to_h100_sass(tmp_path: Path) -> None:
    run = compiled_for("h100:1", "jax-gpu", "cuda", tmp_path)
    assert run.target is not None and run.target.deviceless
    assert "__gpu$xla.gpu.triton" in (run.artifacts.hlo or "")
    triton = run.artifacts.triton or ""
    assert "tt.dot" in triton and Path(__file__).name in triton
    ptx = run.artifacts.ptx or ""
    assert ".target sm_90a" in ptx and "wgmma" in ptx
    assert "HGMMA" in (run.artifacts.sass or "")
    assert run.kernel_resources and all(k.registers for k in run.kernel_resources)
