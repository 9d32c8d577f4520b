"""A run's kernel in words, for the pages and the comparison: what implemented its
operation (`kernel_phrase`) and the short label a comparison names the implementation by
(`implementation_label`). No jax; read from a run's `params` and `extra.kernel`."""

from __future__ import annotations

from typing import Any

from workers.catalog.kernels import (
    BLOCK_FIELDS,
    PALLAS,
    PALLAS_FIELDS,
    SHIPPED,
    GpuBackend,
    kernel_reading,
)
from workers.catalog.pallas_limits import Backend
from workers.protocol import PathId


def _blocks_of(params: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """The block sizes a Pallas run used: `extra.kernel`'s, else its params' as asked."""
    record = (extra or {}).get("kernel")
    if isinstance(record, dict) and isinstance(record.get("blocks"), dict):
        return dict(record["blocks"])
    return {k: params[k] for k in PALLAS_FIELDS[1:] if k in params}


COMPILERS = {
    Backend.MOSAIC_TPU: "Mosaic (TPU), lowered to the custom call tpu_custom_call",
    Backend.TRITON: "Triton, lowered to the custom call __gpu$xla.gpu.triton",
    Backend.MOSAIC_GPU: "Mosaic GPU, lowered to the custom call mosaic_gpu_v2",
    Backend.INTERPRET: "Pallas's interpreter on the CPU, running the Mosaic TPU kernel body",
}


def kernel_phrase(
    workload: str, path: str, params: dict[str, Any], extra: dict[str, Any] | None = None
) -> str | None:
    """What implemented a run's operation, in a sentence; None for XLA's own kernels."""
    if kernel_reading(path, params.get("kernel")) != PALLAS:
        return None
    backend = {PathId.JAX_CPU.value: Backend.INTERPRET, PathId.JAX_TPU.value: Backend.MOSAIC_TPU}
    chosen = backend.get(path) or (
        Backend.MOSAIC_GPU if params.get("pallas_backend") == "mosaic-gpu" else Backend.TRITON
    )
    if workload == "attention":
        whose = f"jax's shipped {SHIPPED[chosen]}"
    elif chosen is Backend.MOSAIC_GPU:
        whose = "jax's bundled Mosaic GPU matmul (hopper_matmul_mgpu or blackwell_matmul_mgpu)"
    else:
        module = "matmul" if workload.endswith("matmul") else "ops"
        whose = f"Boundary's own kernel (workers/pallas/{module}.py)"
    used = _blocks_of(params, extra)
    blocks = [f"{k}={used[k]}" for k in BLOCK_FIELDS.get(workload, ()) if k in used]
    sized = f", blocks {' '.join(blocks)}" if blocks else ""
    inside = " inside shard_map on each device's shards" if workload == "sharded-matmul" else ""
    return f"A Pallas kernel{inside}: {whose}, compiled by {COMPILERS[chosen]}{sized}."


def pallas_backend(path: str, params: dict[str, Any]) -> str | None:
    """Which Pallas backend compiles a JAX run's kernel ('triton', 'mosaic-gpu',
    'mosaic-tpu', 'interpret'); None when XLA's own kernels do the work."""
    if path == PathId.CUDA.value or kernel_reading(path, params.get("kernel")) != PALLAS:
        return None
    return {PathId.JAX_CPU.value: "interpret", PathId.JAX_TPU.value: "mosaic-tpu"}.get(
        path, str(params.get("pallas_backend") or GpuBackend.TRITON.value)
    )


def implementation_label(
    path: str, params: dict[str, Any], extra: dict[str, Any] | None = None
) -> str | None:
    """A run's `kernel` as a comparison names the implementation: 'XLA' or 'Pallas
    (triton), block_m=128 …' on a JAX path, 'kernel=tiled' on cuda; None without one."""
    value = params.get("kernel")
    if path == PathId.CUDA.value:
        return f"kernel={value}" if value is not None else None
    backend = pallas_backend(path, params)
    if backend is None:
        return "XLA"
    blocks = " ".join(f"{k}={v}" for k, v in _blocks_of(params, extra).items())
    return f"Pallas ({backend}){', ' + blocks if blocks else ''}"
