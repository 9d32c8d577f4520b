"""The device models a target can name, and what their vendors publish about each.

Every figure here is the vendor's, with the source it comes from (an id of
app/content/sources.toml) and the vendor's own label beside it. What a compiler makes
of a chip, such as the HBM libtpu lets a program use, is read from the compiler, never
kept here (`workers.xla_targets.capacity`). Pydantic and the standard library only.

TPU HBM: Google prints its TPU capacities as "GB" on the older pages and "GiB" on the
TPU7x page, which lists v5p as 95 GiB and v6e as 32 GiB. The chips hold binary
multiples (libtpu lets a program on a "16 GB" v5e use 15.75 GiB, more than 16 × 10^9
bytes), so `hbm_bytes` reads each TPU figure in GiB and its label says what Google
printed.

The TensorCore clocks follow from Google's own figures: the bf16 peak per chip divided
by the MACs its matrix units do per cycle (TensorCores × MXUs × 128 × 128, two FLOPs a
MAC; Google's architecture page gives 128 × 128 MXUs before v6e). Where Google's figures
do not settle it, no clock is stated.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from workers.protocol.base import PathId, Platform

GIB = 2**30


class TargetModel(StrEnum):
    """A device model a target names."""

    V4 = "v4"
    V5E = "v5e"
    V5P = "v5p"
    V6E = "v6e"
    TPU7X = "tpu7x"
    B200 = "b200"
    H100 = "h100"
    H200 = "h200"


@dataclass(frozen=True)
class PeakRate:
    """A vendor's peak rate for one dtype, per chip: a ceiling, never a measurement."""

    dtype: str
    per_s: float
    """Operations per second (FLOP/s, or OP/s for integers)."""
    label: str
    """As the vendor prints it, e.g. '197 TFLOPs (bf16)'."""
    source: str


@dataclass(frozen=True)
class Clock:
    """The clock that turns a compiler's estimated cycles into time, and how it is known."""

    hz: float
    how: str
    """How it follows from the published figures."""
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Chip:
    """Published facts about one device model, with the vendor's own labels."""

    model: TargetModel
    name: str
    platform: Platform
    paths: tuple[PathId, ...]
    """The paths a target of this model goes with; the first is the one it names."""
    hbm_bytes: int
    """The vendor's HBM per chip, in bytes."""
    hbm_label: str
    source: str
    """The hardware-facts source id (app/content/sources.toml) the figure comes from."""
    cuda_arch: str | None = None
    """The SM architecture a `cuda` job compiles for."""
    kind_names: tuple[str, ...] = ()
    """JAX's device_kind of a real device of this model, exactly (TPUs: "TPU v5" is a
    v5p and "TPU v5 lite" a v5e, so a prefix would confuse them)."""
    kind_markers: tuple[str, ...] = ()
    """Substrings of JAX's device_kind that identify a real device (GPUs, whose kind
    carries the memory size: "NVIDIA H100 80GB HBM3")."""
    devices_per_chip: int = 1
    """Devices a compiler lists per chip: libtpu lists each TensorCore of a v4 or a TPU7x
    chip as a device."""
    cores_per_chip: int = 1
    """TensorCores per chip: Google names v4, v5p and TPU7x slices by them (v5p-8 is four
    chips)."""
    bandwidth_bytes_per_s: float | None = None
    """HBM bandwidth per chip, as published."""
    bandwidth_label: str = ""
    peaks: tuple[PeakRate, ...] = ()
    clock: Clock | None = None
    clock_missing: str | None = None
    """Why no clock is stated, where none is."""
    usable_fraction: float | None = None
    """GPUs: the share of HBM a JAX program may use (its allocator's default). TPUs: None,
    since libtpu states what it keeps itself."""
    shapes_source: str | None = None
    """Where the list of slices sold comes from (TPUs)."""

    @property
    def device_hbm_bytes(self) -> int:
        """The published HBM of one device: the chip's, shared among its devices."""
        return self.hbm_bytes // self.devices_per_chip

    @property
    def device_hbm_label(self) -> str:
        """The published figure as one device's: the chip's label, and the share."""
        if self.devices_per_chip == 1:
            return self.hbm_label
        share = self.device_hbm_bytes / GIB
        return f"{self.hbm_label} ({share:g} GiB per device, {self.devices_per_chip} per chip)"

    def matches(self, device_kind: str) -> bool:
        """Whether JAX's `device_kind` names a real device of this model."""
        kind = device_kind.strip().lower()
        if any(kind == name.lower() for name in self.kind_names):
            return True
        return any(m.lower() in kind for m in self.kind_markers)


def _derived_clock(bf16_per_s: float, macs_per_cycle: int, what: str, source: str) -> Clock:
    return Clock(
        bf16_per_s / (2 * macs_per_cycle),
        f"the bf16 peak per chip ÷ (2 FLOPs × {macs_per_cycle:,} MACs per cycle: {what})",
        (source, "tpu-system-architecture"),
    )


_TPU = (PathId.JAX_TPU,)
_GPU = (PathId.JAX_GPU, PathId.CUDA)
_MXU = 128 * 128


def _peak(dtype: str, tera: float, unit: str, short: str, source: str) -> PeakRate:
    return PeakRate(dtype, tera * 10**12, f"{tera:g} {unit} ({short})", source)


TPUS: tuple[Chip, ...] = (
    Chip(
        TargetModel.V4,
        "TPU v4",
        Platform.TPU,
        _TPU,
        32 * GIB,
        "32 GiB HBM2 per chip",
        "tpu-v4",
        kind_names=("TPU v4",),
        devices_per_chip=2,
        cores_per_chip=2,
        bandwidth_bytes_per_s=1200e9,
        bandwidth_label="1,200 GBps per chip",
        peaks=(
            _peak("bfloat16", 275, "TFLOPs", "bf16", "tpu-v4"),
            _peak("int8", 275, "TOPs", "int8", "tpu-v4"),
        ),
        clock=_derived_clock(275e12, 2 * 4 * _MXU, "2 TensorCores × 4 MXUs of 128 × 128", "tpu-v4"),
        shapes_source="xpk-system-characteristics",
    ),
    Chip(
        TargetModel.V5E,
        "TPU v5e",
        Platform.TPU,
        _TPU,
        16 * GIB,
        "16 GB HBM2 per chip (Google's GB; 16 GiB)",
        "tpu-v5e",
        kind_names=("TPU v5 lite", "TPU v5e"),
        bandwidth_bytes_per_s=819e9,
        bandwidth_label="819 GBps per chip",
        peaks=(
            _peak("bfloat16", 197, "TFLOPs", "bf16", "tpu-v5e"),
            _peak("int8", 393, "TOPs", "int8", "tpu-v6e"),
        ),
        clock=_derived_clock(197e12, 4 * _MXU, "1 TensorCore × 4 MXUs of 128 × 128", "tpu-v5e"),
        shapes_source="tpu-v5e",
    ),
    Chip(
        TargetModel.V5P,
        "TPU v5p",
        Platform.TPU,
        _TPU,
        95 * GIB,
        "95 GiB HBM2e per chip",
        "tpu7x",
        kind_names=("TPU v5", "TPU v5p"),
        cores_per_chip=2,
        bandwidth_bytes_per_s=2765e9,
        bandwidth_label="2,765 GBps per chip",
        peaks=(
            _peak("bfloat16", 459, "TFLOPs", "bf16", "tpu-v5p"),
            _peak("float8", 459, "TFLOPs", "fp8", "tpu7x"),
        ),
        clock=_derived_clock(
            459e12, 2 * 4 * _MXU, "2 TensorCores × 4 MXUs of 128 × 128", "tpu-v5p"
        ),
        shapes_source="tpu-v5p",
    ),
    Chip(
        TargetModel.V6E,
        "TPU v6e (Trillium)",
        Platform.TPU,
        _TPU,
        32 * GIB,
        "32 GiB HBM per chip",
        "tpu7x",
        kind_names=("TPU v6 lite", "TPU v6e"),
        bandwidth_bytes_per_s=1638e9,
        bandwidth_label="1,638 GBps per chip",
        peaks=(
            _peak("bfloat16", 918, "TFLOPs", "bf16", "tpu-v6e"),
            _peak("int8", 1836, "TOPs", "int8", "tpu-v6e"),
            _peak("float8", 918, "TFLOPs", "fp8", "tpu7x"),
        ),
        clock_missing=(
            "Google's v6e page has given its TensorCore 4 MXUs of 256 × 256 in one revision "
            "and 2 in another: 1.75 GHz or 3.5 GHz, so no clock is stated"
        ),
        shapes_source="tpu-v6e",
    ),
    Chip(
        TargetModel.TPU7X,
        "TPU7x (Ironwood)",
        Platform.TPU,
        _TPU,
        192 * GIB,
        "192 GiB HBM per chip",
        "tpu7x",
        kind_names=("TPU7x", "TPU 7x"),
        devices_per_chip=2,
        cores_per_chip=2,
        bandwidth_bytes_per_s=7380e9,
        bandwidth_label="7,380 GBps per chip",
        peaks=(
            _peak("bfloat16", 2307, "TFLOPs", "bf16", "tpu7x"),
            _peak("float8", 4614, "TFLOPs", "fp8", "tpu7x"),
        ),
        clock_missing="Google publishes no MXU count or size for TPU7x, so no clock is stated",
        shapes_source="xpk-system-characteristics",
    ),
)

GPU_USABLE_FRACTION = 0.75
"""JAX's GPU allocator preallocates 75% of the device's memory unless told otherwise."""

GPUS: tuple[Chip, ...] = (
    Chip(
        TargetModel.B200,
        "NVIDIA B200",
        Platform.GPU,
        _GPU,
        180 * 10**9,
        "180 GB HBM3E per GPU",
        "blackwell-datasheet",
        cuda_arch="sm_100",
        kind_markers=("B200",),
        bandwidth_bytes_per_s=7.7e12,
        bandwidth_label="7.7 TB/s per GPU",
        usable_fraction=GPU_USABLE_FRACTION,
    ),
    Chip(
        TargetModel.H100,
        "NVIDIA H100 SXM",
        Platform.GPU,
        _GPU,
        80 * 10**9,
        "80 GB HBM3 per GPU, 3.35 TB/s",
        "h100-datasheet",
        cuda_arch="sm_90",
        kind_markers=("H100",),
        bandwidth_bytes_per_s=3.35e12,
        bandwidth_label="3.35 TB/s per GPU",
        usable_fraction=GPU_USABLE_FRACTION,
    ),
    Chip(
        TargetModel.H200,
        "NVIDIA H200",
        Platform.GPU,
        _GPU,
        141 * 10**9,
        "141 GB HBM3e per GPU, 4.8 TB/s",
        "h200-datasheet",
        cuda_arch="sm_90",
        kind_markers=("H200",),
        bandwidth_bytes_per_s=4.8e12,
        bandwidth_label="4.8 TB/s per GPU",
        usable_fraction=GPU_USABLE_FRACTION,
    ),
)

_FIRST = TargetModel.V6E
"""The reader's TPU (the `jax-tpu` path's chip) comes first in every list; the other
generations follow in order."""

CHIPS: dict[TargetModel, Chip] = {
    chip.model: chip
    for chip in (
        *(c for c in TPUS if c.model is _FIRST),
        *(c for c in TPUS if c.model is not _FIRST),
        *GPUS,
    )
}


def chip_of_kind(device_kind: str) -> Chip | None:
    """The model a real device of JAX's `device_kind` is, or None."""
    return next((c for c in CHIPS.values() if c.matches(device_kind)), None)
