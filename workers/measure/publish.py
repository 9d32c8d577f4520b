"""The one publish step: Measured → Checked → Published. The only code that builds a run.

Every runner (the engine, the shape sweep, the CUDA path, scale series, exported
functions, multi-process groups) hands what it measured and its correctness verdict
here, and gets back the `RunResult` it returns. This module alone decides what a failed,
unchecked or partial run may show, so a new runner cannot leak a number it should not.

How a runner hands its measurements over, in the spirit of `jax.stages`:

1. Build a `Measured`: everything the run produced, raw. Put every sample in
   `measurements` with its statistics, the work counts in `work` and the boundary whose
   median the rates come from in `rate_basis` (rates are computed here, never by a
   runner). Sweep figures go in `sweep`, scaling points in `scaling` (with their own
   `correct` flags), spread warnings in `spread_warnings` (shown only while the timings
   stand), and `started` is the `time.perf_counter()` at which the runner began.
2. `measured.check(correctness)` gives a `Checked`. `correctness` is None when nothing
   executed; `subjects` holds the verdicts of further implementations timed beside the
   main one (their measurements carry the subject's name).
3. `checked.publish()` gives the `RunResult`. A multi-process group adds its members
   with `regroup(run, report)`, which passes the run through the same gate again.

What the gate does: a run is valid when nothing executed, its output passed, or it was
honestly unchecked (a finite output with nothing to compare it with; a non-finite one is
a failed check, see `workers.measure.correctness`). An invalid run keeps its stage times (trace,
lower, compile: they are not speeds of its output) and its work counts, and loses every
speed-bearing field together: statistics and raw samples, warm-up time, rates and the
comparison built on them, sweep pass times, scaling points' times, group members'
medians and any profiler trace. A valid run still loses the times of any part whose own
check failed: a subject that failed, a scaling point that failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from workers.protocol import (
    Artifacts,
    BoundaryId,
    Correctness,
    CostAnalysis,
    Environment,
    GroupReport,
    HloSummary,
    InputInfo,
    JobSpec,
    KernelResources,
    Measurement,
    MemoryAnalysis,
    PipelineCapture,
    Placement,
    ProfileTrace,
    Rates,
    RunResult,
    ScalingPoint,
    ScalingSeries,
    SourceText,
    StageSeconds,
    SweepResult,
    TargetReport,
)
from workers.protocol.compiler_options import as_text

__all__ = [
    "WITHHELD",
    "Checked",
    "Measured",
    "RateBasis",
    "Work",
    "regroup",
]

WITHHELD = "withheld: the output failed the correctness check, so these times are no result"
"""The note a withheld measurement carries in place of its samples and statistics."""


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
    spread_warnings: list[str] = field(default_factory=list)
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

    @property
    def valid(self) -> bool:
        """Whether the run's timings may stand."""
        c = self.correctness
        return c is None or c.passed or not c.checked

    def publish(self) -> RunResult:
        """The run result: speed-bearing fields kept only where the checks allow them."""
        m = self.measured
        harness_s = _harness_seconds(m)
        extra = dict(m.extra)
        if m.unreported is not None:
            unreported = dict(m.unreported)
            # What is left once the runner's untimed work is named: the harness's bookkeeping.
            unreported["bookkeeping"] = harness_s - sum(unreported.values())
            extra["unreported_s"] = unreported
        warnings = list(m.warnings) + _cache_notes(m.environment)
        c = self.correctness
        valid = self.valid
        measurements = [
            _withhold(x)
            if x.subject in self.subjects and not self.subjects[x.subject].passed
            else x
            for x in m.measurements
        ]
        for name, verdict in self.subjects.items():
            if not verdict.passed:
                detail = verdict.detail or "not checked"
                warnings.append(f"{name}: correctness failed ({detail}): no speed shown.")
        if valid:
            warnings.extend(m.spread_warnings)
            if c is not None and not c.checked:
                warnings.append(f"{c.detail}: these timings are of an unverified output.")
        elif c is not None:
            warnings.append(f"correctness failed ({c.detail}): the timings are no result.")
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
            measurements=measurements,
            correctness=c,
            rates=_rates(m.work, None, []) if m.work is not None else None,
            environment=environment,
            warnings=warnings,
            valid=valid,
            harness_seconds=harness_s,
            kernel_resources=m.kernel_resources,
            extra=extra,
            placement=m.placement,
            scaling=_checked_series(m.scaling),
            profile=m.profile,
            sweep=m.sweep,
            source=m.source,
            pipeline=m.pipeline,
            target=m.target,
        )
        if not valid:
            return _strip(run)
        if m.work is not None:
            run.rates = _rates(m.work, m.rate_basis, run.measurements)
        if m.comparison and m.work is not None:
            run.extra["comparison"] = _comparison(run.measurements, m.work)
        return run


def regroup(run: RunResult, group: GroupReport) -> RunResult:
    """`run` with a multi-process group's report, gated again: a group whose processes
    did not all compute the same, correct output publishes no speed."""
    run = run.model_copy(update={"group": group})
    if group.agreed:
        return _strip(run) if not run.valid else run
    run.warnings = [
        *run.warnings,
        "the processes of the group did not all compute the same, correct output: "
        + "; ".join(
            f"process {g.process_id}: {g.message or ('passed' if g.passed else 'failed')}"
            for g in group.members
        ),
    ]
    run.valid = False
    return _strip(run)


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


def _withhold(m: Measurement) -> Measurement:
    return m.model_copy(update={"stats": None, "samples_s": [], "note": WITHHELD})


def _withhold_point(p: ScalingPoint, why: str) -> ScalingPoint:
    return p.model_copy(
        update={"samples_s": [], "median_s": None, "slowest_device_s": None, "note": why}
    )


def _checked_series(series: ScalingSeries | None) -> ScalingSeries | None:
    """The series with the times of every point whose own check failed withheld."""
    if series is None:
        return None
    points = [
        p if p.correct is not False else _withhold_point(p, f"withheld: {p.note or 'failed'}")
        for p in series.points
    ]
    return series.model_copy(update={"points": points})


def _strip(run: RunResult) -> RunResult:
    """`run` without a single speed-bearing field; its stage times and counts stay."""
    rates = run.rates
    if rates is not None:
        rates = Rates(flops=rates.flops, bytes=rates.bytes, source=rates.source)
    extra = {k: v for k, v in run.extra.items() if k != "comparison"}
    update: dict[str, Any] = {
        "measurements": [_withhold(m) for m in run.measurements],
        "rates": rates,
        "stage_seconds": run.stage_seconds.model_copy(update={"warm_up": None}),
        "extra": extra,
        "profile": None,
    }
    if run.sweep is not None:
        policies = [
            p.model_copy(
                update={"first_pass_s": None, "steady_pass_s": None, "steady_call_s": None}
            )
            for p in run.sweep.policies
        ]
        update["sweep"] = run.sweep.model_copy(update={"policies": policies})
    if run.scaling is not None:
        points = [_withhold_point(p, WITHHELD) for p in run.scaling.points]
        update["scaling"] = run.scaling.model_copy(update={"points": points})
    if run.group is not None:
        members = [g.model_copy(update={"median_s": None}) for g in run.group.members]
        update["group"] = run.group.model_copy(update={"members": members})
    if run.profile is not None:
        run.warnings.append("profile: the trace of a run whose timings are withheld is dropped.")
    return run.model_copy(update=update)


def _basis_median(measurements: list[Measurement], basis: RateBasis) -> float | None:
    """The median per call of the basis measurement, if it has one."""
    for m in measurements:
        if m.boundary is basis.boundary and m.subject == basis.subject and m.stats is not None:
            return m.stats.median if m.stats.median > 0 else None
    return None


def _rates(work: Work, basis: RateBasis | None, measurements: list[Measurement]) -> Rates:
    rates = Rates(flops=work.flops, bytes=work.bytes, source=work.source)
    median = _basis_median(measurements, basis) if basis is not None else None
    if basis is None or median is None:
        return rates
    seconds = median * basis.calls
    rates.boundary = basis.boundary
    rates.flops_per_s = work.flops / seconds if work.flops > 0 else None
    rates.bytes_per_s = work.bytes / seconds if work.bytes > 0 else None
    return rates


def _comparison(measurements: list[Measurement], work: Work) -> list[dict[str, Any]]:
    """Each subject's median per boundary with its rates, and how it compares with the
    kernel's under the same boundary (never across boundaries)."""
    kernel = {m.boundary: m.stats.median for m in measurements if m.subject == "kernel" and m.stats}
    rows = []
    for m in measurements:
        if m.stats is None or m.stats.median <= 0:
            continue
        median = m.stats.median
        ours = kernel.get(m.boundary)
        rows.append(
            {
                "subject": m.subject,
                "boundary": m.boundary.value,
                "median_s": median,
                "rounds": m.stats.rounds,
                "flops_per_s": work.flops / median if work.flops > 0 else None,
                "bytes_per_s": work.bytes / median if work.bytes > 0 else None,
                "speedup_over_kernel": ours / median if ours else None,
            }
        )
    return rows


def _harness_seconds(m: Measured) -> float:
    """The runner's time outside every interval the run reports (stages and samples)."""
    st = m.stage_seconds
    reported = sum(s for s in (st.trace, st.lower, st.compile, st.warm_up) if s is not None)
    for x in m.measurements:
        reported += sum(x.samples_s) * x.calls_per_sample
    return max(0.0, time.perf_counter() - m.started - reported)
