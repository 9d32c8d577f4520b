"""A run on a real chip, read against what a compile without the chip predicted.

Two predictions meet a measurement here. The compile of the same job for the chip's own
target without the device (`run.prediction`) predicted the peak memory and whether the
program fits. The compiler's cost model predicted the time: libtpu's `estimated_cycles`
per instruction, which the server reads from the stored optimized HLO and this module
turns into time at the chip's clock. The profiled pass (`run.device_time`) measured each
instruction's time on the chip. This module sets each beside the other, as ratios: the
server's own reading of the run's own HLO and samples, nothing a worker worked out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cached_property

from workers.protocol import BoundaryId, RunResult
from workers.protocol.chips import CHIPS, Clock, TargetModel, chip_of_kind

DISPATCH_BOUND = 10.0
"""Host-sync this many times the device time or more: the host's figure is dispatch."""


@dataclass(frozen=True)
class OpTime:
    """One instruction's estimate beside its measured time on the chip."""

    name: str
    kind: str
    measured_s: float
    estimated_s: float | None
    calls: int

    @property
    def ratio(self) -> float | None:
        """Estimated over measured: above 1 the cost model expects it slower than it ran."""
        return self.estimated_s / self.measured_s if self.estimated_s else None


@dataclass(frozen=True)
class ChipView:
    """What the run page's "On the chip" section shows."""

    device_kind: str
    target: str | None
    host_s: float | None
    host_boundary: str | None
    device_s: float | None
    estimated_s: float | None
    clock: Clock | None
    ops: tuple[OpTime, ...]
    predicted_peak: int | None
    real_peak: int | None
    usable_bytes: int | None
    same_hlo: bool | None
    refused: str | None

    @property
    def dispatch_s(self) -> float | None:
        """Host-sync less the device's own time: what the host adds to each call."""
        if self.host_s is None or self.device_s is None or self.host_s < self.device_s:
            return None  # below: the two passes differ (the samples, then the profiled one)
        return self.host_s - self.device_s

    @property
    def host_over_device(self) -> float | None:
        return self.host_s / self.device_s if self.host_s and self.device_s else None

    @property
    def dispatch_bound(self) -> bool:
        ratio = self.host_over_device
        return ratio is not None and ratio >= DISPATCH_BOUND

    @property
    def ratio(self) -> float | None:
        return self.estimated_s / self.device_s if self.estimated_s and self.device_s else None

    @cached_property  # the page reads it several times
    def unestimated(self) -> tuple[float, list[str]] | None:
        """The share of the measured instructions' time on the chip that states no
        estimate, and their names; None when every one states one (or none was measured).
        The whole program's estimate leaves their time out."""
        total = sum(op.measured_s for op in self.ops)  # each a median per call
        left = [op for op in self.ops if op.estimated_s is None]
        if not left or total <= 0:
            return None
        return sum(op.measured_s for op in left) / total, [op.name for op in left]


def clock_of(run: RunResult) -> Clock | None:
    """The clock of the chip the run ran on (None where none is published)."""
    chip = chip_of_kind(run.environment.device_kind)
    if chip is None and run.target is not None:
        chip = CHIPS.get(TargetModel(run.target.model))
    return chip.clock if chip is not None else None


def _median(run: RunResult, boundary: BoundaryId) -> float | None:
    found = next((m for m in run.measurements if m.boundary is boundary and m.samples_s), None)
    return statistics.median(found.samples_s) if found is not None else None


def _ops(run: RunResult, clock: Clock | None) -> tuple[OpTime, ...]:
    rows = []
    for op in run.device_time.ops if run.device_time is not None else []:
        cycles = op.estimated_cycles
        estimate = cycles / clock.hz if cycles is not None and clock is not None else None
        rows.append(OpTime(op.name, op.kind or "—", op.median_s, estimate, op.calls))
    return tuple(rows)


def _estimated(run: RunResult, clock: Clock | None) -> float | None:
    """The cost model's time for one call: its cycles over the entry computation's
    instructions (a fusion's estimate covers what it calls), at the chip's clock."""
    cycles = run.device_time.estimated_cycles if run.device_time is not None else None
    return cycles / clock.hz if cycles is not None and clock is not None else None


def chip_view(run: RunResult) -> ChipView | None:
    """The run's own chip figures side by side; None for a run that touched no chip."""
    device_s = _median(run, BoundaryId.DEVICE_TIME)
    if device_s is None and run.prediction is None:
        return None
    host_boundary, host_s = next(
        (
            (b, median)
            for b in (BoundaryId.HOST_SYNC, BoundaryId.HOST_THROUGHPUT)
            if (median := _median(run, b))
        ),
        (None, None),
    )
    clock, p = clock_of(run), run.prediction
    return ChipView(
        device_kind=run.environment.device_kind,
        target=p.target if p is not None else (run.target.id if run.target else None),
        host_s=host_s,
        host_boundary=host_boundary.value if host_boundary else None,
        device_s=device_s,
        estimated_s=_estimated(run, clock),
        clock=clock,
        ops=_ops(run, clock),
        predicted_peak=p.predicted_peak_bytes if p else None,
        real_peak=p.real_peak_bytes if p else None,
        usable_bytes=p.usable_bytes if p else None,
        same_hlo=p.same_hlo if p else None,
        refused=p.refused if p else None,
    )
