"""The server's own numbers: every figure of a run, by its one written rule.

A worker's run result is a claim. Before anything is stored or shown, `published` passes
it through one rule per field (the table is `workers.catalog.result_rules.RULES`, and
docs/design/result-rules.md reads it out):

- **recomputed** from what the server trusts: the job it leased, the catalog's formulas
  (FLOPs, bytes, tolerances, a sweep's padding), the posted samples (statistics, medians,
  rates) and the compiler's own text;
- **bounded**: a figure only the worker can know (a compile time, a compiler's memory
  report) is kept when it is finite, not negative and consistent with the rest, and
  withheld (None, "not reported") otherwise, never replaced by 0;
- **withheld** when the run may not show it: a run that is not valid, that ran nothing,
  or whose times are no kernel's speed (Pallas interpret mode) carries no time, no rate.

The publish step (`workers.measure.publish`) builds every run through this function, the
server passes every posted run through it again (`app.dispatch.results.prepare`) and
every stored run once more when it is read, so a rule added here reaches old runs too.
Pydantic and the catalog only, no jax: both halves import it. Applying it twice changes
nothing.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from workers.catalog import may_go_unchecked
from workers.catalog.base import DTYPE_BYTES, WorkloadParams
from workers.catalog.device_figures import bounded_device_time, bounded_prediction
from workers.catalog.kernels import INTERPRET_WARNING
from workers.catalog.server_correctness import server_correctness
from workers.catalog.server_figures import (
    calls_per_sample,
    deviceless,
    interpreted,
    job_params,
    server_baselines,
    server_measurement,
    server_rates,
    server_scaling,
    server_sweep,
)
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.protocol import (
    ARTIFACT_NAMES,
    CacheEvents,
    CachePolicy,
    CostAnalysis,
    InputInfo,
    MemoryAnalysis,
    MemoryReport,
    PathId,
    PipelineCapture,
    Prediction,
    RunResult,
    StageId,
    StageSeconds,
)
from workers.protocol.gate import gate, runs_anything, strip
from workers.protocol.jobs import main_boundary
from workers.protocol.memory import platform_of, published_report
from workers.protocol.published_bounds import (
    bounded_extra,
    bounded_group,
    bounded_kernel_resources,
    bounded_placement,
    bounded_target,
    count,
    seconds,
    words,
)
from workers.protocol.targets import own_target

NO_SPEED_NOTE = f"withheld: {INTERPRET_WARNING}"
"""What each measurement of a Pallas interpret-mode run says in place of its samples."""

WORKER_INVALID = "the worker marked this run not valid: the timings are no result."

MAX_WARNINGS = 64
MAX_WARNING_CHARS = 2_000


# --- the whole run -------------------------------------------------------------------------


def bounded_figures(run: RunResult, params: WorkloadParams | None) -> RunResult:
    """Every figure only a compiler or the worker's clock can know, kept when finite and
    not negative, withheld (None) otherwise; a TPU target's temporaries, which libtpu
    leaves at 0 without the hardware, read as not reported."""
    st = run.stage_seconds
    memory = run.memory_analysis
    # libtpu leaves the temporaries at 0 when it compiles without the device.
    tpu_target = deviceless(run.job) and run.job.path is PathId.JAX_TPU
    if memory is not None:
        memory = MemoryAnalysis(
            argument_bytes=count(memory.argument_bytes),
            output_bytes=count(memory.output_bytes),
            temp_bytes=None if tpu_target else count(memory.temp_bytes),
            peak_bytes=count(memory.peak_bytes),
            alias_bytes=count(memory.alias_bytes),
        )
    cost = run.cost_analysis
    if cost is not None:
        cost = CostAnalysis(flops=seconds(cost.flops), bytes_accessed=seconds(cost.bytes_accessed))
    source = run.source
    if source is not None:
        digest = hashlib.sha256(source.text.encode()).hexdigest()
        source = source.model_copy(update={"sha256": digest})
    said = [words(w, MAX_WARNING_CHARS) for w in run.warnings[:MAX_WARNINGS]]
    cache = CachePolicy.COLD if deviceless(run.job) else run.job.measure.cache
    return run.model_copy(
        update={
            "stage_seconds": StageSeconds(
                trace=seconds(st.trace),
                lower=seconds(st.lower),
                compile=seconds(st.compile),
                warm_up=seconds(st.warm_up),
            ),
            "memory_analysis": memory,
            "cost_analysis": cost,
            "harness_seconds": seconds(run.harness_seconds),
            "kernel_resources": bounded_kernel_resources(run.kernel_resources),
            "extra": bounded_extra(run.extra, run.job),
            "placement": bounded_placement(run.placement),
            "target": bounded_target(run.target, run.job, _own_target(run)),
            "memory_report": _memory_report(run, memory),
            "artifacts_cut": [
                n for n in ARTIFACT_NAMES if n in run.artifacts_cut and getattr(run.artifacts, n)
            ],
            "group": bounded_group(run.group),
            "source": source,
            "environment": run.environment.model_copy(
                update={"cache": cache, "cache_events": _cache_events(run, cache)}
            ),
            "inputs": _inputs(run, params),
            "warnings": [w for w in said if w is not None],
            "pipeline": _capture(run.pipeline),
            "kernel_pipelines": {k: _capture(p) for k, p in run.kernel_pipelines.items()},
            "sweep": run.sweep if run.job.workload == "shape-sweep" else None,
            "scaling": run.scaling if StageId.SCALE in run.job.stages else None,
        }
    )


def _memory_report(run: RunResult, memory: MemoryAnalysis | None) -> MemoryReport | None:
    """The run's memory report, its peak compared with the compiler's own by the rule of
    the run's platform (`workers.protocol.memory.published_report`)."""
    m = memory or MemoryAnalysis()
    return published_report(
        run.memory_report,
        platform=platform_of(run.job.path.value),
        peak=m.peak_bytes,
        temp=m.temp_bytes,
    )


def _cache_events(run: RunResult, cache: CachePolicy) -> CacheEvents | None:
    """The persistent cache's hits and misses, none negative: only a job under that policy
    can hit it (a cold or warm job bypasses it and reports 0 hits, or nothing)."""
    events = run.environment.cache_events
    if events is None or min(events.hits, events.misses) < 0:
        return None
    if cache is not CachePolicy.PERSISTENT and (events.hits or events.time_saved_s):
        return None
    saved = events.time_saved_s  # may be negative: loading can cost more than compiling
    finite = saved if saved is not None and math.isfinite(saved) else None
    return events.model_copy(update={"time_saved_s": finite})


def _capture(p: PipelineCapture | None) -> PipelineCapture | None:
    return p.model_copy(update={"capture_s": seconds(p.capture_s)}) if p is not None else None


def _inputs(run: RunResult, params: WorkloadParams | None) -> list[InputInfo]:
    """A catalog workload's inputs as the worker describes them, kept only when each is no
    larger than what the job places and its floating dtype is the job's own; an upload's
    are its header's (set by the server before this)."""
    if params is None or run.job.workload == "exported":
        return [i for i in run.inputs if all(d >= 0 for d in i.shape)]
    dtype = str(getattr(getattr(params, "dtype", None), "value", "") or "")
    most = params.input_bytes()
    for i in run.inputs:
        size = DTYPE_BYTES.get(i.dtype, 8) * math.prod(i.shape) if i.shape else 0
        floating = i.dtype.startswith(("float", "bfloat"))
        if min(i.shape, default=0) < 0 or size > most or (floating and dtype and i.dtype != dtype):
            return []
    return run.inputs


def published(
    run: RunResult, *, worker_valid: bool = True, result_dtypes: dict[str, str] | None = None
) -> RunResult:
    """`run` with every figure by its rule (module docstring), through the result gate.

    `worker_valid`: what the worker said of its own run; a run is valid only where the
    worker says so *and* the server's checks pass. `result_dtypes`: an uploaded program's
    result dtypes by result name, from its header, for each result's tolerance."""
    params = job_params(run.job)
    run = bounded_figures(run, params)
    calls = calls_per_sample(run.job, params)
    update: dict[str, Any] = {
        "measurements": [server_measurement(m, calls) for m in run.measurements],
        "rates": server_rates(run, params),
        "device_time": bounded_device_time(run),
        "prediction": _prediction(run),
    }
    if run.correctness is not None:
        update["correctness"] = server_correctness(
            run.correctness, params, result_dtypes, run.job.path
        )
    baselines = server_baselines(run, params)
    if baselines is not None:
        update["extra"] = {**run.extra, "baselines": baselines}
    run = run.model_copy(update=update)
    if isinstance(params, ShapeSweepParams):
        run = server_sweep(run, params)
    run = server_scaling(run, params)
    unchecked = may_go_unchecked(run.job.workload, run.params)
    gated = gate(run, may_be_unchecked=unchecked)
    if gated.valid and not worker_valid:
        warnings = (
            gated.warnings
            if WORKER_INVALID in gated.warnings
            else [*gated.warnings, WORKER_INVALID]
        )
        stripped = strip(gated.model_copy(update={"warnings": warnings}))
        return stripped.model_copy(update={"valid": False})
    if gated.valid and interpreted(run.job):
        return _no_speed(gated)
    return _group_median(gated)


def _own_target(run: RunResult) -> str | None:
    """The target of the real chips a run executed on (by the device kind the worker
    registered); none for a run compiled without the hardware."""
    if deviceless(run.job) or not runs_anything(run.job.stages):
        return None
    env = run.environment
    return own_target(env.device_kind, env.device_count)


def _prediction(run: RunResult) -> Prediction | None:
    """A real chip's prediction, for the target its registered device kind is; none for a
    run compiled without the hardware (it is the prediction itself)."""
    return bounded_prediction(run, _own_target(run))


def _group_median(run: RunResult) -> RunResult:
    """Process 0's median in a group's report is the run's own: its samples are the ones
    the run carries (the others' were withheld as the server has none of theirs)."""
    if run.group is None:
        return run
    main = main_boundary(run.job)
    own = next((m for m in run.measurements if m.boundary is main and m.stats), None)
    median = own.stats.median if own is not None and own.stats is not None else None
    members = [
        m.model_copy(update={"median_s": median if m.process_id == 0 else None})
        for m in run.group.members
    ]
    return run.model_copy(update={"group": run.group.model_copy(update={"members": members})})


def _no_speed(run: RunResult) -> RunResult:
    """A valid interpret-mode run without a single time or rate, its verdict standing."""
    stripped = strip(run, NO_SPEED_NOTE)
    warnings = [INTERPRET_WARNING, *(w for w in stripped.warnings if w != INTERPRET_WARNING)]
    return stripped.model_copy(update={"valid": True, "warnings": warnings})


RUN_SECONDS_SLACK_S = 5.0
"""How much longer than the server held its lease a worker's whole-job time may be (the
two clocks and the result's transfer)."""


def reported_seconds(run: RunResult) -> float:
    """The intervals a run reports, added up: its stages, and every sample (the discarded
    ones too) times the calls it spans. A job's wall time cannot be shorter."""
    st = run.stage_seconds
    total = math.fsum(x for x in (st.trace, st.lower, st.compile, st.warm_up) if x is not None)
    for m in run.measurements:
        total += math.fsum([*m.samples_s, *m.warmup_samples_s]) * m.calls_per_sample
    if run.scaling is not None:
        total += math.fsum(x for p in run.scaling.points for x in p.samples_s)
    return total


def run_seconds(run: RunResult, posted: float | None, held_s: float | None) -> float | None:
    """The whole job's wall time, as the worker timed it (the API's `run_seconds`): kept
    only for a valid run that ran something and whose times are a speed, when it is no
    shorter than the intervals the run reports and no longer than the server held the
    job's lease (`held_s`, None when not known: a stored run read again)."""
    if not run.valid or not runs_anything(run.job.stages) or interpreted(run.job):
        return None
    wall = seconds(posted)
    if wall is None or wall < reported_seconds(run):
        return None
    if held_s is not None and wall > held_s * 1.05 + RUN_SECONDS_SLACK_S:
        return None
    return wall
