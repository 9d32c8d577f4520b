"""The one publish step: Measured → Checked → Published. The only code that builds a run.

Every runner (the engine, the shape sweep, the CUDA path, scale series, exported
functions, multi-process groups) hands what it measured and its correctness verdict
here, and gets back the `RunResult` it returns. This module alone decides what a failed,
unchecked or partial run may show, so a new runner cannot leak a number it should not.

How a runner hands its measurements over, in the spirit of `jax.stages`:

1. Build a `Measured`: everything the run produced, raw. Put every sample in
   `measurements` with its statistics, the work counts in `work` and the boundary whose
   median the rates come from in `rate_basis` (statistics, rates and calls per second
   are worked out by the gate from the samples, never by a runner:
   `workers.protocol.speeds`, which the server applies to what it stores). Sweep figures
   go in `sweep`, scaling points in `scaling` (with their own `correct` flags), and
   `started` is the `time.perf_counter()` at which the runner began. Counts and times go
   in structured fields, never into a warning's text: the gate withholds fields, and a
   sentence would carry a speed past it.
2. `measured.check(correctness)` gives a `Checked`. `correctness` is None when nothing
   executed; `subjects` holds the verdicts of further implementations timed beside the
   main one (their measurements carry the subject's name).
3. `checked.publish()` gives the `RunResult`. A multi-process group adds its members
   with `regroup(run, report)`, which passes the run through the same gate again.

What the gate decides is written once, in `workers.protocol.gate`, which the server's
half of the gate imports too: validity from the run's own verdict (a verdict that
passed for real; an honest "unchecked" only for a job with nothing to check against),
and for a run that is not valid, every speed-bearing field withheld together
(`WITHHELD_FIELDS`), while its trace, lower and compile times, work counts and compiler
output stay. A valid run still loses the times of any part whose own check failed: a
subject that failed, a scaling point that failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from workers.catalog.published import published
from workers.protocol import (
    NEVER_A_SPEED,
    Artifacts,
    BoundaryId,
    Correctness,
    CostAnalysis,
    DeviceTime,
    Environment,
    GroupReport,
    HloSummary,
    InputInfo,
    JobSpec,
    KernelResources,
    Measurement,
    MemoryAnalysis,
    MemoryReport,
    PipelineCapture,
    Placement,
    Prediction,
    ProfileTrace,
    Rates,
    RunResult,
    ScalingSeries,
    SourceText,
    StageSeconds,
    SweepResult,
    TargetReport,
)
from workers.protocol.compiler_options import as_text
from workers.protocol.gate import WITHHELD, WITHHELD_FIELDS, strip

__all__ = [
    "WITHHELD",
    "WITHHELD_FIELDS",
    "Checked",
    "Measured",
    "RateBasis",
    "Work",
    "regroup",
]


@dataclass(frozen=True)
class Work:
    """What one unit of the rate basis computes: analytic FLOPs and bytes moved."""

    flops: float
    bytes: float
    source: str = "analytic"
    """'analytic', or where else the counts came from (XLA's cost analysis)."""


@dataclass(frozen=True)
class RateBasis:
    """Which measurement's median the rates are computed from.

    `calls` is how many of that measurement's per-call times the counted `Work` spans: 1
    for a workload timed call by call, the number of sizes for a sweep whose work is one
    pass over every size.
    """

    boundary: BoundaryId
    subject: str | None = None
    calls: int = 1


@dataclass(kw_only=True)
class Measured:
    """A run as measured, its output not yet judged: ready for checking."""

    job: JobSpec
    params: dict[str, Any]
    environment: Environment
    started: float
    """`time.perf_counter()` when the runner began; the harness's own time follows from it."""
    inputs: list[InputInfo] = field(default_factory=list)
    stage_seconds: StageSeconds = field(default_factory=StageSeconds)
    artifacts: Artifacts = field(default_factory=Artifacts)
    hlo_summary: HloSummary | None = None
    cost_analysis: CostAnalysis | None = None
    memory_analysis: MemoryAnalysis | None = None
    measurements: list[Measurement] = field(default_factory=list)
    work: Work | None = None
    rate_basis: RateBasis | None = None
    comparison: bool = False
    """Publish each subject's rates beside the kernel's (the cuda path's baselines)."""
    warnings: list[str] = field(default_factory=list)
    kernel_resources: list[KernelResources] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    unreported: dict[str, float] | None = None
    """Named untimed work (inputs, placement, the check, …); None: not itemised."""
    placement: Placement | None = None
    scaling: ScalingSeries | None = None
    sweep: SweepResult | None = None
    profile: ProfileTrace | None = None
    source: SourceText | None = None
    """The workload function's source, for the page's source ↔ IR links."""
    pipeline: PipelineCapture | None = None
    """measure.pipeline's capture: compiler facts, no speed."""
    target: TargetReport | None = None
    """What the compiler compiled for (a job with a target), and whether it ran there."""
    memory_report: MemoryReport | None = None
    """The compiler's buffer assignment for one device, read out."""
    kernel_pipelines: dict[str, PipelineCapture] = field(default_factory=dict)
    """measure.pipeline: each Pallas kernel's own compiler passes (Mosaic, LLO, Triton)."""
    device_time: DeviceTime | None = None
    """A real chip's profiled pass: where the `device-time` samples came from, and each
    instruction's median time per call."""
    prediction: Prediction | None = None
    """The chip's own target compiled without the device, beside the real compile."""
    no_speed: str | None = None
    """Why this run's times are no kernel's speed though its output may pass (Pallas
    interpret mode): published first among the warnings, every time and rate withheld."""

    def check(
        self, correctness: Correctness | None, subjects: dict[str, Correctness] | None = None
    ) -> Checked:
        """This run with its verdict: None when nothing executed, so nothing was judged."""
        return Checked(self, correctness, dict(subjects or {}))


@dataclass(frozen=True)
class Checked:
    """A measured run with its correctness verdict: ready for publishing."""

    measured: Measured
    correctness: Correctness | None
    subjects: dict[str, Correctness]

    def publish(self) -> RunResult:
        """The run result, through the gate (`workers.protocol.gate`): speed-bearing fields
        kept only where the checks allow them, and speeds worked out only for what stands."""
        m = self.measured
        harness_s = _harness_seconds(m)
        extra = dict(m.extra)
        if m.unreported is not None:
            unreported = dict(m.unreported)
            # What is left once the runner's untimed work is named: the harness's bookkeeping.
            unreported["bookkeeping"] = harness_s - sum(unreported.values())
            extra["unreported_s"] = unreported
        if self.subjects:  # where the gate (and the server's half) reads the subjects' verdicts
            extra["baselines"] = {k: v.model_dump(mode="json") for k, v in self.subjects.items()}
        if m.comparison and m.work is not None:  # the gate fills it from the samples
            extra["comparison"] = []
        warnings = list(m.warnings) + _cache_notes(m.environment)
        if m.no_speed is not None:
            warnings = [m.no_speed, *(w for w in warnings if w != m.no_speed)]
        c = self.correctness
        environment = m.environment
        if m.job.compiler_options:  # every run names the options its compiles had
            recorded = {**environment.extra, "compiler_options": as_text(m.job.compiler_options)}
            environment = environment.model_copy(update={"extra": recorded})
        run = RunResult(
            job=m.job,
            params=m.params,
            inputs=m.inputs,
            stage_seconds=m.stage_seconds,
            artifacts=m.artifacts,
            hlo_summary=m.hlo_summary,
            cost_analysis=m.cost_analysis,
            memory_analysis=m.memory_analysis,
            measurements=m.measurements,
            correctness=c,
            rates=_rates(m.work, m.rate_basis),
            environment=environment,
            warnings=warnings,
            valid=False,  # the gate decides
            harness_seconds=harness_s,
            kernel_resources=m.kernel_resources,
            extra=extra,
            placement=m.placement,
            scaling=m.scaling,
            profile=m.profile,
            sweep=m.sweep,
            source=m.source,
            pipeline=m.pipeline,
            kernel_pipelines=m.kernel_pipelines,
            target=m.target,
            memory_report=m.memory_report,
            device_time=m.device_time,
            prediction=m.prediction,
        )
        run = published(run)  # every figure by its rule, through the gate
        if not run.valid:
            return run
        if m.no_speed is not None:  # checked and valid, and still no kernel's speed
            return _no_speed(run, m.no_speed)
        if c is not None and not c.checked:
            run.warnings.append(f"{c.detail}: these timings are of an unverified output.")
        return run


def _no_speed(run: RunResult, why: str) -> RunResult:
    """A valid run whose times are no speed (Pallas interpret mode) without a single
    speed-bearing field, the same ones the gate strips, each withheld measurement saying
    why in its place; it stays valid, its verdict standing."""
    stripped = strip(run)
    note = f"withheld: {why}"
    measurements = [m.model_copy(update={"note": note}) for m in stripped.measurements]
    return stripped.model_copy(update={"measurements": measurements, "valid": True})


def regroup(run: RunResult, group: GroupReport) -> RunResult:
    """`run` with a multi-process group's report, through the gate again: a group whose
    processes did not all compute the same, correct output publishes no speed."""
    return published(run.model_copy(update={"group": group}))


def _cache_notes(environment: Environment) -> list[str]:
    """What a reader needs to read the persistent cache's own figures."""
    events = environment.cache_events
    if events is None or events.time_saved_s is None or events.time_saved_s >= 0:
        return []
    return [
        f"persistent cache: time_saved_s is {events.time_saved_s * 1e3:.3g} ms: JAX reports "
        "the compile time it recorded minus the time loading the entry took, so for a "
        "program that compiles in a few milliseconds reading it back can cost more than "
        "compiling it again. The hits are real; the saving is not."
    ]


def _rates(work: Work | None, basis: RateBasis | None) -> Rates | None:
    """The work counts and the measurement whose median the gate reads the rates at (none
    under a boundary that is no speed)."""
    if work is None:
        return None
    rates = Rates(flops=work.flops, bytes=work.bytes, source=work.source)
    if basis is not None and basis.boundary not in NEVER_A_SPEED:
        rates.boundary, rates.subject, rates.calls = basis.boundary, basis.subject, basis.calls
    return rates


def _harness_seconds(m: Measured) -> float:
    """The runner's time outside every interval the run reports (stages and samples, the
    samples discarded while timings settled included)."""
    st = m.stage_seconds
    reported = sum(s for s in (st.trace, st.lower, st.compile, st.warm_up) if s is not None)
    for x in m.measurements:
        reported += (sum(x.samples_s) + sum(x.warmup_samples_s)) * x.calls_per_sample
    return max(0.0, time.perf_counter() - m.started - reported)
