"""Where each target of a fit search stands, worked out from its stored probes alone.

The search keeps no planner state: each target's probes (with their verdicts) and its
criterion give the planner's next step (`app.queue.fit_plan.next_step`), so the driver
that queues probes and the page that shows them read the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from app.queue.fit_criteria import Criterion, criterion_of
from app.queue.fit_plan import Probe, Step, next_step
from app.queue.fit_spec import FitSpec
from app.store.fits import ProbeRow
from workers.protocol import parse_target


class TargetStatus(StrEnum):
    """How one target's search stands."""

    SEARCHING = "searching"
    """Probes are compiling, or the next ones are about to be queued."""
    FOUND = "found"
    """The answer is proved: it fits and the next value does not (or it is hi, or even
    lo does not fit)."""
    FAILED = "failed"
    """A probe ended without a verdict (its job failed, or its compile gave no peak)."""


@dataclass(frozen=True)
class TargetState:
    """One target of a search: its criterion, its probes in the order planned, and the
    planner's step over those with a verdict."""

    target: str
    criterion: Criterion
    probes: list[ProbeRow]
    step: Step

    @property
    def pending(self) -> list[ProbeRow]:
        """Probes still compiling (or queued)."""
        return [p for p in self.probes if not p.judged]

    @property
    def failure(self) -> ProbeRow | None:
        """The first probe that ended without a verdict."""
        return next((p for p in self.probes if p.failed is not None), None)

    @property
    def status(self) -> TargetStatus:
        if self.failure is not None:
            return TargetStatus.FAILED
        if self.step.done:
            return TargetStatus.FOUND
        return TargetStatus.SEARCHING

    @property
    def wanted(self) -> tuple[int, ...]:
        """The values to queue now: the planner's next, once nothing is pending."""
        if self.status is not TargetStatus.SEARCHING or self.pending:
            return ()
        planned = {p.value for p in self.probes}
        return tuple(v for v in self.step.values if v not in planned)

    def probe_at(self, value: int | None) -> ProbeRow | None:
        return next((p for p in self.probes if p.value == value), None)


def target_states(
    spec: FitSpec, probes: list[ProbeRow], capacities: Mapping[str, int] | None = None
) -> list[TargetState]:
    """Each target of `spec`, in the order it names them, from the search's probes;
    `capacities` are the TPU targets' usable bytes as the workers read them."""
    grid = spec.grid
    states = []
    for target in spec.targets:
        mine = [p for p in probes if p.target == target]
        criterion = criterion_of(parse_target(target), spec.usable_fraction, capacities)
        judged = [
            Probe(p.value, p.fits, p.peak_bytes, refused=p.refused is not None)
            for p in mine
            if p.fits is not None
        ]
        refusals = [p.refused for p in mine if p.refused]
        step = next_step(grid, judged, criterion.aim(refusals))
        states.append(TargetState(target, criterion, mine, step))
    return states
