"""Targets: what the compiler compiles for, a device model and how many of it.

A target can be compiled for on any machine ("deviceless": XLA builds the program for a
TPU slice's topology, or for a GPU model's target description, with no such device
present). Pydantic and the standard library only: the server validates targets too.

The ids are the slices and host sizes people actually rent: the TPU v6e slice shapes
Google sells (v6e-1 … v6e-256) and one HGX host of 1, 2, 4 or 8 NVIDIA GPUs. libtpu
accepts shapes no one sells (`v6e:32x32`); they are refused here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from workers.protocol.base import OpenModel, PathId, Platform


class TargetModel(StrEnum):
    """A device model a target names."""

    V6E = "v6e"
    B200 = "b200"
    H100 = "h100"
    H200 = "h200"


V6E_SHAPES: tuple[str, ...] = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
"""The v6e slices sold (v6e-1, -4, -8, -16, -32, -64, -128, -256), as chip grids."""

GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
"""GPUs of one HGX host."""


@dataclass(frozen=True)
class Chip:
    """Published facts about one device of a model, with the vendor's own labels."""

    model: TargetModel
    name: str
    platform: Platform
    paths: tuple[PathId, ...]
    hbm_bytes: int
    hbm_label: str
    source: str
    """The hardware-facts source id (app/content/sources.toml) the figure comes from."""
    cuda_arch: str | None = None
    """The SM architecture a `cuda` job compiles for."""
    kind_markers: tuple[str, ...] = ()
    """Substrings of JAX's device_kind that identify a real device of this model."""


CHIPS: dict[TargetModel, Chip] = {
    TargetModel.V6E: Chip(
        TargetModel.V6E,
        "TPU v6e (Trillium)",
        Platform.TPU,
        (PathId.JAX_TPU,),
        32 * 10**9,
        "32 GB HBM per chip",
        "tpu-v6e",
        kind_markers=("v6 lite", "v6e"),
    ),
    TargetModel.B200: Chip(
        TargetModel.B200,
        "NVIDIA B200",
        Platform.GPU,
        (PathId.JAX_GPU, PathId.CUDA),
        180 * 10**9,
        "180 GB HBM3E per GPU",
        "blackwell-datasheet",
        cuda_arch="sm_100",
        kind_markers=("B200",),
    ),
    TargetModel.H100: Chip(
        TargetModel.H100,
        "NVIDIA H100 SXM",
        Platform.GPU,
        (PathId.JAX_GPU, PathId.CUDA),
        80 * 10**9,
        "80 GB HBM3 per GPU, 3.35 TB/s",
        "h100-datasheet",
        cuda_arch="sm_90",
        kind_markers=("H100",),
    ),
    TargetModel.H200: Chip(
        TargetModel.H200,
        "NVIDIA H200",
        Platform.GPU,
        (PathId.JAX_GPU, PathId.CUDA),
        141 * 10**9,
        "141 GB HBM3e per GPU, 4.8 TB/s",
        "h200-datasheet",
        cuda_arch="sm_90",
        kind_markers=("H200",),
    ),
}


@dataclass(frozen=True)
class Target:
    """A parsed target id: `v6e:2x4` is 8 chips in a 2×4 grid, `b200:4` four GPUs."""

    id: str
    model: TargetModel
    count: int
    grid: tuple[int, ...] | None = None
    """TPU only: the slice's chip grid."""

    @property
    def chip(self) -> Chip:
        return CHIPS[self.model]

    @property
    def platform(self) -> Platform:
        return self.chip.platform

    def compiler_phrase(self) -> str:
        """The compiler that builds for this target, in a sentence."""
        return "libtpu (XLA:TPU)" if self.platform is Platform.TPU else "XLA:GPU"

    def hardware_phrase(self) -> str:
        """What would run it, e.g. 'a worker with 8 real TPU v6e (Trillium) chips'."""
        unit = "chip" if self.platform is Platform.TPU else "GPU"
        plural = "s" if self.count > 1 else ""
        return f"a worker with {self.count} real {self.chip.name} {unit}{plural}"


TARGET_IDS: tuple[str, ...] = (
    *(f"{TargetModel.V6E.value}:{shape}" for shape in V6E_SHAPES),
    *(f"{model.value}:{n}" for model in CHIPS if model is not TargetModel.V6E for n in GPU_COUNTS),
)
"""Every target id this build accepts."""


def own_target(device_kind: str, count: int) -> str | None:
    """The target id of `count` real devices of `device_kind` (e.g. "TPU v6 lite", 1 →
    v6e:1x1): what a compile for that chip without the device is compiled for; None for a
    device no target models, or a TPU count no sold slice has."""
    kind = device_kind.lower()
    model = next(
        (c.model for c in CHIPS.values() if any(m.lower() in kind for m in c.kind_markers)),
        None,
    )
    if model is None:
        return None
    if CHIPS[model].platform is not Platform.TPU:
        return f"{model.value}:{count}" if count in GPU_COUNTS else None
    shapes = [s for s in V6E_SHAPES if math.prod(int(n) for n in s.split("x")) == count]
    return f"{model.value}:{shapes[0]}" if shapes else None


class TargetError(ValueError):
    """A target id that names no target; the message lists the accepted ones."""


def parse_target(text: str) -> Target:
    """The target `text` names (case-insensitive), or TargetError saying what is accepted."""
    cleaned = text.strip().lower()
    model_text, sep, size = cleaned.partition(":")
    try:
        model = TargetModel(model_text)
    except ValueError:
        known = ", ".join(m.value for m in TargetModel)
        raise TargetError(
            f"{text[:40]!r} names no device model (known: {known}; e.g. v6e:2x4 or b200:1)"
        ) from None
    if not sep:
        raise TargetError(f"{text[:40]!r}: give a size after the model, e.g. {model.value}:1")
    if model is TargetModel.V6E:
        if size not in V6E_SHAPES:
            raise TargetError(
                f"{text[:40]!r} is not a v6e slice that is sold "
                f"(slices: {', '.join('v6e:' + s for s in V6E_SHAPES)})"
            )
        grid = tuple(int(part) for part in size.split("x"))
        return Target(f"v6e:{size}", model, math.prod(grid), grid)
    if not size.isdigit() or int(size) not in GPU_COUNTS:
        counts = ", ".join(map(str, GPU_COUNTS))
        raise TargetError(
            f"{text[:40]!r}: {model.value} takes a GPU count of one HGX host ({counts})"
        )
    return Target(f"{model.value}:{int(size)}", model, int(size))


class TargetMemory(OpenModel):
    """The per-device program's memory beside the chip's published HBM."""

    peak_bytes: int | None = Field(
        default=None, description="memory_analysis() of the per-device program: peak bytes."
    )
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = Field(
        default=None, description="memory_analysis(): the program's own code on the device."
    )
    hbm_bytes: int = Field(description="The chip's published HBM capacity (decimal bytes).")
    hbm_label: str = Field(description="The vendor's own label, e.g. '32 GB HBM per chip'.")
    source: str = Field(description="Where the HBM figure comes from (a hardware-facts source).")
    fraction: float | None = Field(
        default=None, description="peak_bytes / hbm_bytes: what share of the published HBM."
    )


class KernelSchedule(OpenModel):
    """What libtpu's final schedule of one TPU kernel holds (from its LLO dump)."""

    kernel: str = Field(description="The kernel's program in the dump: its HLO instruction.")
    bundles: int = Field(description="Total scheduled VLIW bundles.")
    non_empty_bundles: int
    mxu_ops: int = Field(description="Instructions on a matrix unit (`….mxuN`).")
    mxu_pushes: int = Field(description="Weight pushes into a matrix unit (`vmatpush…`).")
    vmem_bytes: int | None = Field(
        default=None, description="VMEM the kernel allocates, from its first LLO pass."
    )


class TargetReport(OpenModel):
    """What a run compiled for, with which compiler, and whether the hardware was there."""

    id: str
    model: str
    count: int
    compiler: str = Field(description="libtpu, the JAX CUDA plugin, nvcc or NVRTC.")
    compiler_version: str | None = None
    deviceless: bool = Field(description="Compiled without the hardware: nothing was executed.")
    arch: str | None = Field(default=None, description="GPU targets: the SM architecture.")
    memory: TargetMemory | None = None
    mesh: str | None = Field(default=None, description="Scale workloads: the mesh it built.")
    compile_timing: str | None = Field(
        default=None, description="What the reported compile time includes and excludes."
    )
    notes: list[str] = Field(default_factory=list)
    kernels: list[KernelSchedule] = Field(
        default_factory=list, description="TPU targets: each kernel's schedule summary."
    )
    dump: str | None = Field(
        default=None,
        description="How the bundles (TPU) or Mosaic GPU's PTX were dumped: a separate, "
        "untimed compile, and what it cost.",
    )
    refused: str | None = Field(
        default=None,
        description="The compiler's own refusal of a program too big for the chip (libtpu "
        "refuses what XLA:GPU compiles): the run then shows the misfit and has no optimized HLO.",
    )
