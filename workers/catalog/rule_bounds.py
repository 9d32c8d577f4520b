"""The bounds of the bounded fields: figures only the worker can know (a compiler's report,
its own clock), each kept when it is finite, not negative and consistent with the rest, and
withheld (None: "not reported") otherwise, never replaced by 0. A field that cannot be
missing (a count of bundles, of traces) is brought within its bounds instead.

Each function is one bound, `(value, the model that holds it, facts) → value`, named by the
rows of `workers.catalog.result_rules.RULES` (the `bounded` mechanism of
`workers.catalog.rule_kinds` applies it). Pydantic and the catalog only, no jax.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from workers.catalog.rule_kinds import Facts, words
from workers.catalog.rule_walk import EXTRA_ENTRIES
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.protocol import (
    ARTIFACT_NAMES,
    MAX_DEVICE_OPS,
    BoundaryId,
    CacheEvents,
    CachePolicy,
    DeviceOp,
    MemoryAnalysis,
    MemoryReport,
    PathId,
    RunResult,
)
from workers.protocol.gate import runs_anything
from workers.protocol.memory import platform_of, published_report
from workers.protocol.targets import (
    GPU_USABLE_SOURCE,
    Chip,
    KernelSchedule,
    TargetError,
    gpu_usable_bytes,
    gpu_usable_source,
    parse_target,
)

SHAPE_SAMPLES = 10
"""Samples a measurement needs before its shape (steady, bimodal, drifting) is judged."""


def not_negative(value: Any, owner: Any = None, facts: Facts | None = None) -> Any:
    """A count or a time: kept when it is a finite number not below zero."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    return float(value) if math.isfinite(value) and value >= 0 else None


def at_least_zero(value: int, owner: Any = None, facts: Facts | None = None) -> int:
    """A count that cannot be missing: below zero reads as none."""
    return max(value, 0)


def flag(value: Any, owner: Any = None, facts: Facts | None = None) -> bool | None:
    """A yes or no, kept only as one."""
    return value if isinstance(value, bool) else None


# --- the run as a whole -------------------------------------------------------------------


def deviceless(facts: Facts) -> bool:
    """The job compiled for a target and ran nothing: always a cold compile on the host."""
    return facts.job.target is not None and not runs_anything(facts.job.stages)


def artifacts_cut(value: list[str], run: RunResult, facts: Facts) -> list[str]:
    """The artifacts the worker cut: names of artifacts the run has, each once."""
    return [n for n in ARTIFACT_NAMES if n in value and getattr(run.artifacts, n)]


def analysis_temp(value: int | None, owner: MemoryAnalysis, facts: Facts) -> int | None:
    """memory_analysis()'s temporaries: libtpu leaves them at 0 when it compiles without
    the device, so a TPU target's read as not reported."""
    tpu_target = deviceless(facts) and facts.job.path is PathId.JAX_TPU
    return None if tpu_target else not_negative(value)


def cache_events(value: CacheEvents | None, owner: Any, facts: Facts) -> CacheEvents | None:
    """The persistent cache's hits and misses, none negative: only a job under that policy
    can hit it (a cold or warm job bypasses it and reports 0 hits, or nothing)."""
    cache = CachePolicy.COLD if deviceless(facts) else facts.job.measure.cache
    if value is None or min(value.hits, value.misses) < 0:
        return None
    if cache is not CachePolicy.PERSISTENT and (value.hits or value.time_saved_s):
        return None
    saved = value.time_saved_s  # may be negative: loading can cost more than compiling
    finite = saved if saved is not None and math.isfinite(saved) else None
    return value.model_copy(update={"time_saved_s": finite})


def memory_report(value: MemoryReport | None, run: RunResult, facts: Facts) -> Any:
    """The run's memory report, its peak compared with the compiler's own by the rule of
    the run's platform (the memory report's own rule,
    `workers.protocol.memory.published_report`): both figures, and why, where they differ;
    every figure withheld, with the reason, only where the report does not add up."""
    m = run.memory_analysis or MemoryAnalysis()
    return published_report(
        value, platform=platform_of(facts.job.path.value), peak=m.peak_bytes, temp=m.temp_bytes
    )


# --- measurements ---------------------------------------------------------------------------


def _judged(m: Any) -> bool:
    return bool(m.shape_checked) and len(m.samples_s) + len(m.warmup_samples_s) >= SHAPE_SAMPLES


def shape(value: Any, m: Any, facts: Facts) -> Any:
    """A measurement's shape: kept only where it was judged over SHAPE_SAMPLES or more."""
    return value if _judged(m) else None


def shape_checked(value: bool | None, m: Any, facts: Facts) -> bool | None:
    """Whether the shape was judged: true only with SHAPE_SAMPLES samples or more."""
    return None if value is None else _judged(m)


# --- a real chip's profiled pass ------------------------------------------------------------


def device_spans(run: RunResult) -> list[float]:
    """The device-time samples: the profiled pass's spans, each above 0."""
    found = next((m for m in run.measurements if m.boundary is BoundaryId.DEVICE_TIME), None)
    return [s for s in found.samples_s if not_negative(s)] if found is not None else []


def _spans(facts: Facts) -> list[float]:
    """The run's device spans, read once while its fields are ruled on (samples are
    checked fields: no rule changes them)."""
    if facts.spans is None:
        facts.spans = device_spans(facts.run)
    return facts.spans


def device_ops(value: list[DeviceOp], owner: Any, facts: Facts) -> list[DeviceOp]:
    """The instructions' device times: each median above 0 and no longer than the longest
    span, named in words (a name that states a rate, or none, drops the instruction); the
    MAX_DEVICE_OPS first."""
    longest = max(_spans(facts), default=0.0)
    return [
        op
        for op in value[:MAX_DEVICE_OPS]
        if (median := not_negative(op.median_s)) is not None
        and 0 < median <= longest
        and words(op.name, 200)
    ]


def profiled_calls(value: int, op: Any, facts: Facts) -> int:
    """An instruction's calls: at most the profiled pass's."""
    return min(max(value, 0), len(_spans(facts)))


# --- what a target's compile reports --------------------------------------------------------


def chip_of(facts: Facts) -> Chip | None:
    """The chip the run compiled for: the job's target, else the chip it ran on."""
    named = facts.job.target or facts.own_target
    try:
        return parse_target(named).chip if named is not None else None
    except TargetError:
        return None


def _ran(facts: Facts) -> bool:
    return runs_anything(facts.job.stages)


def target_temp(value: int | None, owner: Any, facts: Facts) -> int | None:
    """A target's temporaries: libtpu leaves them at 0 without the device (it fills them
    in only when it refuses a program: what it named)."""
    chip = chip_of(facts)
    refused = facts.run.target.refused if facts.run.target is not None else None
    blank = chip is not None and chip.platform.value == "tpu" and not _ran(facts)
    return None if blank and refused is None else not_negative(value)


def generated_code(value: int | None, owner: Any, facts: Facts) -> int | None:
    """A target's generated code: XLA:GPU leaves it at 0 without the device."""
    chip = chip_of(facts)
    blank = chip is not None and chip.platform.value == "gpu" and not _ran(facts)
    return None if blank and not value else not_negative(value)


def usable_bytes(value: int | None, owner: Any, facts: Facts) -> int | None:
    """What one device may hold: on a TPU libtpu's reading (only the worker has it), above 0
    and at most twice the published HBM; on a GPU the job's usable_fraction of the HBM, JAX's
    default share without one."""
    chip = chip_of(facts)
    if chip is None:
        return None
    if chip.platform.value != "tpu":
        return gpu_usable_bytes(chip, facts.job.usable_fraction)
    usable = not_negative(value)
    return usable if usable is not None and 0 < usable <= 2 * chip.device_hbm_bytes else None


def usable_source(value: str | None, owner: Any, facts: Facts) -> str | None:
    """Where the usable bytes come from: the worker's sentence beside libtpu's reading (none
    without one), the server's own on a GPU."""
    chip = chip_of(facts)
    if chip is not None and chip.platform.value != "tpu":
        fraction = facts.job.usable_fraction
        return GPU_USABLE_SOURCE if fraction is None else gpu_usable_source(fraction)
    return words(value, 300) if usable_bytes(owner.usable_bytes, owner, facts) else None


def non_empty_bundles(value: int, kernel: KernelSchedule, facts: Facts) -> int:
    """A kernel's non-empty bundles: not negative, at most its bundles."""
    return min(max(value, 0), max(kernel.bundles, 0))


# --- extra: the entries a run may carry ----------------------------------------------------


def known_entries(value: dict[str, Any], run: RunResult, facts: Facts) -> dict[str, Any]:
    """`extra` with its known entries only (`EXTRA_ENTRIES`; each has its own rule)."""
    return {k: v for k, v in value.items() if k in EXTRA_ENTRIES}


def unreported(value: Any, extra: Any, facts: Facts) -> dict[str, float] | None:
    """The harness's own times outside every interval, by name: each finite and not
    negative (the others left out); none unless it is a table of them."""
    if not isinstance(value, dict):
        return None
    parts = {str(k)[:64]: not_negative(v) for k, v in list(value.items())[:32]}
    return {k: v for k, v in parts.items() if v is not None}


def whole(value: Any, extra: Any, facts: Facts) -> int | None:
    """A whole number, not negative (a seed, a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def kernel_record(value: Any, extra: Any, facts: Facts) -> dict[str, Any] | None:
    """A Pallas run's kernel when it has its documented types: the kernel and its compiler
    and GPU as words, every block size a whole number from 1 to 65,536."""
    if not isinstance(value, dict):
        return None
    blocks = value.get("blocks")
    if not isinstance(blocks, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65_536 for v in blocks.values()
    ):
        return None
    texts = {k: value.get(k) for k in ("kernel", "compiler", "gpu")}
    if not all(v is None or isinstance(v, str) for v in texts.values()):
        return None
    return {**{k: v[:64] if v else v for k, v in texts.items()}, "blocks": dict(blocks)}


# --- a shape sweep, a profile -----------------------------------------------------------------


def steady_pass(run: RunResult, policy: str, calls: int) -> tuple[float | None, float | None]:
    """A sweep policy's steady pass and call, from its own samples (the median per call)."""
    m = next((m for m in run.measurements if m.subject == f"bucketing {policy}"), None)
    per_call = statistics.median(m.samples_s) if m is not None and m.samples_s else None
    return (per_call * calls if per_call is not None else None), per_call


def _sizes(facts: Facts) -> int:
    return len(facts.params.sizes()) if isinstance(facts.params, ShapeSweepParams) else 0


def first_pass(value: float | None, policy: Any, facts: Facts) -> float | None:
    """A sweep's first pass, compiles included: finite, and never faster than a steady one
    (it compiles every shape)."""
    first = not_negative(value)
    steady, _ = steady_pass(facts.run, policy.policy, _sizes(facts))
    return first if first is not None and steady is not None and first >= steady else None


def traces(value: int, policy: Any, facts: Facts) -> int:
    """A sweep's traces: between 0 and its number of sizes."""
    return min(max(value, 0), _sizes(facts))


def profile(value: Any, owner: Any, facts: Facts) -> Any:
    """The profiler trace's description: its count of calls not negative. Its bytes are
    bounded where the server stores them (app.store.profiles: size-checked as they inflate)
    and withheld with the times (the gate)."""
    return value.model_copy(update={"calls": max(value.calls, 0)}) if value is not None else None
