"""The figures the server works out itself for a run (`workers.catalog.published`): the
job's parameters as the catalog parses them, the work counts of its rates, its verdict
against the catalog's tolerance, a sweep's figures and a scaling series' verdicts.
Pydantic and the catalog only, no jax."""

from __future__ import annotations

import statistics
from typing import Any

from workers.catalog import CatalogError, parse_params
from workers.catalog.base import WorkloadParams
from workers.catalog.exported import ExportedParams
from workers.catalog.mesh import MeshParams, SeriesMode
from workers.catalog.server_correctness import checked_error, server_correctness
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.target_rules import apply_target
from workers.protocol import (
    NEVER_A_SPEED,
    Correctness,
    JobSpec,
    Measurement,
    Mode,
    PathId,
    Rates,
    RunResult,
    StageId,
)
from workers.protocol.gate import executes, runs_anything
from workers.protocol.jobs import main_boundary
from workers.protocol.published_bounds import seconds, words
from workers.protocol.speeds import CUBLAS_SUBJECT, JAX_SUBJECT, KERNEL_SUBJECT

NO_BYTE_CAP = 2**62
"""Parameters are parsed here only for their formulas; the byte cap held at admission."""

ANALYTIC = "analytic"
COMPILERS_COUNT = "the compiler's count (XLA cost analysis, per device)"
"""`rates.source` of an uploaded program: FLOPs and bytes as XLA's cost analysis counts
them for one device, never a measurement."""


def job_params(job: JobSpec) -> WorkloadParams | None:
    """The job's parameters as the catalog parses them (its target's defaults applied),
    or None when the catalog cannot (an unknown workload: nothing is recomputed from it)."""
    try:
        return parse_params(job.workload, apply_target(job).params, NO_BYTE_CAP)
    except (CatalogError, ValueError):
        return None


def interpreted(job: JobSpec) -> bool:
    """Whether the job runs a Pallas kernel in interpret mode (kernel=pallas on jax-cpu):
    checked on the CPU, never a kernel's speed. The job says so; no worker is asked."""
    return job.path is PathId.JAX_CPU and str(job.params.get("kernel", "")) == "pallas"


def deviceless(job: JobSpec) -> bool:
    """A job compiled for a target and not run: always a cold compile on the host."""
    return job.target is not None and not runs_anything(job.stages)


def subjects_of(job: JobSpec, params: WorkloadParams | None) -> set[str | None]:
    """The subjects a run of `job` may time: a jax-path run its own program (a sweep: each
    bucketing policy), a cuda run its kernel, cuBLAS beside a matmul, and JAX."""
    if job.path is PathId.CUDA:
        library = {CUBLAS_SUBJECT} if job.workload == "matmul" else set()
        return {KERNEL_SUBJECT, JAX_SUBJECT, *library}
    if isinstance(params, ShapeSweepParams):
        return {f"bucketing {p}" for p in params.policies()}
    return {None}


def subject_problems(run: RunResult, params: WorkloadParams | None) -> list[tuple[str, str]]:
    """(field, message) for each measurement under a subject its job has none of, or under
    a boundary and subject another measurement already holds; for each sweep policy the
    job did not run (or ran twice); for each scaling point outside its job's series."""
    allowed = subjects_of(run.job, params)
    problems: list[tuple[str, str]] = []
    seen: set[tuple[str, str | None]] = set()
    for i, m in enumerate(run.measurements):
        at = f"result.measurements[{i}]"
        if m.subject not in allowed:
            problems.append((f"{at}.subject", f"{str(m.subject)[:40]!r} is no subject of this job"))
        if (m.boundary.value, m.subject) in seen:
            problems.append((f"{at}.boundary", "a second measurement of this boundary and subject"))
        seen.add((m.boundary.value, m.subject))
    if run.sweep is not None and isinstance(params, ShapeSweepParams):
        names = [p.policy for p in run.sweep.policies]
        if sorted(names) != sorted(params.policies()):
            wanted = ", ".join(params.policies())
            problems.append(("result.sweep.policies", f"the job runs {wanted}, once each"))
    return problems + _scaling_problems(run, params)


def _scaling_problems(run: RunResult, params: WorkloadParams | None) -> list[tuple[str, str]]:
    """A scaling series only on a job with the scale stage, one point per device count and
    mode, each at most the job's device count."""
    if run.scaling is None:
        return []
    if StageId.SCALE not in run.job.stages or params is None:
        return [("result.scaling", "this job has no scale stage")]
    most = params.devices()
    problems: list[tuple[str, str]] = []
    seen: set[tuple[int, str]] = set()
    for i, p in enumerate(run.scaling.points):
        at = f"result.scaling.points[{i}]"
        if not 1 <= p.devices <= most:
            problems.append((f"{at}.devices", f"{p.devices}: the job's series spans 1 to {most}"))
        if (p.devices, p.mode) in seen:
            problems.append((f"{at}.devices", "a second point of this device count and mode"))
        seen.add((p.devices, p.mode))
    return problems


def calls_per_sample(job: JobSpec, params: WorkloadParams | None) -> int:
    """How many calls one sample spans, from the job: a sweep's sizes, throughput's K."""
    if isinstance(params, ShapeSweepParams):
        return len(params.sizes())
    if job.measure.mode is Mode.THROUGHPUT:
        return job.measure.calls_per_sample
    return 1


# --- rates ------------------------------------------------------------------------------


def _rate_basis(job: JobSpec, params: WorkloadParams | None) -> tuple[Any, str | None, int]:
    """(boundary, subject, calls) the rates are read at, from the job alone."""
    main = main_boundary(job)
    boundary = main if executes(job.stages) and main not in NEVER_A_SPEED else None
    if job.path is PathId.CUDA:
        return boundary, KERNEL_SUBJECT, 1
    if isinstance(params, ShapeSweepParams):
        return boundary, "bucketing none", len(params.sizes())
    return boundary, None, 1


def server_rates(run: RunResult, params: WorkloadParams | None) -> Rates | None:
    """The work counts of one unit of the rates' basis, the server's own: the catalog's
    formulas for a catalog workload, the compiler's cost analysis (so labelled) for an
    uploaded program, none where neither exists. Rates follow from the samples later."""
    boundary, subject, calls = _rate_basis(run.job, params)
    if isinstance(params, ExportedParams):
        cost = run.cost_analysis
        if cost is None or cost.flops is None or cost.bytes_accessed is None:
            return None
        flops, moved, source = cost.flops, cost.bytes_accessed, COMPILERS_COUNT
    elif isinstance(params, ShapeSweepParams):
        flops, moved, source = params.pass_flops(), params.pass_bytes(), ANALYTIC
    elif params is not None:
        f, b = params.flop_count(), params.byte_count()
        if f is None and b is None:
            return None
        flops, moved, source = f or 0.0, b or 0.0, ANALYTIC
    else:
        return None
    return Rates(
        flops=flops, bytes=moved, boundary=boundary, subject=subject, calls=calls, source=source
    )


# --- measurements, sweep, scaling --------------------------------------------------------


def server_measurement(m: Measurement, calls: int) -> Measurement:
    """A measurement's own figures by their rules: the calls a sample spans from the job,
    a shape judged only over 10 samples or more, its sentences without a rate."""
    checked = m.shape_checked and len(m.samples_s) + len(m.warmup_samples_s) >= 10
    return m.model_copy(
        update={
            "calls_per_sample": calls,
            "shape": m.shape if checked else None,
            "shape_checked": (checked or False) if m.shape_checked is not None else None,
            "stopped_because": words(m.stopped_because),
            "note": words(m.note),
        }
    )


def server_baselines(run: RunResult, params: WorkloadParams | None) -> dict[str, Any] | None:
    """The cuda path's baseline verdicts, each judged against the catalog's tolerance;
    a subject the job has none of is dropped (its times then have no verdict)."""
    raw = run.extra.get("baselines")
    if not isinstance(raw, dict):
        return None
    allowed = subjects_of(run.job, params)
    judged: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in allowed:
            continue
        try:
            verdict = Correctness.model_validate(value) if value is not None else None
        except ValueError:
            verdict = None
        judged[name] = (
            server_correctness(verdict, params, None, run.job.path).model_dump(mode="json")
            if verdict
            else None
        )
    return judged


def _median(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def server_sweep(run: RunResult, params: ShapeSweepParams) -> RunResult:
    """A sweep's figures: padding and FLOPs from the catalog, steady times from the
    samples, the first pass kept only when it is no faster than a steady one."""
    if run.sweep is None:
        return run
    calls = len(params.sizes())
    by_subject = {m.subject: m for m in run.measurements}
    policies = []
    for p in run.sweep.policies:
        m = by_subject.get(f"bucketing {p.policy}")
        per_call = _median(m.samples_s) if m is not None else None
        steady = per_call * calls if per_call is not None else None
        first = seconds(p.first_pass_s)
        if first is not None and (steady is None or first < steady):
            first = None  # a first pass compiles every shape: it cannot beat a steady one
        padded, flops, useful, waste = params.policy_figures(p.policy)
        policies.append(
            p.model_copy(
                update={
                    "padded_sizes": padded,
                    "flops": flops,
                    "useful_flops": useful,
                    "padding_waste_pct": waste,
                    "traces": min(max(p.traces, 0), calls),
                    "compilations": max(p.compilations, 0),
                    "compile_s": seconds(p.compile_s),
                    "trace_s": seconds(p.trace_s),
                    "lower_s": seconds(p.lower_s),
                    "first_pass_s": first,
                    "steady_pass_s": steady,
                    "steady_call_s": per_call,
                }
            )
        )
    sizes = list(params.sizes())
    sweep = run.sweep.model_copy(update={"policies": policies, "sizes": sizes})
    return run.model_copy(update={"sweep": sweep})


def point_tolerance(params: WorkloadParams | None, devices: int, mode: str) -> float | None:
    """The catalog's tolerance at one point of a scaling series (its own sizes), or None
    when the catalog cannot build that point."""
    if not isinstance(params, MeshParams):
        return params.tolerance() if params is not None else None
    try:
        return params.scaled(devices, SeriesMode(mode)).tolerance()
    except ValueError:  # MeshError: no such point
        return None


def server_scaling(run: RunResult, params: WorkloadParams | None) -> RunResult:
    """Each scaling point keeps its times only with a finite error within the catalog's
    tolerance at that point; its median is the samples' (the gate works it out)."""
    if run.scaling is None:
        return run
    points = []
    for p in run.scaling.points:
        error = checked_error(p.error)
        tolerance = point_tolerance(params, p.devices, p.mode)
        ok = p.correct is True and error is not None and tolerance is not None
        ok = ok and error is not None and tolerance is not None and error <= tolerance
        points.append(p.model_copy(update={"error": error, "correct": ok}))
    return run.model_copy(update={"scaling": run.scaling.model_copy(update={"points": points})})
