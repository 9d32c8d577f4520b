"""The checks of the checked fields: what a posted run must share with the job its lease
carries and with the worker that registered, or be refused whole, naming each field (422;
409 for what contradicts the registered worker: its job then ends failed, not re-queued).

Each function is one check, `(run, lease) → [(field, message)]`, named by the checked rows
of `workers.catalog.result_rules.RULES` (the `checked` mechanism of
`workers.catalog.rule_kinds` runs each once). A genuine result always passes: a runner
publishes exactly the leased job, its parameters after validation and defaults, and the
boundaries, subjects and sample counts its job allows. Pydantic and the catalog only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import Field, ValidationError

from workers.catalog import CatalogError, parse_params
from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import public_params
from workers.catalog.rule_recomputed import job_params, subjects_of
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.target_rules import apply_target
from workers.protocol import (
    MAX_SAMPLES,
    PATH_PLATFORM,
    PROTOCOL_VERSION,
    BoundaryId,
    Capabilities,
    JobSpec,
    OpenModel,
    PathId,
    Platform,
    RunResult,
    StageId,
)
from workers.protocol.jobs import main_boundary, measured_boundaries, sample_caps

Problems = list[tuple[str, str]]
NO_BYTE_CAP = 2**62
"""The lease check parses parameters only to fill in defaults; the job's byte cap was
checked when it was queued."""
SCALE_BOUNDARY = BoundaryId.HOST_SYNC
"""What a scaling point's step time encloses: the call until every shard is ready."""
LEASE_FIELDS: tuple[str, ...] = (
    "workload",
    "path",
    "target",
    "stages",
    "measure",
    "params",
    "compiler_options",
    "usable_fraction",
)
"""What a posted result's job must share with the job that was leased."""


@dataclass
class Lease:
    """What a posted run is checked against: the job its lease carries (as stored; None
    when the server no longer has it), the capabilities its worker registered (None when
    not known), and an upload's result dtypes by name (its header's)."""

    spec: dict[str, Any] | None
    caps: Capabilities | None = None
    dtypes: dict[str, str] | None = None

    @cached_property
    def job(self) -> JobSpec | None:
        """The leased job as its runner sees it (its target's defaults applied)."""
        if self.spec is None:
            return None
        job = JobSpec.model_validate(self.spec)
        try:
            return apply_target(job)
        except CatalogError:  # admitted once, so this does not happen
            return job

    @cached_property
    def params(self) -> dict[str, Any]:
        """The leased job's parameters after validation and defaults, as a runner publishes
        them (as stored where the catalog cannot parse them)."""
        job = self.job
        if job is None:
            return {}
        try:
            parsed = parse_params(job.workload, job.params, NO_BYTE_CAP)
        except CatalogError:
            return dict(job.params)
        return public_params(parsed, job.path.value)

    @cached_property
    def parsed(self) -> WorkloadParams | None:
        return job_params(self.job) if self.job is not None else None


def protocol(run: RunResult, lease: Lease) -> Problems:
    """The protocol the worker speaks is this server's."""
    if run.protocol_version != PROTOCOL_VERSION:
        return [("result.protocol_version", f"this server speaks {PROTOCOL_VERSION}")]
    return []


def leased_job(run: RunResult, lease: Lease) -> Problems:
    """The run's job is the leased one, field by field, and its parameters the leased
    job's after validation and defaults (compiler options compared as checked)."""
    job = lease.job
    if job is None:
        return []
    mine = run.job
    pairs: dict[str, tuple[Any, Any]] = {
        "workload": (mine.workload, job.workload),
        "path": (mine.path.value, job.path.value),
        "target": (mine.target, job.target),
        "stages": (sorted(s.value for s in mine.stages), sorted(s.value for s in job.stages)),
        "measure": (mine.measure.model_dump(mode="json"), job.measure.model_dump(mode="json")),
        "params": (mine.params, job.params),
        "compiler_options": (mine.compiler_options, job.compiler_options),
        "usable_fraction": (mine.usable_fraction, job.usable_fraction),
    }
    problems = [
        (f"result.job.{name}", f"differs from the leased job's {name}")
        for name in LEASE_FIELDS
        if pairs[name][0] != pairs[name][1]
    ]
    if run.params != lease.params:
        problems.append(
            ("result.params", "differs from the leased job's parameters after defaults")
        )
    return problems


def _times(name: str, values: Sequence[float]) -> Problems:
    bad = [x for x in values if not (math.isfinite(x) and x > 0)]
    if bad:
        return [(name, f"every sample is a finite number of seconds above zero, not {bad[0]!r}")]
    return []


def samples(run: RunResult, lease: Lease) -> Problems:
    """Each measurement's boundary is one its job's mode reports, its samples at most what
    the job keeps and its sampling loop takes in all, each a finite time above zero; the
    rates read at the mode's main boundary or at none."""
    job = lease.job
    if job is None:
        return []
    problems: Problems = []
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
            said = f"{taken} samples taken in all; the job's sampling stops at {total_cap}"
            problems.append((f"{at}.warmup_samples_s", said))
        problems += _times(f"{at}.samples_s", m.samples_s)
        problems += _times(f"{at}.warmup_samples_s", m.warmup_samples_s)
    main = main_boundary(job)
    if run.rates is not None and run.rates.boundary not in (None, main):
        problems.append(
            ("result.rates.boundary", f"the rates of {mode} are read at {main.value} or nowhere")
        )
    return problems


def subjects(run: RunResult, lease: Lease) -> Problems:
    """Each measurement times a subject its job has, once per boundary."""
    if lease.job is None:
        return []
    allowed = subjects_of(lease.job, lease.parsed)
    problems: Problems = []
    seen: set[tuple[str, str | None]] = set()
    for i, m in enumerate(run.measurements):
        at = f"result.measurements[{i}]"
        if m.subject not in allowed:
            problems.append((f"{at}.subject", f"{str(m.subject)[:40]!r} is no subject of this job"))
        if (m.boundary.value, m.subject) in seen:
            problems.append((f"{at}.boundary", "a second measurement of this boundary and subject"))
        seen.add((m.boundary.value, m.subject))
    return problems


def sweep_policies(run: RunResult, lease: Lease) -> Problems:
    """A sweep holds the job's bucketing policies, each once."""
    params = lease.parsed
    if run.sweep is None or not isinstance(params, ShapeSweepParams):
        return []
    if sorted(p.policy for p in run.sweep.policies) != sorted(params.policies()):
        wanted = ", ".join(params.policies())
        return [("result.sweep.policies", f"the job runs {wanted}, once each")]
    return []


def scaling(run: RunResult, lease: Lease) -> Problems:
    """A scaling series only on a job with the scale stage, timed at host-sync, one point
    per device count and mode, each within the job's device count, capped in samples."""
    series, job = run.scaling, lease.job
    if series is None or job is None:
        return []
    if StageId.SCALE not in job.stages or lease.parsed is None:
        return [("result.scaling", "this job has no scale stage")]
    problems: Problems = []
    if series.boundary is not SCALE_BOUNDARY:
        problems.append(("result.scaling.boundary", f"a scaling series is {SCALE_BOUNDARY}"))
    most = lease.parsed.devices()
    seen: set[tuple[int, str]] = set()
    for i, p in enumerate(series.points):
        at = f"result.scaling.points[{i}]"
        if not 1 <= p.devices <= most:
            problems.append((f"{at}.devices", f"{p.devices}: the job's series spans 1 to {most}"))
        if (p.devices, p.mode) in seen:
            problems.append((f"{at}.devices", "a second point of this device count and mode"))
        seen.add((p.devices, p.mode))
        if p.boundary is not SCALE_BOUNDARY:
            problems.append((f"{at}.boundary", f"a scaling point is {SCALE_BOUNDARY}"))
        if len(p.samples_s) > MAX_SAMPLES:
            problems.append((f"{at}.samples_s", f"more than {MAX_SAMPLES} samples"))
        problems += _times(f"{at}.samples_s", p.samples_s)
    return problems


def result_names(run: RunResult, lease: Lease) -> Problems:
    """An uploaded program's checks name its results as its header does, all of them, when
    it has several: a result left out cannot set a looser verdict."""
    c, dtypes = run.correctness, lease.dtypes
    if c is None or dtypes is None or len(dtypes) < 2:
        return []
    if sorted(r.name for r in c.results) != sorted(dtypes):
        return [("result.correctness.results", f"the program's {len(dtypes)} results, each once")]
    return []


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


def cuda_facts(run: RunResult, lease: Lease) -> Problems:
    """`extra.cuda`, the one entry a page reads as sent, has its documented types."""
    raw = run.extra.get("cuda")
    if raw is None:
        return []
    try:
        CudaFacts.model_validate(raw, strict=True)
    except ValidationError as exc:
        return [
            (".".join(["result.extra.cuda", *(str(x) for x in e["loc"])]), str(e["msg"]))
            for e in exc.errors()[:10]
        ]
    return []


def environment(run: RunResult, lease: Lease) -> Problems:
    """The run happened on the worker's registered platform and device kind, on at most
    its registered devices (a CPU worker: at most its virtual devices too); a run compiled
    for a target without the hardware happened on the host's CPU, and a cuda-path compile
    without a GPU on none. A group spans at most the devices the worker has (409)."""
    caps = lease.caps
    if caps is None:
        return []
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
    problems: Problems = []
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
    return problems + _devices(run, caps, ran)


def _devices(run: RunResult, caps: Capabilities, ran: bool) -> Problems:
    env = run.environment
    most = caps.device_count
    if env.platform == Platform.CPU.value:
        most = max(most, caps.max_virtual_devices, 1)
    least = 1 if ran and env.platform != "none" else 0  # a run that executed had a device
    problems: Problems = []
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
