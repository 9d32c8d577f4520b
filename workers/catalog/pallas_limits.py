"""What a Pallas kernel's blocks must fit: the compilers, the GPUs, the on-chip memory
limits with their sources, and the helpers every block rule shares. No jax.

Every limit names where it comes from, and each was checked on this project's machine by
compiling deviceless: the compilers' own refusals quote the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

CANDIDATES = (512, 256, 128)
"""Block sizes tried by default on TPU and in interpret mode, largest first."""
GPU_CANDIDATES = (128, 64, 32)
"""Block sizes tried by default on the GPU: a tile lives in registers and shared memory
there, and 512-row Triton tiles took minutes to compile and spilled (see `TRITON_ROWS`)."""

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


class Backend(StrEnum):
    """Which compiler a Pallas kernel goes through."""

    MOSAIC_TPU = "mosaic-tpu"
    TRITON = "triton"
    MOSAIC_GPU = "mosaic-gpu"
    INTERPRET = "interpret"


TPU_LIKE = (Backend.MOSAIC_TPU, Backend.INTERPRET)
"""Backends that run the Mosaic TPU kernel body (interpret mode runs the same body)."""


@dataclass(frozen=True)
class Gpu:
    """A GPU model as the kernels need it: its name and compute capability."""

    name: str
    sm: int


H100 = Gpu("NVIDIA H100", 90)
GPUS = {"h100": H100, "h200": Gpu("NVIDIA H200", 90), "b200": Gpu("NVIDIA B200", 100)}


@dataclass(frozen=True)
class MemoryLimit:
    """The on-chip memory one kernel instance may use, and where the figure comes from."""

    chip: str
    memory: str
    bytes: int
    source: str

    def phrase(self) -> str:
        return f"{self.chip} {self.memory} ({size(self.bytes)}, {self.source})"


TPU_VMEM = MemoryLimit(
    "TPU v6e",
    "scoped VMEM limit",
    32 * 1024 * 1024,
    "libtpu's default for a Mosaic kernel, of the core's 128 MiB; more is refused at "
    "compile time: 'CompileTimeScopedVmemOom … limit 32.00M'",
)
GPU_SHARED = 232448
"""Shared memory one block may opt into on H100, H200 and B200 (227 KiB): the
`shared_memory_per_block_optin` of XLA's target descriptions (workers/xla_targets/gpu/),
the figure XLA and Mosaic GPU refuse kernels by ('available: 232448')."""
REGISTERS = 255
"""Registers one thread can address on sm_90 and sm_100; past them ptxas spills."""


def shared_limit(gpu: Gpu) -> MemoryLimit:
    return MemoryLimit(
        gpu.name,
        "shared memory per block",
        GPU_SHARED,
        "shared_memory_per_block_optin of XLA's target description",
    )


def size(n: int) -> str:
    """Bytes in the largest unit that keeps the figure above 1 (MiB, KiB)."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def default_block(dim: int, candidates: tuple[int, ...] = CANDIDATES) -> int:
    """The largest candidate that divides `dim`; `dim` itself when none does (a block as
    large as its array is always allowed)."""
    return next((c for c in candidates if dim % c == 0), dim)


def divides(
    name: str, block: int, dim_name: str, dim: int, candidates: tuple[int, ...] = CANDIDATES
) -> list[str]:
    if block <= 0 or dim % block:
        return [
            f"{name}={block} does not divide {dim_name}={dim}: a block must tile its "
            f"dimension exactly (e.g. {name}={default_block(dim, candidates)})"
        ]
    return []


def power_of_two(name: str, block: int, backend: Backend) -> list[str]:
    if block & (block - 1):
        return [f"{name}={block} is not a power of two, as {backend.value} tiles are"]
    return []


TPU_FLOAT16 = (
    "float16 has no Mosaic kernel on TPU v6e (Mosaic refuses it: 'Invalid vector type for "
    "load'); use bfloat16 or float32"
)
