"""How `boundary run` prints a run: one JSON document, one artifact, or the readable
report, a run result rendered as plain text; and the exit status that goes with it.

Every number in the report carries its unit, its boundary and its sample count; an
invalid run shows why it failed and no speed at all.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from workers.catalog.kernel_words import kernel_phrase
from workers.protocol import (
    Environment,
    HloSummary,
    Measurement,
    PipelineCapture,
    RunResult,
    TargetReport,
    fit_limit,
)
from workers.protocol.memory import platform_of, program_peak

EXIT_OK = 0
EXIT_INVALID_RUN = 1

DISPLAY_BOUNDARY_WIDTH = 16


def seconds(value: float | None) -> str:
    """A duration with a unit that keeps three significant digits readable."""
    if value is None:
        return "n/a"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def quantity(value: float | None, unit: str) -> str:
    """A count with a decimal SI prefix (G = 10^9), e.g. '9.4 GFLOP/s'."""
    if value is None:
        return "n/a"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def byte_size(value: int | float | None) -> str:
    """Bytes in decimal units, saying so (1 MB = 10^6 bytes)."""
    return quantity(None if value is None else float(value), "B")


def _measurement_lines(m: Measurement) -> list[str]:
    label = m.boundary.value.ljust(DISPLAY_BOUNDARY_WIDTH)
    per = (
        f", {m.calls_per_sample} calls per sample, time per call" if m.calls_per_sample > 1 else ""
    )
    if m.stats is None:
        if not m.samples_s:  # withheld by the publish step: nothing to count either
            return [f"  {label}{m.note or 'no samples'}"]
        return [f"  {label}{len(m.samples_s)} samples{per}: {m.note or 'no statistics'}"]
    s = m.stats
    lines = [
        f"  {label}median {seconds(s.median)}  IQR {seconds(s.q1)} – {seconds(s.q3)}  "
        f"min {seconds(s.min)}  max {seconds(s.max)}",
        f"  {'':{DISPLAY_BOUNDARY_WIDTH}}mean {seconds(s.mean)} ± {seconds(s.stddev)}  "
        f"rounds {s.rounds}{per}  outliers {s.outliers}"
        + ("  (wide spread)" if s.wide_spread else ""),
    ]
    if m.stopped_because:
        lines.append(f"  {'':{DISPLAY_BOUNDARY_WIDTH}}stopped: {m.stopped_because}")
    if m.warmup_discarded:
        lines.append(
            f"  {'':{DISPLAY_BOUNDARY_WIDTH}}warm-up: {m.warmup_discarded} leading samples "
            "discarded while the timings settled"
        )
    if m.shape:
        lines.append(
            f"  {'':{DISPLAY_BOUNDARY_WIDTH}}shape: {m.shape} (the median alone misleads; "
            "see the samples)"
        )
    if m.note:
        lines.append(f"  {'':{DISPLAY_BOUNDARY_WIDTH}}note: {m.note}")
    return lines


def _hlo_lines(summary: HloSummary) -> list[str]:
    fusions = len(summary.fusions)
    lines = [
        f"  {summary.instructions} top-level instructions; {fusions} "
        f"fusion{'' if fusions == 1 else 's'}; copies {summary.copies}, "
        f"transposes {summary.transposes}"
    ]
    if summary.libraries:
        lines.append(f"  libraries: {', '.join(summary.libraries)}")
    for fusion in summary.fusions[:12]:
        kind = fusion.kind + (f" {fusion.backend_kind}" if fusion.backend_kind else "")
        library = f" → {fusion.library}" if fusion.library else ""
        ops = ", ".join(fusion.ops[:10]) + (" …" if len(fusion.ops) > 10 else "")
        lines.append(f"  fusion {fusion.name} ({kind}{library})" + (f": {ops}" if ops else ""))
    if len(summary.fusions) > 12:
        lines.append(f"  … and {len(summary.fusions) - 12} more fusions")
    for call in summary.custom_calls:
        library = f" → {call.library}" if call.library else ""
        lines.append(f"  custom call {call.target}{library}: {call.shape}")
    for c in summary.collectives:
        lines.append(f"  collective {c.kind} {c.shape} ({byte_size(c.bytes)})")
    return lines


def target_lines(target: TargetReport) -> list[str]:
    """What the run was compiled for and, from the compiler's figures, whether it fits."""
    how = "compiled without the hardware" if target.deviceless else "run on it"
    version = f" {target.compiler_version}" if target.compiler_version else ""
    lines = [f"target    {target.id}: {how}, by {target.compiler}{version}"]
    memory = target.memory
    if memory is not None and memory.peak_bytes is not None:
        needed = memory.peak_bytes + (memory.generated_code_bytes or 0)
        least = "at least " if target.refused else ""
        limit, usable = fit_limit(memory.model_dump())
        over = needed - limit
        verdict = f"does not fit by {byte_size(over)}" if over > 0 else "fits"
        held = f"{byte_size(limit)} usable ({limit:,} bytes)" if usable else byte_size(limit)
        lines.append(
            f"memory    {verdict}: one device needs {least}{byte_size(needed)} of {held}; "
            f"published {memory.hbm_label} ({memory.hbm_bytes:,} bytes a device)"
        )
        if usable and memory.usable_source:
            lines.append(f"          usable: {memory.usable_source}")
    return lines


def _heading_lines(run: RunResult) -> list[str]:
    """What ran (workload, path, parameters), whether it is invalid, and its kernel."""
    job = run.job
    params = " ".join(f"{k}={v}" for k, v in run.params.items() if v not in (None, ""))
    phrase = kernel_phrase(job.workload, job.path.value, run.params, run.extra)
    return [
        f"{job.workload} on {job.path.value}  {params}",
        *(
            ["INVALID RUN: the output failed the correctness check; no speed is shown."]
            if not run.valid
            else []
        ),
        *([f"kernel    {phrase}"] if phrase is not None else []),
    ]


def _device_line(run: RunResult) -> str:
    """The devices it ran on, or none when the host only compiled for a target."""
    env = run.environment
    if run.target is not None and run.target.deviceless:  # the host's CPU only compiled
        return (
            f"device    none: compiled for {run.target.id} without the hardware; "
            f"jax {env.jax_version}, jaxlib {env.jaxlib_version}"
        )
    return (
        f"device    {env.platform} ×{env.device_count} ({env.device_kind}); "
        f"jax {env.jax_version}, jaxlib {env.jaxlib_version}, "
        f"backend {env.backend_platform_version or 'n/a'}"
    )


def _cache_line(env: Environment) -> str:
    """The cache policy, with the persistent cache's hits and misses when it saw any."""
    events = env.cache_events
    if events is None or not (events.hits or events.misses):
        return f"cache     {env.cache.value}"
    saved = (
        f", compile time saved {seconds(events.time_saved_s)}"
        if events.time_saved_s is not None
        else ""
    )
    return (
        f"cache     {env.cache.value} (persistent cache: {events.hits} hits, "
        f"{events.misses} misses{saved})"
    )


def _environment_lines(run: RunResult) -> list[str]:
    """Device, host, settings, cache and the environment's other facts."""
    env = run.environment
    return [
        _device_line(run),
        f"host      {env.host_cpu or 'unknown CPU'}; {env.hostname}; {env.timestamp}",
        f"settings  {env.precision}; x64 {'on' if env.x64 else 'off'}; "
        f"XLA_FLAGS {env.xla_flags or '(none)'}",
        _cache_line(env),
        *(f"          {key}: {value}" for key, value in env.extra.items()),
    ]


def _stage_lines(run: RunResult) -> list[str]:
    """The inputs, each stage's time and, when it executed, every measurement."""
    job, st = run.job, run.stage_seconds
    inputs = ", ".join(f"{i.name} {i.dtype}{i.shape}" for i in run.inputs)
    executed = (
        [
            f"execute   mode {job.measure.mode.value}; warm-up of {job.measure.warmup} call(s) "
            f"took {seconds(st.warm_up)}, first call included, and is not counted",
            *(line for m in run.measurements for line in _measurement_lines(m)),
        ]
        if run.measurements
        else []
    )
    return [
        f"inputs    {inputs}",
        f"stages    trace {seconds(st.trace)} · lower {seconds(st.lower)} · "
        f"compile {seconds(st.compile)}  (each timed alone, cache {run.environment.cache.value})",
        *executed,
    ]


def _correctness_lines(run: RunResult) -> list[str]:
    """The correctness verdict, or why the output went unchecked."""
    c = run.correctness
    if c is None:
        return []
    if not c.checked:
        why = (c.detail or "").removeprefix("output unchecked").lstrip(": ")
        return [f"correct   UNCHECKED: {why or 'nothing to check it against'}"]
    verdict = "passed" if c.passed else "FAILED"
    error = f"{c.error:.3g}" if c.error is not None else "not finite"
    # As the run page words it: a reference that names itself is not called one again.
    reference = c.reference if "reference" in c.reference else f"{c.reference} reference"
    lines = [
        f"correct   {verdict}: relative error {error}, tolerance {c.tolerance:.3g} "
        f"({reference})" + (f"; {c.detail}" if c.detail else "")
    ]
    if c.arithmetic_words:
        lines.append(f"          checked at the device's arithmetic: {c.arithmetic_words}")
    return lines


def _rate_lines(run: RunResult) -> list[str]:
    """The rates at the median, or the work alone when nothing was timed."""
    r = run.rates
    if r is None:
        return []
    if r.boundary is None:  # nothing timed: the work alone, never a line of rates without one
        work = f"{quantity(r.flops, 'FLOP')}, {byte_size(r.bytes)} moved"
        return [f"work      {work} ({r.source}); nothing was timed, so no rate"]
    counts = (
        f"analytic work {quantity(r.flops, 'FLOP')}, {byte_size(r.bytes)} moved"
        if r.source == "analytic"
        else f"{quantity(r.flops, 'FLOP')}, {byte_size(r.bytes)}: {r.source}"
    )
    achieved = f"{quantity(r.flops_per_s, 'FLOP/s')}, {quantity(r.bytes_per_s, 'B/s')}"
    return [f"rates     {achieved} at the {r.boundary.value} median ({counts})"]


def _xla_lines(run: RunResult) -> list[str]:
    """XLA's own cost and memory analysis, when it gave any."""
    ca, ma = run.cost_analysis, run.memory_analysis
    cost = (
        [f"cost {quantity(ca.flops, 'FLOP')}, {byte_size(ca.bytes_accessed)} accessed"]
        if ca is not None and (ca.flops is not None or ca.bytes_accessed is not None)
        else []
    )
    peak = (
        program_peak(platform_of(run.job.path.value), peak=ma.peak_bytes, temp=ma.temp_bytes)
        if ma is not None
        else None
    )
    memory = (
        [
            f"memory arguments {byte_size(ma.argument_bytes)}, output "
            f"{byte_size(ma.output_bytes)}, temp {byte_size(ma.temp_bytes)}, "
            f"peak {byte_size(peak)}"
        ]
        if ma is not None
        else []
    )
    odd = (
        [
            "peak below temp: temp is the block that holds the temporaries as reserved, "
            "the peak counts those live at once, not the gaps between them (the memory "
            "report has both)"
        ]
        if ma is not None and peak is not None and (ma.temp_bytes or 0) > peak
        else []
    )
    xla = [*cost, *memory, *odd]
    return [f"XLA       {'; '.join(xla)}"] if xla else []


def _closing_lines(run: RunResult) -> list[str]:
    """The target, the HLO summary, the harness's own time and the warnings."""
    return [
        *(target_lines(run.target) if run.target is not None else []),
        *(["HLO", *_hlo_lines(run.hlo_summary)] if run.hlo_summary is not None else []),
        *(
            [f"harness   {seconds(run.harness_seconds)} outside the reported intervals"]
            if run.harness_seconds is not None
            else []
        ),
        *(["warnings", *(f"  - {w}" for w in run.warnings)] if run.warnings else []),
    ]


def format_report(run: RunResult) -> str:
    """The whole run as text: job, environment, stages, samples, correctness, HLO."""
    return "\n".join(
        [
            *_heading_lines(run),
            *_environment_lines(run),
            *_stage_lines(run),
            *_correctness_lines(run),
            *_rate_lines(run),
            *_xla_lines(run),
            *_closing_lines(run),
        ]
    )


def print_result(result: RunResult, as_json: bool, ir: str | None) -> int:
    """Print a run as JSON, one artifact or the readable report; return the exit status."""
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    elif ir is not None:
        text = getattr(result.artifacts, ir)
        if text is None:
            print(
                f"no {ir} artifact: path {result.job.path.value} does not produce one",
                file=sys.stderr,
            )
            return EXIT_INVALID_RUN
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        print(format_report(result))
        trace = result.profile
        if trace is not None and trace.data_b64:
            # The readable report cannot carry the archive: keep it beside the user.
            target = Path(f"{result.job.workload}-{trace.sha256[:12]}.profile.tar.gz")
            target.write_bytes(base64.b64decode(trace.data_b64))
            print(f"profile   {trace.covers}; written to {target} (open in XProf or Perfetto)")
        line = pipeline_line(result.pipeline)
        if line is not None:
            print(line)
    return EXIT_OK if result.valid else EXIT_INVALID_RUN


def pipeline_line(pipeline: PipelineCapture | None) -> str | None:
    """The report's line on the pass pipeline. A GPU target's compile keeps XLA's fusion
    report and launch order without --pipeline: that is named as such, never as a
    pipeline of "0 dumped steps" nobody asked for."""
    if pipeline is None:
        return None
    if not pipeline.steps:
        if pipeline.cut:
            return f"pipeline  none: {pipeline.cut}"
        if pipeline.files:
            return (
                f"compiler  reports {', '.join(sorted(pipeline.files))} (in --json: pipeline.files)"
            )
        return None
    changed = len({s.snapshot for s in pipeline.steps})
    note = f"; {pipeline.cut}" if pipeline.cut else ""
    return (
        f"pipeline  {len(pipeline.steps)} dumped steps, {changed} distinct modules, "
        f"{pipeline.bytes:,} bytes{note} (the run page shows them)"
    )
