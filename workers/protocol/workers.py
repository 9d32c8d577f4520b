"""Workers: what they can do, what they measured at start, and how a job progresses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from workers.protocol.base import PROTOCOL_VERSION, BoundaryId, OpenModel, PathId, Platform

Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A measured rate: a finite number above zero (a roof of 0 or below draws nothing)."""


class Ceilings(OpenModel):
    """What a worker measured it can reach, once at start: the roofs of its roofline.

    Measured on the worker's own first device with host-sync timing, best of a few calls;
    never a datasheet figure."""

    device_kind: str
    copy_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="A large device-to-device copy: bytes read + written per s.",
    )
    copy_bytes: int | None = Field(default=None, ge=1, description="Size of the array copied.")
    matmul_flops_per_s: dict[str, Rate] = Field(
        default_factory=dict, description="dtype → FLOP/s of a large square matmul."
    )
    matmul_sizes: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="dtype → the matrix size n that was timed."
    )
    measured_at: str = Field(description="ISO time of the first measurement.")
    rounds: int = Field(
        default=1, ge=1, description="Whole measurements each figure is the best of."
    )
    updated_at: str | None = Field(
        default=None, description="ISO time of the latest round, when re-measured while idle."
    )
    seconds: float | None = Field(default=None, ge=0, description="Time spent measuring.")
    method: str = ""
    boundary: BoundaryId = Field(
        default=BoundaryId.HOST_SYNC,
        description=(
            "What each timed call enclosed: one call at a time, timed until its result was "
            "ready. A roofline sets only a rate measured on the same boundary against it."
        ),
    )
    worker: str | None = Field(
        default=None, description="The worker's name, added by the server to a run's copy."
    )


class Capabilities(OpenModel):
    """What a worker found on its machine. Detected, never assumed."""

    platform: Platform
    device_kind: str
    device_count: int = Field(ge=0)
    max_virtual_devices: int = Field(
        default=0, description="CPU workers can start runners with up to this many devices."
    )
    paths: list[PathId]
    jax_version: str | None = None
    jaxlib_version: str | None = None
    cuda_compile: bool = False
    cuda_run: bool = False
    protocol_version: int = PROTOCOL_VERSION
    catalog_version: int
    hostname: str | None = None
    ceilings: Ceilings | None = Field(default=None, description="Measured once at start.")
    targets: list[str] = Field(
        default_factory=list,
        description="Target ids this worker compiles for without the hardware (deviceless).",
    )
    capacities: dict[str, Annotated[int, Field(gt=0)]] = Field(
        default_factory=dict,
        max_length=256,
        description="TPU target id → the bytes libtpu makes available to a program on it "
        "(usable_bytes), read from this worker's libtpu by compiling; filled in while idle.",
    )


ProgressPhase = Literal[
    "queued",
    "leased",
    "traced",
    "lowered",
    "compiled",
    "warm-up",
    "sampling",
    "checked",
    "done",
    "failed",
]


class ProgressEvent(OpenModel):
    """A fine-grained step of a running job; streamed, throttled, never stored."""

    phase: ProgressPhase
    k: int | None = None
    n: int | None = None
    message: str | None = None
