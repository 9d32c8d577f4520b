"""The shape sweep: many sizes through ONE jitted function, without and with bucketing.

Each policy gets a fresh function object, cleared in-memory caches and (under the
`persistent` cache policy) its own persistent-cache directory, so nothing one policy
compiled can serve the other. Its first pass sends every size in order and counts
exactly what JAX compiled (jax.monitoring's backend-compile events, checked against the
jitted function's own cache size); later passes, with everything compiled, give the
steady-state time. Padding waste is counted in analytic FLOPs. The two policies sit in
one run, so the retrace-versus-padding trade-off is measured side by side.

Inputs are placed, padded, before any timer starts (host-side padding is not timed);
slicing the real rows out of a padded output happens after the timer stops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jax
import numpy as np

from workers.catalog import CatalogError
from workers.catalog.shape_sweep import ShapeSweepParams, bucket
from workers.compiler.compile_cache import (
    apply_cache_policy,
    cache_counts,
    default_cache_dir,
    events_between,
)
from workers.compiler.environment import detect_environment
from workers.compiler.options import CompileOptions, compile_options
from workers.measure import harness
from workers.measure.correctness import check_output
from workers.measure.publish import Measured, RateBasis, Work
from workers.measure.stats import summarize
from workers.measure.stopping import Stopper, measurement
from workers.protocol import (
    Artifacts,
    BoundaryId,
    Correctness,
    InputInfo,
    JobSpec,
    Measurement,
    Mode,
    ProgressEvent,
    RunResult,
    StageId,
    StageSeconds,
    SweepPolicy,
    SweepResult,
)
from workers.protocol.hlo_summary import summarize_hlo
from workers.run.base import SEED, Progress
from workers.workloads import shape_sweep as op

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"


@dataclass
class _Compiles:
    """Running totals of compile-side events since the listener was registered."""

    count: int = 0
    compile_s: float = 0.0
    trace_s: float = 0.0
    lower_s: float = 0.0


_totals = _Compiles()
_lock = threading.Lock()
_listening: list[bool] = []


def _on_duration(event: str, duration_secs: float, **_: Any) -> None:
    with _lock:
        if event == COMPILE_EVENT:
            _totals.count += 1
            _totals.compile_s += duration_secs
        elif event == TRACE_EVENT:
            _totals.trace_s += duration_secs
        elif event == LOWER_EVENT:
            _totals.lower_s += duration_secs


def compile_totals() -> _Compiles:
    """A copy of the totals; subtract two copies for what happened in between."""
    with _lock:
        if not _listening:  # listeners cannot be removed, so register exactly once
            _listening.append(True)
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
        return _Compiles(_totals.count, _totals.compile_s, _totals.trace_s, _totals.lower_s)


@dataclass
class _PolicyRun:
    """One policy's figures, its steady-state samples and its checked outputs."""

    figures: SweepPolicy
    measurement: Measurement | None = None
    outputs: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class _Sweep:
    """What every policy of one sweep shares."""

    job: JobSpec
    params: ShapeSweepParams
    inputs: dict[int, Any]
    """Host inputs by size, unpadded."""
    w: Any
    device: Any
    cache_dir: Path
    progress: Progress | None


def policy_cache_dir(cache_dir: Path, policy: str) -> Path:
    """The persistent cache one policy uses: its own directory, so that a program one
    policy compiled (the same padded size) can never be loaded by the other."""
    return cache_dir / "shape-sweep" / policy.replace(":", "-")


def _run_policy(policy: str, sweep: _Sweep) -> _PolicyRun:
    job, params, w, device, progress = (
        sweep.job,
        sweep.params,
        sweep.w,
        sweep.device,
        sweep.progress,
    )
    sizes = params.sizes()
    options = job.measure
    padded = [bucket(n, policy) for n in sizes]
    apply_cache_policy(options.cache, policy_cache_dir(sweep.cache_dir, policy))
    jitted = jax.jit(op.function(params), compiler_options=compile_options(job))
    extra = [w] if w is not None else []
    # One placed (padded) input per distinct size: calls of the same size reuse it.
    placed = {
        n: harness.block_all(jax.device_put([op.pad_rows(x, bucket(n, policy)), *extra], device))
        for n, x in sweep.inputs.items()
    }
    execute = StageId.EXECUTE in job.stages
    clock = time.perf_counter
    before = compile_totals()
    t0 = clock()
    if execute:
        for n in sizes:
            jitted(*placed[n]).block_until_ready()
        traces = int(cast(Any, jitted)._cache_size())  # distinct signatures traced
    else:  # compile only: what jit's cache would do, without executing anything
        seen: dict[int, None] = {}
        for n in sizes:
            if bucket(n, policy) not in seen:
                seen[bucket(n, policy)] = None
                jitted.trace(*placed[n]).lower().compile()
        traces = len(seen)
    first_pass_s = clock() - t0
    after = compile_totals()
    if progress is not None:
        progress(ProgressEvent(phase="compiled", message=f"bucketing {policy}"))
    useful = sum(op.flop_count(params, n) for n in sizes)
    executed = sum(op.flop_count(params, m) for m in padded)
    figures = SweepPolicy(
        policy=policy,
        padded_sizes=padded,
        traces=traces,
        compilations=after.count - before.count,
        compile_s=after.compile_s - before.compile_s,
        trace_s=after.trace_s - before.trace_s,
        lower_s=after.lower_s - before.lower_s,
        first_pass_s=first_pass_s,
        flops=executed,
        useful_flops=useful,
        padding_waste_pct=(executed - useful) / useful * 100.0 if useful > 0 else 0.0,
    )
    found = _PolicyRun(figures)
    if execute:
        _steady(found, sweep, placed, jitted)
    return found


def _steady(found: _PolicyRun, sweep: _Sweep, placed: dict[int, list[Any]], jitted: Any) -> None:
    """Passes over every size with everything compiled: each call host-synced, summed."""
    clock = time.perf_counter
    sizes = sweep.params.sizes()
    progress = sweep.progress
    calls = len(sizes)
    passes: list[float] = []
    stopper = Stopper(sweep.job.measure, clock())
    ticker = harness.ProgressTicker(progress, stopper, clock())
    outputs: dict[int, Any] = {}
    while True:
        total = 0.0
        for n in sizes:
            args = placed[n]
            t0 = clock()
            out = jitted(*args)
            out.block_until_ready()
            total += clock() - t0
            outputs[n] = out
        passes.append(total)
        now = clock()
        if stopper.done(passes, now):
            break
        ticker.tick(len(passes), now)
    ticker.finish(len(passes))
    policy = found.figures.policy
    kept_from = stopper.kept_from(len(passes))
    found.measurement = measurement(
        BoundaryId.HOST_SYNC,
        [p / calls for p in passes],
        stopper,
        calls,
        note=(
            f"bucketing {policy}: each sample is one pass over the {calls} sizes, every "
            f"call host-synced, the pass's total divided by {calls}"
        ),
    ).model_copy(update={"subject": f"bucketing {policy}"})
    pass_stats = summarize(passes[kept_from:])
    found.figures.steady_pass_s = pass_stats.median
    found.figures.steady_call_s = pass_stats.median / calls
    found.outputs = [np.asarray(outputs[n])[:n] for n in sizes]


def _check(
    params: ShapeSweepParams,
    runs: list[_PolicyRun],
    inputs: dict[int, Any],
    w: Any,
) -> Correctness:
    """Every policy's outputs (real rows only) against the float64 reference; the worst."""
    sizes = params.sizes()
    reference = np.concatenate([op.reference(params, inputs[n], w).ravel() for n in sizes])
    verdicts: list[Correctness] = []
    for found in runs:
        output = np.concatenate([np.asarray(o, dtype=np.float64).ravel() for o in found.outputs])
        verdict = check_output(output, reference, op.tolerance(params))
        if verdict.detail:
            verdict.detail = f"bucketing {found.figures.policy}: {verdict.detail}"
        verdicts.append(verdict)
    failed = [v for v in verdicts if not v.passed]
    if failed:
        return failed[0]
    return max(verdicts, key=lambda v: v.error if v.error is not None else 0.0)


def run_sweep(
    job: JobSpec,
    params: ShapeSweepParams,
    devices: list[Any],
    progress: Progress | None = None,
    *,
    cache_dir: Path | None = None,
) -> RunResult:
    """Run a `shape-sweep` job on the first of `devices` and return its run."""
    if job.measure.mode is not Mode.LATENCY:
        raise CatalogError(
            "measure.mode: shape-sweep times host-synced passes; ask for mode latency",
            "measure.mode",
        )
    device = devices[0]
    started = time.perf_counter()
    rng = np.random.default_rng(SEED)
    w = op.weight(params, rng)
    sizes = params.sizes()
    inputs = {n: op.make_input(params, n, rng) for n in sorted(set(sizes))}
    cache_before = cache_counts()
    sweep = _Sweep(job, params, inputs, w, device, cache_dir or default_cache_dir(), progress)
    runs = [_run_policy(policy, sweep) for policy in params.policies()]
    cache_events = events_between(cache_before, cache_counts())
    first = runs[0].figures
    artifacts, summary, shown = _artifacts(
        params, runs[-1].figures, inputs, w, device, options=compile_options(job)
    )
    measured = Measured(
        job=job,
        params=params.model_dump(mode="json"),
        environment=detect_environment(device, job.measure.cache, cache_events, devices),
        started=started,
        inputs=[
            InputInfo(name="x", shape=[max(sizes), params.features], dtype=params.dtype.value),
            *(
                [InputInfo(name="w", shape=list(w.shape), dtype=params.dtype.value)]
                if w is not None
                else []
            ),
        ],
        stage_seconds=StageSeconds(
            trace=first.trace_s, lower=first.lower_s, compile=first.compile_s
        ),
        artifacts=artifacts,
        hlo_summary=summary,
        measurements=[r.measurement for r in runs if r.measurement is not None],
        # The counted work is one pass over every size, unpadded; a sample is per call.
        work=Work(first.useful_flops, sum(op.byte_count(params, n) for n in sizes)),
        rate_basis=RateBasis(BoundaryId.HOST_SYNC, f"bucketing {first.policy}", len(sizes)),
        sweep=SweepResult(
            op=params.op.value,
            sizes=sizes,
            policies=[r.figures for r in runs],
            note=(
                "Stage times are the totals over every compilation of the unbucketed policy. "
                f"The IR shown is for size {shown}, the largest under bucketing "
                f"{runs[-1].figures.policy}. Padding happens on the host before the timers start."
            ),
        ),
        extra={"seed": SEED, "sizes_distinct": len(set(sizes))},
    )
    if job.measure.profile:
        measured.warnings.append(
            "profile: shape-sweep does not capture profiler traces; none was taken."
        )
    correctness: Correctness | None = None
    if StageId.EXECUTE in job.stages:
        correctness = _check(params, runs, inputs, w)
        if progress is not None:
            progress(
                ProgressEvent(
                    phase="checked", message="passed" if correctness.passed else correctness.detail
                )
            )
    result = measured.check(correctness).publish()
    if progress is not None:
        progress(ProgressEvent(phase="done"))
    return result


def _artifacts(
    params: ShapeSweepParams,
    figures: SweepPolicy,
    inputs: dict[int, Any],
    w: Any,
    device: Any,
    *,
    options: CompileOptions | None,
) -> tuple[Artifacts, Any, int]:
    """The IR of the largest padded size, compiled after every timed part is over."""
    largest = max(figures.padded_sizes)
    x = np.zeros((largest, params.features), dtype=next(iter(inputs.values())).dtype)
    args = jax.device_put([x, *([w] if w is not None else [])], device)
    traced = jax.jit(op.function(params), compiler_options=options).trace(*args)
    lowered = traced.lower()
    hlo = lowered.compile().as_text()
    artifacts = Artifacts(jaxpr=str(traced.jaxpr), stablehlo=lowered.as_text(), hlo=hlo)
    return artifacts, summarize_hlo(hlo) if hlo else None, largest
