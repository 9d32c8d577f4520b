"""The JAX path's compile stage: a job's program traced, lowered and compiled under the
job's cache policy, each stage timed alone, with the IR and HLO summary it produced (and
XLA's pass pipeline when the job asks). A `Program` is compiled and ready to execute
(`workers.run.execute`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import WorkloadParams
from workers.catalog.kernels import KernelChoice
from workers.compiler.compile_cache import (
    apply_cache_policy,
    cache_counts,
    default_cache_dir,
    events_between,
)
from workers.compiler.memory_dump import (
    KEPT_AS_ASKED,
    Plan,
    dump_folder,
    dump_options,
    plan_again,
    read_plan,
    report_of,
)
from workers.compiler.options import compile_options
from workers.compiler.pipeline import capture_pipeline, max_bytes_from_env
from workers.compiler.precision import program_arithmetic
from workers.compiler.source_tags import tag_sources
from workers.measure.publish import Work
from workers.pallas.lowering import claim_architecture, lowering_for
from workers.protocol import (
    Artifacts,
    CacheEvents,
    CachePolicy,
    HloSummary,
    JobSpec,
    MemoryReport,
    PipelineCapture,
    StageSeconds,
)
from workers.protocol.hlo_summary import compiled_costs, summarize_hlo
from workers.run.base import Emit
from workers.run.stages import placed_inputs, trace_and_lower
from workers.scale.prepare import Prepared
from workers.scale.prepare import prepare as prepare_scale
from workers.workloads import JaxFunction, get_workload
from workers.workloads.base import Workload, function_for
from workers.xla_targets.kernel_ir import KernelIr, kernel_ir

_JITTED: OrderedDict[tuple[str, str, KernelChoice | None], Any] = OrderedDict()
_MAX_JITTED = 32


def _jitted(workload: str, params: WorkloadParams, choice: KernelChoice | None) -> Any:
    """The jitted function of a workload, kept so the `warm` policy can reuse its caches
    (by the parameters' JSON: an exported function's input rules are a dict)."""
    key = (workload, params.model_dump_json(), choice)
    found = _JITTED.get(key)
    if found is None:
        function: JaxFunction = function_for(get_workload(workload), params, choice)
        found = _JITTED[key] = jax.jit(function)
    _JITTED.move_to_end(key)
    while len(_JITTED) > _MAX_JITTED:
        _JITTED.popitem(last=False)
    return found


@dataclass
class Program:
    """The job's program, traced, lowered and compiled, with what the stages produced."""

    compiled: Any
    scaled: Prepared | None
    stage_seconds: StageSeconds
    cache_events: CacheEvents | None
    artifacts: Artifacts
    summary: HloSummary | None
    artifacts_s: float
    """Untimed: printing the IR and summarizing the optimized HLO."""
    pipeline: PipelineCapture | None = None
    kernels: KernelIr = field(default_factory=KernelIr)
    """The Pallas kernels' own IR, decoded from the lowered program."""
    shardings: list[Any] | None = None
    """How each input is placed when not all on one device (an exported function spread
    over the devices it was exported for); None otherwise."""
    memory_report: MemoryReport | None = None
    """The compiler's buffer assignment for one device (`workers.compiler.memory_dump`)."""
    arithmetic: Arithmetic | None = None
    """What the devices run the program's float32 products at, read from the program
    (`workers.compiler.precision`): what its correctness check allows for."""


def timed_compile(lowered: Any, job: JobSpec) -> tuple[Any, float, Plan]:
    """`lowered.compile()` with the job's options, timed alone, and the memory plan. Under
    the cold policy nothing can come from a cache, so the timed compile writes the dump
    (its few percent are said beside the report); under the others the timed compile
    stays as the policy has it (a dump folder in its options would change the cache key
    and defeat `warm`), and one more compile, untimed, writes the dump."""
    if job.measure.cache is not CachePolicy.COLD:
        t0 = time.perf_counter()
        compiled = lowered.compile(compiler_options=compile_options(job))
        seconds = time.perf_counter() - t0
        return compiled, seconds, plan_again(lowered, compile_options(job), KEPT_AS_ASKED)
    with dump_folder() as folder:
        t0 = time.perf_counter()
        compiled = lowered.compile(compiler_options=compile_options(job, dump_options(folder)))
        seconds = time.perf_counter() - t0
        plan = read_plan(folder)
    if plan.dump is None:
        plan = plan_again(lowered, compile_options(job))
    return compiled, seconds, plan


def compile_program(
    job: JobSpec,
    workload: Workload[Any],
    params: WorkloadParams,
    devices: list[Any],
    *,
    cache_dir: Path | None,
    emit: Emit,
    choice: KernelChoice | None = None,
) -> Program:
    """Trace, lower and compile under the job's cache policy, each stage timed alone;
    `choice` is the kernel the job asked for (XLA's when None)."""
    clock = time.perf_counter
    apply_cache_policy(job.measure.cache, cache_dir or default_cache_dir())
    scaled = prepare_scale(workload, params, devices, choice)  # None unless a scale workload
    shardings = None
    if scaled is None:
        jitted = _jitted(job.workload, params, choice)
        abstract, shardings = placed_inputs(workload, params, devices)
    else:
        jitted, abstract = scaled.jitted, scaled.abstract
    before = cache_counts()
    with lowering_for(choice, scaled.mesh if scaled is not None else None, devices[0]):
        staged = trace_and_lower(jitted, abstract, emit)
    # An uploaded program's ops are tagged before compiling (untimed), so that its HLO can
    # name the user's lines (workers.compiler.source_tags); its StableHLO is printed first.
    tagged = tag_sources(workload, staged.lowered, params)
    compiled, compile_s, plan = timed_compile(staged.lowered, job)
    claim_architecture(choice)
    cache_events = events_between(before, cache_counts())
    emit("compiled")
    t0 = clock()
    hlo = tagged.hlo_of(compiled)
    # Source positions on: the jaxpr's `# file:line` notes and StableHLO's loc(...) let the
    # page link each line to the source line it came from (the view folds them).
    artifacts = Artifacts(
        jaxpr=staged.traced.jaxpr.pretty_print(source_info=True),
        stablehlo=tagged.stablehlo or staged.lowered.as_text(debug_info=True),
        hlo=hlo,
    )
    summary = summarize_hlo(hlo) if hlo else None
    kernels = kernel_ir(staged.lowered) if choice is not None and choice.pallas else KernelIr()
    platform = str(getattr(devices[0], "platform", "cpu"))
    memory = report_of(plan, hlo, vmem=platform == "tpu")
    artifacts_s = clock() - t0 + tagged.seconds + plan.seconds
    pipeline = None
    if job.measure.pipeline:  # a second compile, after the timed one: the dump costs no time
        pipeline = capture_pipeline(staged.lowered, max_bytes_from_env(), job.compiler_options)
        emit("compiled", message="pass pipeline captured")
    return Program(
        compiled=compiled,
        scaled=scaled,
        stage_seconds=StageSeconds(trace=staged.trace_s, lower=staged.lower_s, compile=compile_s),
        cache_events=cache_events,
        artifacts=artifacts,
        summary=summary,
        artifacts_s=artifacts_s,
        pipeline=pipeline,
        kernels=kernels,
        shardings=shardings,
        memory_report=memory,
        arithmetic=program_arithmetic(staged.lowered, platform),
    )


def work_of(workload: Workload[Any], params: WorkloadParams, compiled: Any) -> Work:
    """The work one call does: analytic counts, or XLA's where the workload has none."""
    moved = workload.byte_count(params)
    if getattr(workload, "counts_from_xla", False):
        cost = compiled_costs(compiled) if compiled is not None else None  # None: refused
        flops = cost.flops if cost is not None and cost.flops is not None else 0.0
        return Work(flops, moved, "FLOPs from XLA's cost analysis; bytes: arguments + results")
    return Work(workload.flop_count(params), moved)
