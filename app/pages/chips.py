"""How far the compiler's cost model is from one chip: `/chips/{device kind}`.

Across the runs a chip has made (their device time per instruction, and libtpu's
`estimated_cycles` for the same instruction read by the server from the stored HLO), the
ratio estimated ÷ measured, gathered by what each instruction does, with the runs it comes
from. Above 1 the model expects an instruction slower than the chip ran it; far from 1 on
one kind of work, a deviceless estimate of that work says little about this chip.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.store import Store
from workers.protocol import JobStatus, RunResult
from workers.protocol.chips import Clock, chip_of_kind

CHIP_PATHS = ("jax-tpu", "jax-gpu")
RUNS_READ = 300
"""The newest finished jobs of each chip path read for one page."""


@dataclass(frozen=True)
class RunRatio:
    """One run's whole-program figures on the chip."""

    job_id: str
    label: str
    device_s: float
    estimated_s: float | None

    @property
    def ratio(self) -> float | None:
        return self.estimated_s / self.device_s if self.estimated_s else None


@dataclass
class KindRatios:
    """The ratios of one kind of instruction, with the runs they come from."""

    kind: str
    ratios: list[float] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        r = sorted(self.ratios)
        q = statistics.quantiles(r, n=4) if len(r) >= 2 else [r[0], r[0], r[0]]
        return {
            "kind": self.kind,
            "count": len(r),
            "median": statistics.median(r),
            "q1": q[0],
            "q3": q[2],
            "min": r[0],
            "max": r[-1],
            "runs": sorted(set(self.runs)),
        }


def _median_device(run: RunResult) -> float | None:
    found = next((m for m in run.measurements if m.boundary.value == "device-time"), None)
    return statistics.median(found.samples_s) if found is not None and found.samples_s else None


def _label(run: RunResult) -> str:
    shown = {k: v for k, v in run.params.items() if k in ("m", "n", "k", "dtype", "rows", "cols")}
    words = " ".join(f"{k}={v}" for k, v in shown.items())
    return f"{run.job.workload} {words}".strip()


def gather(
    runs: Iterable[tuple[str, RunResult]], clock: Clock
) -> tuple[list[RunRatio], dict[str, KindRatios]]:
    """Each run's whole-program ratio, and every measured instruction's by its kind."""
    programs: list[RunRatio] = []
    kinds: dict[str, KindRatios] = {}
    for job_id, run in runs:
        device, timed = _median_device(run), run.device_time
        if device is None or timed is None:
            continue
        total = timed.estimated_cycles
        estimate = total / clock.hz if total is not None else None
        programs.append(RunRatio(job_id, _label(run), device, estimate))
        for op in timed.ops:
            if op.estimated_cycles is None or op.median_s <= 0:
                continue
            found = kinds.setdefault(op.kind or "—", KindRatios(op.kind or "—"))
            found.ratios.append(op.estimated_cycles / clock.hz / op.median_s)
            found.runs.append(job_id)
    return programs, kinds


def chip_runs(store: Store, device_kind: str) -> list[tuple[str, RunResult]]:
    """The newest valid runs on real chips of `device_kind`, with their job ids."""
    found = []
    for path in CHIP_PATHS:
        jobs, _ = store.list_jobs(path=path, status=JobStatus.DONE.value, limit=RUNS_READ)
        for job in jobs:
            row = store.get_run(job.id)
            if row is None:
                continue
            raw = json.loads(row.result)
            if (raw.get("environment") or {}).get("device_kind") != device_kind:
                continue
            run = RunResult.model_validate(raw)
            if run.valid:
                found.append((job.id, run))
    return found


def chip_context(store: Store, device_kind: str) -> dict[str, Any] | None:
    """The page's context (and its JSON twin's), or None for a kind no chip model has."""
    chip = chip_of_kind(device_kind)
    if chip is None:
        return None
    clock = chip.clock
    runs = chip_runs(store, device_kind) if clock is not None else []
    programs, kinds = gather(runs, clock) if clock is not None else ([], {})
    by_kind = sorted((k.summary() for k in kinds.values()), key=lambda k: -k["count"])
    return {
        "device_kind": device_kind,
        "chip": {"name": chip.name, "model": chip.model.value},
        "clock": {"hz": clock.hz, "how": clock.how} if clock is not None else None,
        "clock_missing": chip.clock_missing,
        "runs_read": len(runs),
        "by_kind": by_kind,
        "programs": [
            {
                "job": p.job_id,
                "label": p.label,
                "device_s": p.device_s,
                "estimated_s": p.estimated_s,
                "ratio": p.ratio,
            }
            for p in programs
        ],
    }
