"""Stage times side by side, with the same doubt the execution ratio carries.

A stage time (trace, lower, compile, the uncounted warm-up) is one number per run, like
an execution median, so it goes through the same machinery (`app.pages.compare.stats`):
with `MIN_RUNS` runs a side the ratio of medians gets its bootstrap interval and each side
its A/A noise floor, and a direction is named only when the interval excludes 1 and the
ratio lies outside both floors. Cold compiles of one program in separate processes can
range over 20× on a busy machine, so two medians printed bare would invite a verdict the
repeats cannot support. With fewer runs no ratio is printed, and a side whose own runs
spread widely is flagged.

Runs that loaded their compile from the persistent cache are no repeats of runs that
compiled: a side that mixes the two gets no compile ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from app.pages.compare.stats import MIN_RUNS, noise_floor, ratio_interval, verdict
from app.pages.runs.plots import format_seconds

STAGES: tuple[str, ...] = ("trace", "lower", "compile", "warm_up")
NOISY_SPREAD = 0.5
"""(max - min) / median of a side's runs above which its stage time is flagged as noisy."""


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how far a side's own repeats disagree."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else float("inf")


def cache_outcome(run: dict[str, Any]) -> str:
    """What a run's compile stage did: 'compiled' or 'loaded from the cache'."""
    events = (run.get("environment") or {}).get("cache_events") or {}
    return "loaded from the cache" if events.get("hits") else "compiled"


def _values(side: dict[str, Any], stage: str) -> list[float]:
    return [
        float(r["stage_seconds"][stage])
        for r in side["runs"]
        if r["status"] == "done" and r["stage_seconds"].get(stage) is not None
    ]


def stage_row(
    stage: str, a: Sequence[float], b: Sequence[float], mixed: str = ""
) -> dict[str, Any]:
    """One row of the stage table: each side's median, and a sentence that says how much
    the difference can be trusted (with the ratio, interval and floors when there is one)."""
    a_med = statistics.median(a) if a else None
    b_med = statistics.median(b) if b else None
    row: dict[str, Any] = {
        "stage": stage,
        "a_s": a_med,
        "b_s": b_med,
        "a": format_seconds(a_med) if a_med is not None else "—",
        "b": format_seconds(b_med) if b_med is not None else "—",
        "runs": [len(a), len(b)],
        "ratio": None,
        "noisy": [
            name
            for name, side in (("A", a), ("B", b))
            if len(side) >= 2 and spread(side) > NOISY_SPREAD
        ],
    }
    if mixed:
        row["sentence"] = f"No ratio: {mixed}."
        return row
    if len(a) < MIN_RUNS or len(b) < MIN_RUNS:
        doubt = ""
        if row["noisy"]:
            who = " and ".join(f"side {n}" for n in row["noisy"])
            doubt = f"; {who}'s own runs spread over more than {NOISY_SPREAD:.0%} of the median"
        row["sentence"] = f"No ratio: {stage} times need {MIN_RUNS} runs a side{doubt}."
        return row
    interval = ratio_interval(a, b)
    floors = {"A": noise_floor(a), "B": noise_floor(b)}
    inside = any(f.low <= interval.ratio <= f.high for f in floors.values())
    row.update(
        ratio=interval.ratio,
        low=interval.low,
        high=interval.high,
        noise_floor={k: f.half_width_pct for k, f in floors.items()},
    )
    if interval.includes_one or inside:
        widest = max(f.half_width_pct for f in floors.values())
        row["sentence"] = (
            f"No measurable difference in {stage} time: ratio {interval.ratio:.2f}×, within "
            f"the A/A noise floor (repeats of one side move by up to ±{widest:.0f}%)."
        )
    else:
        row["sentence"] = verdict(interval).replace("time ratio", f"{stage} time ratio")
    return row


def stage_rows(a: dict[str, Any], b: dict[str, Any], comparable: bool) -> list[dict[str, Any]]:
    """Every stage either side timed, each with its sentence (no ratio for sides that
    differ in a controlled variable)."""
    rows = []
    for stage in STAGES:
        values_a, values_b = _values(a, stage), _values(b, stage)
        if not values_a and not values_b:
            continue
        mixed = "" if comparable else "the sides differ in a controlled variable"
        if stage == "compile" and comparable:
            for side in (a, b):
                outcomes = {cache_outcome(r) for r in side["runs"] if r["status"] == "done"}
                if len(outcomes) > 1:
                    mixed = (
                        f"side {side['name']} mixes runs that compiled with runs that loaded "
                        "the compile from the persistent cache"
                    )
        rows.append(stage_row(stage, values_a, values_b, mixed))
    return rows
