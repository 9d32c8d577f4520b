"""What a run on a real chip says beyond its timed samples: the device's own time per call
and per instruction (a profiled pass apart from the samples), and what a compile for the
chip's own target without the device predicted, beside what the chip measured."""

from __future__ import annotations

from pydantic import Field

from workers.protocol.base import OpenModel

MAX_DEVICE_OPS = 200
"""Instructions a run reports device time for: the ones that take the most time."""


class DeviceOp(OpenModel):
    """One HLO instruction's time on the device, median per call."""

    name: str = Field(description="The instruction's name in the optimized HLO, e.g. fusion.3.")
    median_s: float = Field(description="Median device time per call, in seconds.")
    calls: int = Field(description="Calls of the profiled pass in which it ran.")
    kind: str | None = Field(
        default=None,
        description="What it does (`convolution fusion`, `copy`), by the server from the HLO.",
    )
    estimated_cycles: int | None = Field(
        default=None,
        description="The compiler's own estimate (libtpu's estimated_cycles), by the server "
        "from the stored optimized HLO; None where the compiler states none.",
    )


class DeviceTime(OpenModel):
    """Where the `device-time` samples came from, and each instruction's share."""

    planes: list[str] = Field(
        default_factory=list, description="The trace's device planes, e.g. /device:TPU:0."
    )
    calls: int = Field(description="Calls of the profiled pass (after the timed samples).")
    ops: list[DeviceOp] = Field(
        default_factory=list, description="The instructions that took the most device time."
    )
    estimated_cycles: int | None = Field(
        default=None,
        description="The compiler's estimate for one call: the entry computation's "
        "instructions' estimated_cycles added up, by the server from the stored HLO.",
    )


class Prediction(OpenModel):
    """A compile of the same program for the chip's own target without the device, beside
    what the real compile and the chip said: the prediction Boundary makes for any chip,
    held against one that is here."""

    target: str = Field(description="The chip's own target, e.g. v5e:1x1.")
    compiler_version: str | None = None
    predicted_peak_bytes: int | None = Field(
        default=None, description="memory_analysis() of the compile without the device."
    )
    real_peak_bytes: int | None = Field(
        default=None, description="memory_analysis() of the compile on the device."
    )
    predicted_temp_bytes: int | None = None
    real_temp_bytes: int | None = None
    usable_bytes: int | None = Field(
        default=None, description="What the compiler makes available to a program on the chip."
    )
    same_hlo: bool | None = Field(
        default=None,
        description="The two optimized HLO modules are the same, instruction by instruction "
        "(metadata aside): the compile without the device is the chip's own compile.",
    )
    refused: str | None = Field(
        default=None, description="The compiler's refusal without the device, in its words."
    )
    seconds: float | None = Field(default=None, description="The deviceless compile, untimed.")
