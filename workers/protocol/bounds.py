"""What a posted run's samples, boundaries and known `extra` entries may be, given the job
it was leased as: the server refuses anything else (422 naming the field) before the
result gate (`workers.protocol.gate`) sees it.

- Each measurement's boundary is one its job's mode reports (`measured_boundaries`, from
  the one mode -> boundary map), and the rates are read at the mode's main boundary
  (`main_boundary`) or at none. A worker does not choose what its times enclose.
- Each measurement keeps at most the samples its job asked for and took at most what
  its sampling loop may take in all (`sample_caps`); a scaling point at most
  `MAX_SAMPLES`. Every sample is a finite number of seconds above zero.
- `extra.cuda`, the only `extra` entry a page reads as sent, has its documented types
  (`CudaFacts`); the entries that hold speeds are the gate's to recompute or drop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field, ValidationError

from workers.protocol.base import (
    MAX_SAMPLES,
    PATH_PLATFORM,
    BoundaryId,
    OpenModel,
    PathId,
    Platform,
    StageId,
)
from workers.protocol.jobs import JobSpec, main_boundary, measured_boundaries, sample_caps
from workers.protocol.runs import RunResult
from workers.protocol.workers import Capabilities

SCALE_BOUNDARY = BoundaryId.HOST_SYNC
"""What a scaling point's step time encloses: the call until every shard is ready."""


class CudaLaunch(OpenModel):
    kernel: str
    grid: list[int] = Field(max_length=3)
    block: list[int] = Field(max_length=3)


class CudaBuild(OpenModel):
    source: str | None = None
    arch: str | None = None
    compiler: str | None = None
    flags: str | None = None
    ptx_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cubin_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache: str | None = None
    key: str | None = None


class CudaFacts(OpenModel):
    """`extra.cuda` of a cuda-path run: the kernel chosen, its launches and its build."""

    kernel: str | None = None
    description: str | None = None
    source: str | None = None
    launches: list[CudaLaunch] = Field(default_factory=list)
    build: CudaBuild | None = None
    sass_tool: str | None = None
    compile_only: bool | None = None


def _times(name: str, values: Sequence[float]) -> list[tuple[str, str]]:
    bad = [x for x in values if not (math.isfinite(x) and x > 0)]
    if bad:
        return [(name, f"every sample is a finite number of seconds above zero, not {bad[0]!r}")]
    return []


def sample_problems(run: RunResult, job: JobSpec) -> list[tuple[str, str]]:
    """(field, message) for each boundary, sample count or sample of `run` that a run of
    `job` cannot have."""
    problems: list[tuple[str, str]] = []
    allowed = measured_boundaries(job)
    names = ", ".join(b.value for b in allowed)
    mode = f"a {job.measure.mode.value}-mode job on the {job.path.value} path"
    kept_cap, total_cap = sample_caps(job.measure)
    for i, m in enumerate(run.measurements):
        at = f"result.measurements[{i}]"
        if m.boundary not in allowed:
            problems.append(
                (f"{at}.boundary", f"{m.boundary.value} is no boundary of {mode} (only {names})")
            )
        if len(m.samples_s) > kept_cap:
            problems.append(
                (f"{at}.samples_s", f"{len(m.samples_s)} samples kept; the job keeps {kept_cap}")
            )
        taken = len(m.samples_s) + len(m.warmup_samples_s)
        if taken > total_cap:
            problems.append(
                (
                    f"{at}.warmup_samples_s",
                    f"{taken} samples taken in all; the job's sampling stops at {total_cap}",
                )
            )
        problems += _times(f"{at}.samples_s", m.samples_s)
        problems += _times(f"{at}.warmup_samples_s", m.warmup_samples_s)
    main = main_boundary(job)
    if run.rates is not None and run.rates.boundary not in (None, main):
        problems.append(
            ("result.rates.boundary", f"the rates of {mode} are read at {main.value} or nowhere")
        )
    if run.scaling is not None:
        if run.scaling.boundary is not SCALE_BOUNDARY:
            problems.append(("result.scaling.boundary", f"a scaling series is {SCALE_BOUNDARY}"))
        for i, p in enumerate(run.scaling.points):
            at = f"result.scaling.points[{i}]"
            if p.boundary is not SCALE_BOUNDARY:
                problems.append((f"{at}.boundary", f"a scaling point is {SCALE_BOUNDARY}"))
            if len(p.samples_s) > MAX_SAMPLES:
                problems.append((f"{at}.samples_s", f"more than {MAX_SAMPLES} samples"))
            problems += _times(f"{at}.samples_s", p.samples_s)
    return problems


def extra_problems(run: RunResult) -> list[tuple[str, str]]:
    """(field, message) for each known `extra` entry whose shape is not as documented."""
    raw = run.extra.get("cuda")
    if raw is None:
        return []
    try:
        CudaFacts.model_validate(raw, strict=True)
    except ValidationError as exc:
        return [
            (
                ".".join(["result.extra.cuda", *(str(x) for x in e["loc"])]),
                str(e["msg"]),
            )
            for e in exc.errors()[:10]
        ]
    return []


def environment_problems(run: RunResult, caps: Capabilities) -> list[tuple[str, str]]:
    """(field, message) for each way a run's environment is not the worker that posted it.

    A run happened on the worker's registered platform and device kind, on at most its
    registered devices (a CPU worker: at most its virtual devices too); a run compiled
    for a target without the hardware happened on the host's CPU, and a cuda-path compile
    without a GPU on none. A group report spans at most the devices the worker has."""
    env, job = run.environment, run.job
    ran = StageId.EXECUTE in job.stages or StageId.SCALE in job.stages
    registered = caps.platform.value
    needed = PATH_PLATFORM[job.path].value  # what the job's path runs on, whoever says
    if job.path is PathId.CUDA and not ran:
        platforms = {"none", registered}
    elif job.target is not None and not ran:
        platforms = {Platform.CPU.value}
    else:
        platforms = {registered} & {needed}
    problems: list[tuple[str, str]] = []
    if env.platform not in platforms:
        problems.append(
            (
                "result.environment.platform",
                f"{env.platform[:40]!r}: this run could only have happened on "
                f"{' or '.join(sorted(platforms))} (the worker registered {registered})",
            )
        )
    kind = caps.device_kind if env.platform == registered else Platform.CPU.value
    if env.platform in (registered, Platform.CPU.value) and env.device_kind != kind:
        problems.append(
            (
                "result.environment.device_kind",
                f"{env.device_kind[:60]!r} is not the device kind {kind[:60]!r} this run "
                "could have had",
            )
        )
    most = caps.device_count
    if env.platform == Platform.CPU.value:
        most = max(most, caps.max_virtual_devices, 1)
    least = 1 if ran and env.platform != "none" else 0  # a run that executed had a device
    if not least <= env.device_count <= most:
        problems.append(
            (
                "result.environment.device_count",
                f"{env.device_count} devices; a run of this job had {least} to {most}",
            )
        )
    if run.group is not None and run.group.devices > max(caps.device_count, 1):
        problems.append(
            (
                "result.group.devices",
                f"a group of {run.group.devices} devices from a worker registered with "
                f"{caps.device_count}",
            )
        )
    return problems
