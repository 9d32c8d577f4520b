"""When a sampling loop stops, which of its samples it keeps, and why.

Every sampling loop (the harness's modes, the CUDA path, the shape sweep) appends one
sample at a time and asks its `Stopper` after each whether to stop. The stopper ends a
fixed count once it has the samples asked for after the timings settled
(`workers.measure.steady`), adaptive sampling once the spread of the settled samples is
small, and either at the time cap. `measurement` then keeps the settled samples, counts
the ones discarded before them, and says what shape the kept ones have
(`workers.measure.shape`). The reason a loop stopped is a structured field of the
measurement, never a warning's text.

A worker group samples in `lockstep()`: every process must make the same calls, so there
is no time cap and no warm-up detection, and each takes exactly the samples asked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from workers.measure.shape import shape
from workers.measure.stats import relative_iqr, summarize
from workers.measure.steady import MIN_WINDOW, WARMUP_TIME_SHARE, Settling
from workers.protocol import WARMUP_CAP_FACTOR, BoundaryId, Measurement, MeasureOptions

AUTO_MIN_SAMPLES = 10
"""Adaptive sampling never stops on spread before it has this many settled samples."""

_LOCKSTEP: ContextVar[bool] = ContextVar("boundary_lockstep", default=False)


@contextmanager
def lockstep() -> Iterator[None]:
    """Sample in lockstep with other processes: exactly the samples asked for, no time cap
    and no warm-up detection (which would let processes take different counts)."""
    token = _LOCKSTEP.set(True)
    try:
        yield
    finally:
        _LOCKSTEP.reset(token)


class Stopper:
    """Decides when a sampling loop ends, which samples it keeps, and records why.

    A fixed count N of at least `MIN_WINDOW` looks at its window each time it holds N
    samples: a warm-up transient at its front is discarded and sampling goes on, else it
    stops with exactly N kept. It gives up discarding at `WARMUP_CAP_FACTOR` x N samples
    in all (keeping the last N) or once half the time cap went on discarded samples
    (keeping the next N). Fewer than `MIN_WINDOW` asked for: nothing is judged and exactly
    N are taken. 'auto' trims a transient at each spread check and stops once IQR /
    median of what is left is below the threshold, or at its sample cap. The time cap
    bounds everything, and the reason then says how many were kept.
    """

    def __init__(self, options: MeasureOptions, start: float) -> None:
        self.target = options.sample_count()
        self.in_lockstep = _LOCKSTEP.get()
        self.max_seconds = options.max_seconds
        self.deadline = math.inf if self.in_lockstep else start + options.max_seconds
        self.threshold = options.auto_rel_iqr
        self.judges = not self.in_lockstep and (self.target is None or self.target >= MIN_WINDOW)
        self.settling = Settling(max_discard_s=options.max_seconds * WARMUP_TIME_SHARE)
        if self.target is None:
            self.cap = options.auto_max_samples
            self.next_check = AUTO_MIN_SAMPLES
        else:
            self.cap = self.target * WARMUP_CAP_FACTOR if self.judges else self.target
            self.next_check = self.target
        self.reason = ""

    def done(self, samples: Sequence[float], now: float) -> bool:
        """True when sampling should stop after `samples`; `now` is the last clock read."""
        count = len(samples)
        if count < self.next_check and now < self.deadline:
            return False  # the hot path: nothing to decide yet
        if count >= self.cap:
            return self._at_cap(count)
        if count >= self.next_check:
            finished = self._fixed(samples, count) if self.target else self._auto(samples, count)
            if finished:
                return True
        if now >= self.deadline:
            kept = count - self.kept_from(count)
            wanted = f" of {self.target}" if self.target is not None else ""
            self.reason = f"reached the time cap of {self.max_seconds:g} s after {kept}{wanted}"
            return True
        return False

    def _at_cap(self, count: int) -> bool:
        if self.target is None:
            discarded = min(self.settling.start, count)
            settled = f": kept the last {count - discarded}" if discarded else ""
            self.reason = f"reached the cap of {count} samples{settled}"
        elif self.judges:
            self.settling.gave_up = "cap"
            self.reason = (
                f"the timings had not settled after {count} samples ({WARMUP_CAP_FACTOR}x those "
                f"asked for): kept the last {self.target}"
            )
        else:
            self.reason = self._took()
        return True

    def _took(self) -> str:
        taken = f"took the {self.target} samples asked for"
        if self.in_lockstep:
            return f"{taken}, in lockstep with the worker group (no warm-up detection, no time cap)"
        if not self.judges:
            return f"{taken}: too few (under {MIN_WINDOW}) to judge warm-up or shape"
        return taken

    def _fixed(self, samples: Sequence[float], count: int) -> bool:
        assert self.target is not None
        settling = self.settling
        if not self.judges or not settling.test(samples):
            if settling.gave_up == "time":
                spent = math.fsum(samples[: settling.start])
                self.reason = (
                    f"{self._took()}, after the timings had not settled within half the time "
                    f"cap ({spent:.3g} s of samples discarded)"
                )
            elif settling.start:
                self.reason = (
                    f"{self._took()}, after discarding {settling.start} while the timings settled"
                )
            else:
                self.reason = self._took()
            return True
        self.next_check = min(settling.start + self.target, self.cap)
        return False

    def _auto(self, samples: Sequence[float], count: int) -> bool:
        # Sorting every sample would cost more than the samples on fast workloads, so the
        # window is judged on a schedule that grows by a tenth each time.
        self.next_check = max(count + 5, int(count * 1.1))
        if self.judges:
            self.settling.test(samples)
        window = samples[self.settling.start :]
        if len(window) < AUTO_MIN_SAMPLES:
            return False
        spread = relative_iqr(window)
        if spread < self.threshold:
            self.reason = (
                f"IQR/median {spread:.3f} fell below {self.threshold:g} after {len(window)} samples"
            )
            return True
        return False

    def kept_from(self, count: int) -> int:
        """The index of the first sample kept, of `count` taken: those before it were
        discarded while the timings settled."""
        if self.target is None:
            return min(self.settling.start, count)
        if self.settling.gave_up == "cap":
            return max(0, count - self.target)
        return max(self.settling.start, count - self.target)

    def progress(self, count: int) -> int:
        """How many of the samples asked for are in hand (for 'sampling k/N')."""
        kept = count - min(self.settling.start, count)
        return kept if self.target is None else min(kept, self.target)


def measurement(
    boundary: BoundaryId,
    samples: list[float],
    stopper: Stopper,
    calls_per_sample: int = 1,
    note: str | None = None,
) -> Measurement:
    """The kept samples of one boundary with their statistics, the discarded ones, their
    shape and the stopping reason. Loops that time several boundaries per sample (the
    application path) keep the same indices of each."""
    start = stopper.kept_from(len(samples))
    kept = samples[start:]
    judged = stopper.judges and len(kept) >= MIN_WINDOW
    return Measurement(
        boundary=boundary,
        samples_s=kept,
        stats=summarize(kept),
        calls_per_sample=calls_per_sample,
        stopped_because=stopper.reason,
        note=note,
        warmup_discarded=start,
        warmup_samples_s=samples[:start],
        shape=shape(kept) if judged else None,
        shape_checked=judged,
    )
