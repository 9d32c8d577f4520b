"""Targets: what the compiler compiles for, a device model and how many of it.

A target can be compiled for on any machine ("deviceless": XLA builds the program for a
TPU slice's topology, or for a GPU model's target description, with no such device
present). Pydantic and the standard library only: the server validates targets too.

The ids are the slices and host sizes people actually rent: the TPU slices Google sells
of v4, v5e, v5p, v6e and TPU7x (2-D grids for v5e and v6e, `v5e:1x1` … `v5e:16x16`; 3-D
for the others, `v5p:2x2x1` …) and one HGX host of 1, 2, 4 or 8 NVIDIA GPUs. libtpu
accepts shapes no one sells (`v6e:32x32`); they are refused here. The chips' published
figures are in `workers.protocol.chips`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from workers.protocol.base import OpenModel, PathId, Platform
from workers.protocol.chips import CHIPS, GPU_USABLE_FRACTION, Chip, TargetModel, chip_of_kind

__all__ = [
    "CHIPS",
    "GPU_COUNTS",
    "GPU_USABLE_FRACTION",
    "GPU_USABLE_SOURCE",
    "SHAPES",
    "TARGET_IDS",
    "TPU_TARGET_IDS",
    "Chip",
    "KernelSchedule",
    "Target",
    "TargetError",
    "TargetMemory",
    "TargetModel",
    "TargetReport",
    "fit_limit",
    "gpu_usable_bytes",
    "gpu_usable_source",
    "merge_capacities",
    "one_device_target",
    "parse_target",
    "target_groups",
    "targets_in_words",
]

SHAPES: dict[TargetModel, tuple[str, ...]] = {
    TargetModel.V4: (
        "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12",
        "8x8x16", "8x16x16",
    ),
    TargetModel.V5E: ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
    TargetModel.V5P: (
        "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16",
        "8x16x16", "16x16x16", "16x16x24",
    ),
    TargetModel.V6E: ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
    TargetModel.TPU7X: (
        "1x1x1", "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8",
        "8x8x16", "8x16x16", "16x16x16",
    ),
}  # fmt: skip
"""The TPU slices sold, as chip grids (each chip's source says where the list comes
from). libtpu builds shapes nobody sells (`v6e:32x32`); those are refused."""

GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
"""GPUs of one HGX host."""

CHIPS_PER_HOST = 4
"""A TPU host's chips in libtpu's default host bounds; a smaller slice spells its own."""


@dataclass(frozen=True)
class Target:
    """A parsed target id: `v6e:2x4` is 8 chips in a 2×4 grid, `b200:4` four GPUs."""

    id: str
    model: TargetModel
    count: int
    """Devices, as the compiler lists them (two per chip on v4 and TPU7x)."""
    grid: tuple[int, ...] | None = None
    """TPU only: the slice's chip grid."""

    @property
    def chip(self) -> Chip:
        return CHIPS[self.model]

    @property
    def platform(self) -> Platform:
        return self.chip.platform

    @property
    def path(self) -> PathId:
        """The path this target names: jax-tpu for a TPU slice, jax-gpu for GPUs."""
        return self.chip.paths[0]

    @property
    def chips(self) -> int:
        """Chips (GPUs) in the target."""
        return self.count // self.chip.devices_per_chip

    def host_bounds(self) -> tuple[int, int, int] | None:
        """The chips-per-host bounds libtpu needs for a slice smaller than one host's
        chips (its default), else None."""
        if self.grid is None or self.chips >= CHIPS_PER_HOST:
            return None
        padded = (*self.grid, 1, 1)
        return (padded[0], padded[1], padded[2])

    def compiler_phrase(self) -> str:
        """The compiler that builds for this target, in a sentence."""
        return "libtpu (XLA:TPU)" if self.platform is Platform.TPU else "XLA:GPU"

    def hardware_phrase(self) -> str:
        """What would run it, e.g. 'a worker with 8 real TPU v6e (Trillium) chips'."""
        unit = "chip" if self.platform is Platform.TPU else "GPU"
        plural = "s" if self.chips > 1 else ""
        return f"a worker with {self.chips} real {self.chip.name} {unit}{plural}"


TARGET_IDS: tuple[str, ...] = (
    *(f"{model.value}:{shape}" for model in CHIPS if model in SHAPES for shape in SHAPES[model]),
    *(f"{chip.model.value}:{n}" for chip in CHIPS.values() if chip.platform is Platform.GPU
      for n in GPU_COUNTS),
)  # fmt: skip
"""Every target id this build accepts."""

TPU_TARGET_IDS: tuple[str, ...] = tuple(t for t in TARGET_IDS if t.split(":")[0] in SHAPES)
"""The TPU targets: those whose capacity libtpu states."""


def targets_in_words() -> str:
    """Every target in a line: each model's first and last size ("v6e:1x1 … v6e:16x16")."""
    return ", ".join(f"{ids[0]} … {ids[-1]}" for _, ids in target_groups())


def target_groups() -> list[tuple[str, tuple[str, ...]]]:
    """The target ids by device model, each under its chip's name, as forms list them."""
    return [
        (chip.name, tuple(t for t in TARGET_IDS if t.split(":")[0] == model.value))
        for model, chip in CHIPS.items()
    ]


def one_device_target(model: TargetModel) -> str | None:
    """The model's target with one device (`v5e:1x1`, `h100:1`), or None (v4, v5p and
    TPU7x sell no slice of one device)."""
    return next((t for t in TARGET_IDS if t.split(":")[0] == model.value and _count(t) == 1), None)


def _count(target_id: str) -> int:
    return parse_target(target_id).count


def own_target(device_kind: str, count: int) -> str | None:
    """The target id of `count` real devices of `device_kind` (e.g. "TPU v5 lite", 1 →
    v5e:1x1): what a compile for that chip without the device is compiled for; None for a
    device no target models, or a count no target of its model has."""
    chip = chip_of_kind(device_kind)
    if chip is None:
        return None
    found = [t for t in TARGET_IDS if t.split(":")[0] == chip.model.value and _count(t) == count]
    return found[0] if found else None


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
            f"{text[:40]!r} names no device model (known: {known}; e.g. v5e:1x1, v6e:2x4, "
            "v5p:2x2x1 or b200:1)"
        ) from None
    if not sep:
        first = SHAPES[model][0] if model in SHAPES else "1"
        raise TargetError(f"{text[:40]!r}: give a size after the model, e.g. {model.value}:{first}")
    shapes = SHAPES.get(model)
    if shapes is not None:
        if size not in shapes:
            raise TargetError(
                f"{text[:40]!r} is not a {model.value} slice that is sold "
                f"(slices: {', '.join(f'{model.value}:{s}' for s in shapes)})"
            )
        grid = tuple(int(part) for part in size.split("x"))
        count = math.prod(grid) * CHIPS[model].devices_per_chip
        return Target(f"{model.value}:{size}", model, count, grid)
    if not size.isdigit() or int(size) not in GPU_COUNTS:
        counts = ", ".join(map(str, GPU_COUNTS))
        raise TargetError(
            f"{text[:40]!r}: {model.value} takes a GPU count of one HGX host ({counts})"
        )
    return Target(f"{model.value}:{int(size)}", model, int(size))


class TargetMemory(OpenModel):
    """The per-device program's memory beside what the compiler makes available to it
    (`usable_bytes`) and the chip's published HBM (`hbm_bytes`)."""

    peak_bytes: int | None = Field(
        default=None, description="memory_analysis() of the per-device program: peak bytes."
    )
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = Field(
        default=None, description="memory_analysis(): the program's own code on the device."
    )
    usable_bytes: int | None = Field(
        default=None,
        description="What one device may hold: on a TPU what libtpu makes available to a "
        "program on this target (the largest peak + code it compiles, read from libtpu); "
        "on a GPU JAX's default share of the HBM (usable_fraction). None: not reported.",
    )
    usable_source: str | None = Field(
        default=None, description="Where usable_bytes comes from, in a sentence."
    )
    hbm_bytes: int = Field(
        description="The published HBM of one device, in bytes (the chip's figure, shared "
        "among its devices where libtpu lists each TensorCore as one)."
    )
    hbm_label: str = Field(description="The vendor's own label, e.g. '32 GiB HBM per chip'.")
    source: str = Field(description="Where the HBM figure comes from (a hardware-facts source).")
    fraction: float | None = Field(
        default=None,
        description="(peak_bytes + generated_code_bytes) / usable_bytes: the share of what "
        "the device may hold (of hbm_bytes where usable_bytes is not reported).",
    )


def gpu_usable_source(fraction: float) -> str:
    """Where a GPU's usable bytes come from, in a sentence: JAX's default share, or the
    share a job or fit search asked for instead."""
    if fraction == GPU_USABLE_FRACTION:
        return (
            f"{fraction:g} × the published HBM: JAX's GPU allocator preallocates that share "
            "of the device's memory by default (XLA_PYTHON_CLIENT_MEM_FRACTION)"
        )
    return (
        f"{fraction:g} × the published HBM: the share asked for (usable_fraction), where "
        f"JAX's GPU allocator preallocates {GPU_USABLE_FRACTION:g} by default"
    )


GPU_USABLE_SOURCE = gpu_usable_source(GPU_USABLE_FRACTION)


def gpu_usable_bytes(chip: Chip, fraction: float | None = None) -> int | None:
    """A GPU's usable bytes: `fraction` (JAX's default share) of its published HBM."""
    share = chip.usable_fraction if fraction is None else fraction
    return int(chip.device_hbm_bytes * share) if share is not None else None


def fit_limit(memory: Mapping[str, Any]) -> tuple[int, bool]:
    """What a device's needs are held against, from a TargetMemory's JSON: its usable
    bytes, or the published HBM where those are not reported (a run made before they
    were); and whether it is the usable figure."""
    usable = memory.get("usable_bytes")
    if isinstance(usable, int) and usable > 0:
        return usable, True
    return int(memory["hbm_bytes"]), False


def merge_capacities(readings: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Target id → usable bytes from several workers' readings (the first one named wins:
    give the newest first)."""
    merged: dict[str, int] = {}
    for reading in readings:
        for target_id, usable in reading.items():
            merged.setdefault(target_id, usable)
    return merged


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
