"""A job: what a user asks for."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from workers.protocol.base import (
    MAIN_BOUNDARY,
    MAX_SAMPLES,
    MODE_BOUNDARIES,
    WARMUP_CAP_FACTOR,
    BoundaryId,
    CachePolicy,
    Dumps,
    Lax,
    Mode,
    PathId,
    StageId,
    StrictModel,
)
from workers.protocol.compiler_options import (
    MAX_OPTIONS,
    OptionError,
    OptionValue,
    check_options,
    compiler_for,
)
from workers.protocol.targets import TargetError, parse_target


class MeasureOptions(StrictModel):
    """How the execute stage is sampled."""

    mode: Annotated[Mode, Lax] = Mode.LATENCY
    samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] | Literal["auto"] = Field(
        default=20,
        description="Exactly this many samples, or 'auto' to stop adaptively.",
    )
    cache: Annotated[CachePolicy, Lax] = CachePolicy.COLD
    calls_per_sample: int = Field(
        default=10, ge=1, le=1000, description="K: calls enqueued per sync in throughput mode."
    )
    max_seconds: float = Field(
        default=30.0, gt=0, le=600, description="Time cap on sampling ('auto' stops here too)."
    )
    auto_max_samples: int = Field(default=1000, ge=5, le=MAX_SAMPLES)
    auto_rel_iqr: float = Field(
        default=0.05, gt=0, le=1, description="'auto' stops once IQR / median falls below this."
    )
    warmup: int = Field(default=1, ge=1, le=100, description="Uncounted calls before sampling.")
    flush_l2: bool = Field(
        default=False,
        description="cuda path: flush the GPU's L2 cache before every sample (cold-cache timing).",
    )
    profile: bool = Field(
        default=False,
        description="Capture a JAX profiler trace of the sampled calls (not compile, not warm-up).",
    )
    pipeline: bool = Field(
        default=False,
        description="Compile once more with XLA's per-pass dump and send the pass pipeline "
        "(the reported compile time is the first, plain compile).",
    )

    def sample_count(self) -> int | None:
        """The fixed sample count, or None when sampling is adaptive."""
        return None if self.samples == "auto" else self.samples


class JobSpec(StrictModel):
    """A request: a workload with its parameters, a path, optionally a target (what the
    compiler compiles for), and measurement options.

    With a target and no stages, the stages are `compile` alone: a target is usually
    compiled for without its hardware. How a target combines with the path, the workload
    and its device count is checked by `workers.catalog.target_rules.apply_target`.
    """

    workload: str = Field(min_length=1, max_length=64)
    path: Annotated[PathId, Lax] = PathId.JAX_CPU
    params: dict[str, Any] = Field(default_factory=dict)
    stages: list[Annotated[StageId, Lax]] = Field(
        default_factory=lambda: [StageId.COMPILE, StageId.EXECUTE], min_length=1, max_length=3
    )
    measure: MeasureOptions = Field(default_factory=MeasureOptions)
    target: str | None = Field(
        default=None,
        max_length=16,
        description="What the compiler compiles for: a TPU slice (v5e:1x1 … v5e:16x16, "
        "v6e:1x1 … v6e:16x16, v4:2x2x1 …, v5p:2x2x1 …, tpu7x:1x1x1 …) or GPUs (b200:N, "
        "h100:N, h200:N; N in 1, 2, 4, 8). It names its path when none is given. Without "
        "the hardware, a target is compiled, never run.",
    )
    dumps: Annotated[Dumps, Lax] = Field(
        default=Dumps.INLINE,
        description="A compile without the hardware: `later` publishes the run when its "
        "compile ends and brings the dumps (machine code, the kernels' own IR, the pass "
        "pipeline) in a follow-up job, `inline` waits for them. The server sets it.",
    )
    usable_fraction: float | None = Field(
        default=None,
        ge=0.01,
        le=1,
        description="A GPU target: the share of each device's published HBM the program's "
        "peak is held against (unset: 0.75, JAX's GPU allocator's own). A fit search's "
        "compiles carry the search's, so each run says what the search judged it by.",
    )
    compiler_options: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_OPTIONS,
        description="XLA options for this job's compiles, e.g. "
        '{"xla_gpu_enable_triton_gemm": false}: only those on the allow-list of the path\'s '
        "compiler (XLA:CPU, XLA:GPU, libtpu), each of its own type; none on the cuda path.",
    )

    @model_validator(mode="before")
    @classmethod
    def _target_defaults(cls, data: Any) -> Any:
        # A target is compiled for; executing it needs its hardware, so ask for that. And a
        # target names its path (jax-tpu for a TPU slice, jax-gpu for GPUs) when none is given.
        if not isinstance(data, dict) or not isinstance(data.get("target"), str):
            return data
        if "stages" not in data:
            data = {**data, "stages": [StageId.COMPILE.value]}
        if "path" not in data:
            with contextlib.suppress(TargetError):
                data = {**data, "path": parse_target(data["target"]).path.value}
        return data

    @field_validator("compiler_options")
    @classmethod
    def _allowed_options(
        cls, value: dict[str, Any], info: ValidationInfo
    ) -> dict[str, OptionValue]:
        if not value:
            return {}
        path = info.data.get("path")
        if path is None:
            return value  # the path itself is refused; its options cannot be checked
        try:
            return check_options(value, compiler_for(PathId(path).value))
        except OptionError as exc:
            raise PydanticCustomError(
                "compiler_options", "{message}", {"message": exc.message}
            ) from None

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return parse_target(value).id
        except TargetError as exc:
            raise PydanticCustomError("target", "{message}", {"message": str(exc)}) from None

    @field_validator("usable_fraction")
    @classmethod
    def _fraction_of_a_gpu(cls, value: float | None, info: ValidationInfo) -> float | None:
        # TPU capacity is libtpu's own reading and a run on real hardware has what it has:
        # a share of the HBM is a question only a GPU target's compile answers.
        if value is None or "target" not in info.data:
            return value  # none asked, or the target itself is refused
        target = info.data["target"]
        if target is None or parse_target(target).platform.value != "gpu":
            raise PydanticCustomError(
                "usable_fraction",
                "usable_fraction applies only to a GPU target (h100:N, h200:N, b200:N), "
                "not {target}",
                {"target": target or "a job without a target"},
            )
        return value


def cuda_host_boundary(measure: MeasureOptions) -> BoundaryId:
    """The host-side boundary the cuda path times beside its device events: K calls per
    sample (throughput mode, K > 1) are `host-throughput`, one call is `host-sync`."""
    if measure.mode is Mode.THROUGHPUT and measure.calls_per_sample > 1:
        return BoundaryId.HOST_THROUGHPUT
    return BoundaryId.HOST_SYNC


def measured_boundaries(job: JobSpec) -> tuple[BoundaryId, ...]:
    """The boundaries a run of `job` may report samples under: its mode's
    (`MODE_BOUNDARIES`), or on the cuda path device events and the host boundary."""
    if job.path is PathId.CUDA:
        return (BoundaryId.DEVICE_EVENTS, cuda_host_boundary(job.measure))
    if job.path in (PathId.JAX_TPU, PathId.JAX_GPU):  # a real chip's profiled pass
        return (*MODE_BOUNDARIES[job.measure.mode], BoundaryId.DEVICE_TIME)
    return MODE_BOUNDARIES[job.measure.mode]


def main_boundary(job: JobSpec) -> BoundaryId:
    """The boundary whose median a run of `job` reads its rates from (`MAIN_BOUNDARY`;
    device events on the cuda path). Under `NEVER_A_SPEED` there are no rates."""
    return BoundaryId.DEVICE_EVENTS if job.path is PathId.CUDA else MAIN_BOUNDARY[job.measure.mode]


def sample_caps(measure: MeasureOptions) -> tuple[int, int]:
    """The most samples one measurement of a job measured so may keep, and may take in
    all (kept and discarded while the timings settled), as its sampling loop stops:
    a fixed N keeps at most N of at most `WARMUP_CAP_FACTOR` x N; 'auto' takes at most
    `auto_max_samples` in all."""
    fixed = measure.sample_count()
    if fixed is None:
        return measure.auto_max_samples, measure.auto_max_samples
    return fixed, fixed * WARMUP_CAP_FACTOR
