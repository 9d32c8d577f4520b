"""A real chip's own figures by their rules: the device time of its profiled pass and the
prediction its own target's compile without the device made. Jax-free: the server's half
of the result gate runs it (`workers.catalog.published`)."""

from __future__ import annotations

from workers.protocol import (
    MAX_DEVICE_OPS,
    BoundaryId,
    DeviceOp,
    DeviceTime,
    Prediction,
    RunResult,
)
from workers.protocol.published_bounds import count, seconds, words


def _spans(run: RunResult) -> list[float]:
    found = next((m for m in run.measurements if m.boundary is BoundaryId.DEVICE_TIME), None)
    return [s for s in found.samples_s if seconds(s)] if found is not None else []


def bounded_device_time(run: RunResult) -> DeviceTime | None:
    """The profiled pass's account: its calls the device-time samples' count, each
    instruction's median above 0 and no longer than the longest span, named as words;
    none without device-time samples."""
    reported = run.device_time
    spans = _spans(run)
    if reported is None or not spans:
        return None
    longest = max(spans)
    ops = []
    for op in reported.ops[:MAX_DEVICE_OPS]:
        median = seconds(op.median_s)
        name = words(op.name, 200)
        if median is None or median <= 0 or median > longest or not name:
            continue
        calls = min(count(op.calls) or 0, len(spans))
        ops.append(DeviceOp(name=name, median_s=median, calls=calls))
    planes = [p for p in (words(p, 80) for p in reported.planes[:16]) if p]
    return DeviceTime(planes=planes, calls=len(spans), ops=ops)


def bounded_prediction(run: RunResult, own_target: str | None) -> Prediction | None:
    """The prediction beside the chip: its target the one the server derives from the
    device kind the worker registered (none where it derives none), its figures the
    compilers' own, kept when not negative."""
    p = run.prediction
    if p is None or own_target is None:
        return None
    return Prediction(
        target=own_target,
        compiler_version=words(p.compiler_version, 120),
        predicted_peak_bytes=count(p.predicted_peak_bytes),
        real_peak_bytes=count(p.real_peak_bytes),
        predicted_temp_bytes=count(p.predicted_temp_bytes),
        real_temp_bytes=count(p.real_temp_bytes),
        usable_bytes=count(p.usable_bytes),
        same_hlo=p.same_hlo if isinstance(p.same_hlo, bool) else None,
        refused=words(p.refused, 1_000),
        seconds=seconds(p.seconds),
    )
