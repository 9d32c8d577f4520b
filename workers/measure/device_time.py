"""Device time: the program's own span on the device per call, from a profiled pass.

On a TPU or a GPU, host-sync (call → result ready on the host) includes the host's
dispatch: on the TPU v5e lent to this project a 1M-element sum takes 1.2 µs on the chip and
550 µs host-sync. The device's own time is in a `jax.profiler` trace: each device plane
(`/device:TPU:0`) has a line "XLA Modules" with one event per execution of a program,
named after its module (`jit_sum(187901370077337396)`), and a line "XLA Ops" with one event
per HLO instruction executed (`%reduce_sum.7 = f32[] reduce(…)`), each carrying the
device's own duration in picoseconds (`device_duration_ps`).

`profiled_pass` runs the compiled program a few times more, after the timed samples and
apart from them, under a trace, and reads that trace: the module's span per call (its
samples, under the boundary `device-time`), and each instruction's median time per call.
The profiler's own cost falls on the host, in that pass only; the timed samples never
carry it. On the CPU the trace has no device plane, and there is no device time to report.
"""

from __future__ import annotations

import glob
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jax.profiler import ProfileData

from workers.measure.profile import start_trace, stop_trace

DEVICE_CALLS = 10
"""Calls the profiled pass makes: enough for a median, few enough to cost little."""

_MODULES = "XLA Modules"
_OPS = "XLA Ops"
_PS = 1e-12


@dataclass(frozen=True)
class OpTime:
    """One HLO instruction's time on the device: its median per call."""

    name: str
    median_s: float
    calls: int


@dataclass(frozen=True)
class DeviceTimes:
    """What a trace says of one program: its span on the device per call, each
    instruction's median time per call, and where it was read."""

    spans_s: list[float]
    ops: list[OpTime] = field(default_factory=list)
    planes: list[str] = field(default_factory=list)


def _duration_s(event: Any) -> float:
    """An event's duration on the device: its `device_duration_ps` when stated, else the
    trace's own (nanosecond) duration."""
    stats = dict(event.stats)
    ps = stats.get("device_duration_ps")
    return float(ps) * _PS if isinstance(ps, int | float) else float(event.duration_ns) * 1e-9


def _op_name(event_name: str) -> str:
    """`%fusion.3 = bf16[…] fusion(…)` → `fusion.3`: the instruction's name in the HLO."""
    head = event_name.split(" = ", 1)[0].strip()
    return head.removeprefix("%")


def _device_planes(planes: Iterable[Any]) -> list[Any]:
    return [p for p in planes if p.name.startswith("/device:") and "CUSTOM" not in p.name]


def read_trace(path: str, module: str) -> DeviceTimes | None:
    """Device times of `module` (its HLO module name, e.g. `jit_sum`) in the trace file
    `path` (an `.xplane.pb`); None when no device plane ran it (a CPU, or another program)."""
    return device_times(ProfileData.from_file(path).planes, module)


def device_times(all_planes: Iterable[Any], module: str) -> DeviceTimes | None:
    """Device times of `module` in a trace's planes (`ProfileData.planes`: each with its
    name and lines, each line with its name and events); None when no device plane ran it.
    Each call is counted once, on whichever device plane ran it."""
    spans: list[float] = []
    per_op: dict[str, dict[int, float]] = {}  # each instruction's time in each call it ran
    planes = []
    for plane in _device_planes(all_planes):
        lines = {line.name: list(line.events) for line in plane.lines}
        calls = [e for e in lines.get(_MODULES, []) if e.name.split("(", 1)[0] == module]
        if not calls:
            continue
        planes.append(plane.name)
        for call in calls:  # numbered across the planes: one device's call is not another's
            number = len(spans)
            spans.append(_duration_s(call))
            start, end = call.start_ns, call.start_ns + call.duration_ns
            for op in lines.get(_OPS, []):
                if start <= op.start_ns <= end:
                    ran = per_op.setdefault(_op_name(op.name), {})
                    ran[number] = ran.get(number, 0.0) + _duration_s(op)
    if not spans:
        return None
    ops = [
        OpTime(name, statistics.median([ran.get(n, 0.0) for n in range(len(spans))]), len(ran))
        for name, ran in per_op.items()
    ]
    ops.sort(key=lambda o: o.median_s, reverse=True)
    return DeviceTimes(spans, ops, planes)


def module_name(hlo: str | None) -> str | None:
    """The module name of optimized HLO text (`HloModule jit_matmul, …` → `jit_matmul`)."""
    if not hlo or not hlo.startswith("HloModule "):
        return None
    return hlo.split(None, 2)[1].rstrip(",")


def profiled_pass(
    call: Callable[[], Any], module: str, calls: int = DEVICE_CALLS
) -> DeviceTimes | None:
    """Run `call` (one execution of the program, blocking until its result is ready)
    `calls` times under a profiler trace, and read the device times of `module` from it;
    None where the trace has none (no device plane: a CPU)."""
    folder = tempfile.mkdtemp(prefix="boundary-device-time-")
    try:
        try:
            start_trace(folder)
        except RuntimeError:  # a job that failed mid-trace left one running: end it first
            stop_trace()
            start_trace(folder)
        try:
            for _ in range(calls):
                call()
        finally:
            stop_trace()
        found = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        return read_trace(found[0], module) if found else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def slowest(times: DeviceTimes, count: int) -> Sequence[OpTime]:
    """The `count` instructions that take the most device time per call."""
    return times.ops[:count]
