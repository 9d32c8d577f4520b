"""`kernel`, the implementation of a workload's operation, on each path. No jax here.

- On the JAX paths (`jax-cpu`, `jax-gpu`, `jax-tpu`) `kernel` is `xla` (XLA's own kernels,
  the default) or `pallas` (a Pallas kernel). Every other value, a stored run's `tiled`
  included, reads as `xla` (`kernel_reading`), so old and new runs compare.
- On `cuda` it is the hand-written variant (`naive|tiled`, `fused|unfused`, `naive|tree`).
- `pallas` goes through one compiler per path: Mosaic on `jax-tpu`, Triton or Mosaic GPU on
  `jax-gpu` (`pallas_backend=triton|mosaic-gpu`), Pallas's interpreter on `jax-cpu`
  (checked on the CPU, never a kernel's speed). Block sizes are parameters (0: the
  default, `workers.catalog.pallas_blocks`).

`choose_kernel` is the one rule: the server calls it to refuse a job (422), the engine to
build it (exit 2 when refused); `pallas_refusal` refuses Pallas parameters on a workload
that has no Pallas kernel, before its own fields are checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field

from workers.catalog.pallas_blocks import (
    AttentionBlocks,
    MatmulBlocks,
    check_attention_blocks,
    check_elementwise_block,
    check_matmul_blocks,
    default_attention_blocks,
    default_matmul_blocks,
    default_rows,
)
from workers.catalog.pallas_limits import GPUS, H100, Backend, Gpu
from workers.protocol import Lax, PathId, Target

XLA = "xla"
PALLAS = "pallas"
JAX_PATHS = (PathId.JAX_CPU, PathId.JAX_GPU, PathId.JAX_TPU)
PALLAS_WORKLOADS = ("matmul", "elementwise", "attention", "sharded-matmul")
"""The workloads that take kernel=pallas."""
BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "matmul": ("block_m", "block_n", "block_k"),
    "sharded-matmul": ("block_m", "block_n", "block_k"),
    "elementwise": ("block_rows",),
    "attention": ("block_q", "block_k"),
}
PALLAS_FIELDS = ("pallas_backend", "block_m", "block_n", "block_k", "block_rows", "block_q")
"""Parameters that only a Pallas kernel reads."""
BLOCKS = PALLAS_FIELDS[1:]
SHIPPED = {
    Backend.MOSAIC_TPU: "jax.experimental.pallas.ops.tpu.flash_attention",
    Backend.INTERPRET: "jax.experimental.pallas.ops.tpu.flash_attention (interpreted)",
    Backend.TRITON: "jax.experimental.pallas.ops.gpu.attention.mha",
    Backend.MOSAIC_GPU: "jax.experimental.pallas.ops.gpu.attention_mgpu",
}
"""The attention kernels jax ships, which the attention workload uses (not our own)."""
INTERPRET_WARNING = "Pallas interpret mode: checked on the CPU, no kernel speed"


class GpuBackend(StrEnum):
    """Which compiler takes a Pallas kernel on jax-gpu."""

    TRITON = "triton"
    MOSAIC_GPU = "mosaic-gpu"


def backend_field() -> Any:
    return Field(
        default=GpuBackend.TRITON,
        description="kernel=pallas on jax-gpu: triton (default) or mosaic-gpu.",
    )


def block_field(what: str) -> Any:
    return Field(
        default=0,
        ge=0,
        le=16384,
        description=f"kernel=pallas: {what}; 0 picks the default for the compiler.",
    )


class MatmulBlockFields(BaseModel):
    """The Pallas matmul's settings, shared by `matmul` and `sharded-matmul` (whose blocks
    tile each device's shards)."""

    pallas_backend: Annotated[GpuBackend, Lax] = backend_field()
    block_m: int = block_field("rows of C per block (of each device's C when sharded)")
    block_n: int = block_field("columns of C per block (of each device's C when sharded)")
    block_k: int = block_field("the step along k (along each device's k when sharded)")


def kernel_reading(path: str, value: Any) -> str:
    """What a run's `kernel` means on `path`: on a JAX path `pallas` or `xla` (any other
    value, stored runs' CUDA defaults included); on cuda the value itself."""
    text = str(getattr(value, "value", value)) if value is not None else ""
    if path == PathId.CUDA.value:
        return text
    return PALLAS if text == PALLAS else XLA


def pallas_refusal(workload: str, params: dict[str, Any]) -> tuple[str, str] | None:
    """(field, message) when `params` ask a workload without a Pallas kernel for one."""
    if workload in PALLAS_WORKLOADS:
        return None
    asked = [k for k in PALLAS_FIELDS if k in params]
    if params.get("kernel") == PALLAS:
        asked.insert(0, "kernel")
    if not asked:
        return None
    name = asked[0]
    said = "kernel=pallas" if name == "kernel" else name
    return (
        f"params.{name}",
        f"{said}: {workload} has no Pallas kernel; kernel=pallas is taken by "
        f"{', '.join(PALLAS_WORKLOADS)} on {', '.join(p.value for p in JAX_PATHS)}",
    )


@dataclass(frozen=True)
class KernelChoice:
    """The implementation a job runs: `xla`, `pallas` or a CUDA variant, and for Pallas the
    compiler, the GPU it is built for and every block size resolved."""

    kernel: str
    backend: Backend | None = None
    gpu: Gpu | None = None
    blocks: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def pallas(self) -> bool:
        return self.kernel == PALLAS

    @property
    def interpret(self) -> bool:
        return self.backend is Backend.INTERPRET

    def block(self, name: str) -> int:
        return dict(self.blocks)[name]

    def label(self) -> str:
        """e.g. 'Pallas (mosaic-tpu), block_m=512 block_n=512 block_k=512', or 'XLA'."""
        if not self.pallas:
            return "XLA" if self.kernel == XLA else self.kernel
        sizes = " ".join(f"{k}={v}" for k, v in self.blocks)
        return f"Pallas ({self.backend.value if self.backend else '?'}), {sizes}".strip(", ")


class KernelRefused(ValueError):
    """`choose_kernel` refused: `field` names the parameter at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _backend(path: PathId, params: Any) -> Backend:
    if path is PathId.JAX_CPU:
        return Backend.INTERPRET
    if path is PathId.JAX_TPU:
        return Backend.MOSAIC_TPU
    chosen = getattr(params, "pallas_backend", GpuBackend.TRITON)
    return Backend.MOSAIC_GPU if chosen is GpuBackend.MOSAIC_GPU else Backend.TRITON


def gpu_of(target: Target | None) -> Gpu | None:
    """The GPU model a target names (None for a TPU target or none)."""
    return GPUS.get(target.model.value) if target is not None else None


def choose_kernel(
    workload: str, path: PathId, target: Target | None, params: Any, gpu: Gpu | None = None
) -> KernelChoice:
    """The implementation `params` ask for on `path`, or KernelRefused saying why not.

    `gpu` is the GPU a jax-gpu job runs on when it has no target (a worker knows it; the
    server checks against H100's figures, which H200 and B200 share)."""
    given: set[str] = set(getattr(params, "model_fields_set", ()))
    value = getattr(params, "kernel", None)
    raw = str(getattr(value, "value", value)) if value is not None else XLA
    if path is PathId.CUDA:
        if raw in (XLA, PALLAS):
            variants: Any = type(value)  # the workload's own kernel enum
            own = [v.value for v in variants if v.value not in (XLA, PALLAS)]
            raise KernelRefused(
                f"kernel={raw} names a JAX implementation; the cuda path runs hand-written "
                f"CUDA kernels: {' or '.join(own)}",
                "params.kernel",
            )
        asked = {n for n in given if n == "pallas_backend" or bool(getattr(params, n, 0))}
        _refuse_pallas_fields(asked, "the cuda path")
        return KernelChoice(raw)
    if "pallas_backend" in given and path is not PathId.JAX_GPU:
        raise KernelRefused(
            f"pallas_backend chooses between Triton and Mosaic GPU and applies only on jax-gpu, "
            f"not {path.value} (jax-tpu compiles Pallas with Mosaic, jax-cpu interprets it)",
            "params.pallas_backend",
        )
    if raw != PALLAS:  # a block size of 0 (the default, as forms send it) asks for nothing
        _refuse_pallas_fields({n for n in given if n in BLOCKS and bool(getattr(params, n, 0))}, "")
        return KernelChoice(XLA)
    backend = _backend(path, params)
    gpu = gpu_of(target) or gpu or (H100 if path is PathId.JAX_GPU else None)
    blocks, refusals = _blocks(workload, params, backend, gpu or H100)
    if refusals:
        raise KernelRefused("; ".join(refusals), _blamed(workload, given))
    return KernelChoice(PALLAS, backend, gpu, blocks)


def _refuse_pallas_fields(given: set[str], where: str) -> None:
    for name in PALLAS_FIELDS:
        if name in given:
            place = f" on {where}" if where else ""
            raise KernelRefused(
                f"{name} applies only to kernel=pallas{place} (kernel=pallas is taken by "
                f"{', '.join(PALLAS_WORKLOADS)} on {', '.join(p.value for p in JAX_PATHS)})",
                f"params.{name}",
            )


def _blamed(workload: str, given: set[str]) -> str:
    named = [f for f in BLOCK_FIELDS.get(workload, ()) if f in given]
    return f"params.{named[0]}" if named else "params.kernel"


def _given(params: Any, name: str, default: int) -> int:
    value = int(getattr(params, name, 0) or 0)
    return value or default


def _blocks(
    workload: str, p: Any, backend: Backend, gpu: Gpu
) -> tuple[tuple[tuple[str, int], ...], list[str]]:
    dtype = p.dtype.value
    if workload == "elementwise":
        rows = _given(p, "block_rows", default_rows(p.n, backend))
        return (("block_rows", rows),), check_elementwise_block(
            p.n, dtype=dtype, rows=rows, backend=backend
        )
    if workload == "attention":
        da = default_attention_blocks(p.seq_len, backend)
        a = AttentionBlocks(_given(p, "block_q", da.block_q), _given(p, "block_k", da.block_k))
        said = check_attention_blocks(
            p.seq_len, p.head_dim, dtype=dtype, blocks=a, backend=backend, gpu=gpu
        )
        return (("block_q", a.block_q), ("block_k", a.block_k)), said
    m, n, k = p.m, p.n, p.k
    if workload == "sharded-matmul":
        local, why = local_matmul_shape(p.specs(), p.axis_sizes(), (m, n, k))
        if why is not None:
            return (), [why]
        m, n, k = local
    d = default_matmul_blocks(m, n, k, backend, gpu=gpu, dtype=dtype)
    b = MatmulBlocks(
        _given(p, "block_m", d.bm), _given(p, "block_n", d.bn), _given(p, "block_k", d.bk)
    )
    found = check_matmul_blocks(m, n, k, dtype=dtype, blocks=b, backend=backend, gpu=gpu)
    return (("block_m", b.bm), ("block_n", b.bn), ("block_k", b.bk)), found


Spec = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class MatmulLayout:
    """How the Pallas sharded matmul lays its work out, from the three partition specs: the
    mesh axes of A's rows, k and B's columns, and the collectives it writes out (inside
    shard_map XLA adds none)."""

    m_axes: tuple[str, ...]
    k_axes: tuple[str, ...]
    n_axes: tuple[str, ...]
    gather_b: bool
    """B's columns are sharded over A's row axes: all-gather B first."""
    scatter: bool
    """C's rows are wanted sharded over exactly k's axes: reduce-scatter the partial sums."""
    out_m: tuple[str, ...]
    out_n: tuple[str, ...]


def matmul_layout(specs: tuple[Spec, Spec, Spec]) -> tuple[MatmulLayout | None, str | None]:
    """The layout of the Pallas sharded matmul for (A, B, C) specs, or why it has none."""
    a, b, out = specs
    m_axes, k_axes, n_axes = a[0], a[1], b[1]
    want_m, want_n = out[0], out[1]
    if b[0] != k_axes:
        return None, (
            "the Pallas sharded matmul needs k sharded the same way in A and B (A's k over "
            f"{k_axes or 'no axis'}, B's k over {b[0] or 'no axis'})"
        )
    gather_b = bool(set(m_axes) & set(n_axes))
    local_n = () if gather_b else n_axes
    scatter = bool(k_axes) and want_m == k_axes and not m_axes
    out_m = k_axes if scatter else m_axes if want_m == m_axes else ()
    out_n = local_n if want_n == local_n else ()
    if (want_m and want_m != out_m) or (want_n and want_n != out_n):
        return None, (
            "the Pallas sharded matmul keeps C's rows sharded like A's (or scattered over k's "
            "axes) and its columns like B's, or gathers them; it cannot give C the layout "
            "asked for here"
        )
    return MatmulLayout(m_axes, k_axes, local_n, gather_b, scatter, out_m, out_n), None


def local_matmul_shape(
    specs: tuple[Spec, Spec, Spec], sizes: dict[str, int], shape: tuple[int, int, int]
) -> tuple[tuple[int, int, int], str | None]:
    """The (m, n, k) each device's kernel sees, or the reason the layout has no kernel."""
    layout, why = matmul_layout(specs)
    if layout is None:
        return shape, why
    m, n, k = shape

    def shards(axes: tuple[str, ...]) -> int:
        return math.prod(sizes[x] for x in axes)

    return (
        m // shards(layout.m_axes),
        n // shards(layout.n_axes),
        k // shards(layout.k_axes),
    ), None


def public_params(params: Any, path: str) -> dict[str, Any]:
    """The parameters a run reports, after validation and defaults: `kernel` as it reads
    on the path, and no Pallas setting a run does not read (a Pallas run keeps its block
    sizes as asked, 0 for the default; `pallas_backend` on jax-gpu only). The same on the
    worker and on the server, whose lease check compares them; the block sizes a kernel
    used are the run's `extra.kernel` (`kernel_record`)."""
    dumped: dict[str, Any] = params.model_dump(mode="json")
    # The problem's own parameters first, then a Pallas kernel's (a mixin declares those).
    out = {k: v for k, v in dumped.items() if k not in PALLAS_FIELDS}
    if "kernel" in out:
        out["kernel"] = kernel_reading(path, out["kernel"])
    if out.get("kernel") != PALLAS:
        return out
    keep = set(BLOCK_FIELDS.get(params.workload, ()))
    if path == PathId.JAX_GPU.value:
        keep.add("pallas_backend")
    out.update({k: v for k, v in dumped.items() if k in keep})
    return out


def kernel_record(choice: KernelChoice) -> dict[str, Any]:
    """What a Pallas run reports of its kernel in `extra.kernel`: the compiler, the GPU it
    was built for, and every block size as used (defaults resolved)."""
    return {
        "kernel": choice.kernel,
        "compiler": choice.backend.value if choice.backend else None,
        "gpu": choice.gpu.name if choice.gpu else None,
        "blocks": dict(choice.blocks),
    }
