"""What the server works out itself for a run's recomputed fields: from the job it leased
(its parameters as the catalog parses them), the catalog's formulas (work counts,
tolerances, a sweep's padding, a chip's published HBM) and the run's own samples. What the
worker sent there is not read.

Each function is one source, `(value, the model that holds it, facts) → value`, named by the
recomputed rows of `workers.catalog.result_rules.RULES` (most of them work out the whole
object a `scope` names: the rates, the verdict, the sweep). Statistics, rates per second
and medians are the gate's (`workers.protocol.gate`), once the run's validity is known.
Pydantic and the catalog only, no jax.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from workers.catalog import CatalogError, parse_params
from workers.catalog.base import DTYPE_BYTES, WorkloadParams
from workers.catalog.exported import ExportedParams
from workers.catalog.mesh import MeshParams, SeriesMode
from workers.catalog.rule_bounds import chip_of, device_spans, deviceless, steady_pass
from workers.catalog.rule_correctness import checked_error, server_correctness
from workers.catalog.rule_kinds import Facts
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.target_rules import apply_target
from workers.protocol import (
    NEVER_A_SPEED,
    BoundaryId,
    CachePolicy,
    Correctness,
    InputInfo,
    JobSpec,
    Mode,
    PathId,
    Prediction,
    Rates,
    RunResult,
    StageId,
)
from workers.protocol.gate import executes, runs_anything
from workers.protocol.jobs import main_boundary
from workers.protocol.speeds import CUBLAS_SUBJECT, JAX_SUBJECT, KERNEL_SUBJECT
from workers.protocol.targets import TargetError, parse_target

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


def subjects_of(job: JobSpec, params: WorkloadParams | None) -> set[str | None]:
    """The subjects a run of `job` may time: a jax-path run its own program (a sweep: each
    bucketing policy), a cuda run its kernel, cuBLAS beside a matmul, and JAX."""
    if job.path is PathId.CUDA:
        library = {CUBLAS_SUBJECT} if job.workload == "matmul" else set()
        return {KERNEL_SUBJECT, JAX_SUBJECT, *library}
    if isinstance(params, ShapeSweepParams):
        return {f"bucketing {p}" for p in params.policies()}
    return {None}


def calls_per_sample(value: Any, owner: Any, facts: Facts) -> int:
    """How many calls one sample spans, from the job: a sweep's sizes, throughput's K."""
    if isinstance(facts.params, ShapeSweepParams):
        return len(facts.params.sizes())
    if facts.job.measure.mode is Mode.THROUGHPUT:
        return facts.job.measure.calls_per_sample
    return 1


def cache_policy(value: Any, owner: Any, facts: Facts) -> CachePolicy:
    """The job's cache policy: a compile without the hardware is always cold."""
    return CachePolicy.COLD if deviceless(facts) else facts.job.measure.cache


def source_digest(value: Any, source: Any, facts: Facts) -> str:
    """SHA-256 of the source text the run carries."""
    return hashlib.sha256(source.text.encode()).hexdigest()


def inputs(value: list[InputInfo], run: RunResult, facts: Facts) -> list[InputInfo]:
    """A catalog workload's inputs as the worker describes them, kept only when each is no
    larger than what the job places and its floating dtype is the job's own; an upload's
    are its header's (put there by the server before the rules: app.dispatch.results)."""
    params = facts.params
    if params is None or facts.job.workload == "exported":
        return [i for i in value if all(d >= 0 for d in i.shape)]
    dtype = str(getattr(getattr(params, "dtype", None), "value", "") or "")
    most = params.input_bytes()
    for i in value:
        size = DTYPE_BYTES.get(i.dtype, 8) * math.prod(i.shape) if i.shape else 0
        floating = i.dtype.startswith(("float", "bfloat"))
        if min(i.shape, default=0) < 0 or size > most or (floating and dtype and i.dtype != dtype):
            return []
    return value


def correctness(value: Correctness | None, run: RunResult, facts: Facts) -> Correctness | None:
    """The verdict judged at the catalog's tolerance (`server_correctness`)."""
    if value is None:
        return None
    return server_correctness(value, facts.params, facts.result_dtypes, facts.job.path)


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


def rates(value: Rates | None, run: RunResult, facts: Facts) -> Rates | None:
    """The work counts of one unit of the rates' basis, the server's own: the catalog's
    formulas for a catalog workload, the compiler's cost analysis (so labelled) for an
    uploaded program, none where neither exists. Rates follow from the samples (the gate)."""
    params = facts.params
    boundary, subject, calls = _rate_basis(facts.job, params)
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


# --- extra: the cuda path's subjects, the warm-up ------------------------------------------


def baselines(value: Any, extra: Any, facts: Facts) -> dict[str, Any] | None:
    """The cuda path's baseline verdicts, each judged against the catalog's tolerance; a
    subject the job has none of is dropped (its times then have no verdict); none on
    another path."""
    if facts.job.path is not PathId.CUDA or not isinstance(value, dict):
        return None
    allowed = subjects_of(facts.job, facts.params)
    judged: dict[str, Any] = {}
    for name, posted in value.items():
        if name not in allowed:
            continue
        try:
            verdict = Correctness.model_validate(posted) if posted is not None else None
        except ValueError:
            verdict = None
        judged[name] = (
            server_correctness(verdict, facts.params, None, facts.job.path).model_dump(mode="json")
            if verdict
            else None
        )
    return judged


def comparison(value: Any, extra: Any, facts: Facts) -> Any:
    """The cuda path's comparison of its subjects, which the gate works out from their
    samples; none on another path."""
    return value if facts.job.path is PathId.CUDA else None


APPLICATION_WARMED = [BoundaryId.TRANSFER_IN.value, "call", BoundaryId.TRANSFER_OUT.value]
"""What an application-mode run warms up: its transfers are sampled too."""


def warmed(value: Any, extra: Any, facts: Facts) -> dict[str, Any]:
    """The uncounted calls: as many as the job asked for, covering the call and, in
    application mode, the transfers (as `workers.run.execute` warms them)."""
    mode = facts.job.measure.mode
    covers = APPLICATION_WARMED if mode is Mode.APPLICATION else ["call"]
    return {"calls": facts.job.measure.warmup, "covers": list(covers)}


# --- a real chip, a target ------------------------------------------------------------------


def device_time(value: Any, run: RunResult, facts: Facts) -> Any:
    """The profiled pass's account, its calls the device-time samples' count; none without
    device-time samples."""
    spans = device_spans(run)
    if value is None or not spans:
        return None
    return value.model_copy(update={"calls": len(spans)})


def prediction(value: Prediction | None, run: RunResult, facts: Facts) -> Prediction | None:
    """The prediction beside a real chip: for the target the server derives from the
    device kind the worker registered, set against the real compile's peak and temporary
    bytes as the run's own memory analysis states them; none where it derives no target."""
    if value is None or facts.own_target is None:
        return None
    real = run.memory_analysis
    return value.model_copy(
        update={
            "target": facts.own_target,
            "real_peak_bytes": real.peak_bytes if real is not None else None,
            "real_temp_bytes": real.temp_bytes if real is not None else None,
        }
    )


def target(value: Any, run: RunResult, facts: Facts) -> Any:
    """What a run compiled for, as the job names it (or, for a job that names none and ran
    on a chip, that chip's own target): its id, model and device count, whether it ran
    nothing (deviceless), the chip's published HBM from the server's own table and the share
    of what a device may hold that the program needs."""
    named = facts.job.target or facts.own_target
    if value is None or named is None:
        return None
    try:
        parsed = parse_target(named)
    except TargetError:
        return None
    chip = chip_of(facts)
    update: dict[str, Any] = {
        "id": parsed.id,
        "model": parsed.model.value,
        "count": parsed.count,
        "deviceless": not runs_anything(facts.job.stages),  # a job that ran needed the hardware
    }
    memory = value.memory
    if memory is not None and chip is not None:
        hbm = chip.device_hbm_bytes
        peak, code = memory.peak_bytes, memory.generated_code_bytes
        needed = None if peak is None else peak + (code or 0)
        figures = {"hbm_bytes": hbm, "hbm_label": chip.device_hbm_label, "source": chip.source}
        figures["fraction"] = needed / (memory.usable_bytes or hbm) if needed is not None else None
        update["memory"] = memory.model_copy(update=figures)
    return value.model_copy(update=update)


# --- a shape sweep, a scaling series ----------------------------------------------------------


def sweep(value: Any, run: RunResult, facts: Facts) -> Any:
    """A sweep's figures (a shape-sweep job's alone): its sizes, each policy's padding and
    FLOPs from the catalog, its steady times from the samples."""
    params = facts.params
    if value is None or facts.job.workload != "shape-sweep":
        return None
    if not isinstance(params, ShapeSweepParams):
        return value
    calls = len(params.sizes())
    policies = []
    for p in value.policies:
        steady, per_call = steady_pass(run, p.policy, calls)
        padded, flops, useful, waste = params.policy_figures(p.policy)
        figures = {"padded_sizes": padded, "flops": flops, "useful_flops": useful}
        figures |= {"padding_waste_pct": waste, "steady_pass_s": steady, "steady_call_s": per_call}
        policies.append(p.model_copy(update=figures))
    return value.model_copy(update={"policies": policies, "sizes": list(params.sizes())})


def point_tolerance(params: WorkloadParams | None, devices: int, mode: str) -> float | None:
    """The catalog's tolerance at one point of a scaling series (its own sizes), or None
    when the catalog cannot build that point."""
    if not isinstance(params, MeshParams):
        return params.tolerance() if params is not None else None
    try:
        return params.scaled(devices, SeriesMode(mode)).tolerance()
    except ValueError:  # MeshError: no such point
        return None


def scaling(value: Any, run: RunResult, facts: Facts) -> Any:
    """A scaling series (a job with the scale stage's alone): each point correct only with
    a finite error within the catalog's tolerance at that point."""
    if value is None or StageId.SCALE not in facts.job.stages:
        return None
    points = []
    for p in value.points:
        error = checked_error(p.error)
        tolerance = point_tolerance(facts.params, p.devices, p.mode)
        ok = p.correct is True and error is not None and tolerance is not None
        ok = ok and error is not None and tolerance is not None and error <= tolerance
        points.append(p.model_copy(update={"error": error, "correct": ok}))
    return value.model_copy(update={"points": points})
