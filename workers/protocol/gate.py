"""The result gate's rules: what makes a run valid, what a run that is not valid may not
show, whether a worker group agreed, and whether a posted result is the job it leased.

Both halves of the gate import this one module: the publish step, which builds every run
on the worker side (`workers.measure.publish`), and the server, which stores a posted
result only as `gate` returns it (`app.dispatch.results`). Pydantic and the protocol's
models only, no jax, so the two halves cannot drift apart.

The rules:

- Validity comes from the run's own verdict and its job's stages, never from the `valid`
  a worker sends. A job that executes needs a verdict. It is valid when the verdict
  passed for real (checked, with a finite error within a finite tolerance) or, for a job
  that has nothing to check against (`may_be_unchecked`), when it is honestly unchecked
  (not checked, not passed, no error figure). A job that does not execute is valid, and
  any samples it carries are dropped: nothing ran, so nothing was timed. A job that runs
  nothing at all (compile only, a deviceless target) keeps no speed-bearing field.
- A run that is not valid keeps its trace, lower and compile times, its work counts and
  its compiler output, and loses every field a speed can be read or worked out from
  (`WITHHELD_FIELDS`), all together.
- A valid run still loses the times of a part whose own check failed (a baseline subject,
  a scaling point), and every statistic, calls per second, rate and comparison it shows
  is worked out from its own samples (`workers.protocol.speeds`): no boundary in
  `NEVER_A_SPEED` gets calls per second or a rate.
- What a posted run's job, boundaries, sample counts and samples may be is checked against
  the leased job before this (the checked rules: `workers.catalog.rule_checks`).
- A worker group agrees when every process that executed passed and they hold one output;
  a group that only compiled agrees when no process failed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from workers.protocol.base import PathId, StageId
from workers.protocol.runs import Measurement, RunResult
from workers.protocol.scale import GroupReport, ScalingPoint
from workers.protocol.speeds import KERNEL_SUBJECT, with_speeds
from workers.protocol.verdict import Correctness

WITHHELD = "withheld: the output failed the correctness check, so these times are no result"
"""The note a withheld measurement carries in place of its samples and statistics."""
NOTHING_EXECUTED = "withheld: nothing executed, so these samples time nothing"

WITHHELD_FIELDS: tuple[str, ...] = (
    "measurements[].samples_s and .stats",
    "measurements[].stopped_because",
    "measurements[].warmup_discarded, .warmup_samples_s, .shape and .shape_checked",
    "rates.flops_per_s and .bytes_per_s",
    "stage_seconds.warm_up",
    "harness_seconds",
    "extra.unreported_s, extra.warmed and extra.comparison",
    "sweep.policies[].first_pass_s, .steady_pass_s and .steady_call_s",
    "scaling.points[].samples_s and .median_s",
    "group.members[].median_s",
    "profile (and its stored trace)",
    "device_time (each instruction's time on the device)",
    "run_seconds (the API's whole-job wall time)",
)
"""Every speed-bearing field of a run that is not valid, as docs/running.md and the tests
name them. (`run_seconds` is not part of a run result: the server stores none for such a run.)"""

SPEED_EXTRA_KEYS = frozenset({"comparison", "unreported_s", "warmed"})
"""`extra` entries that hold times, or counts of timed calls."""

EXECUTING = frozenset({StageId.EXECUTE})
RUNNING = frozenset({StageId.EXECUTE, StageId.SCALE})


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def verdict_passes(c: Correctness) -> bool:
    """A verdict that passed for real: checked, with a finite error within a finite
    tolerance. `passed: true` beside a NaN error does not pass."""
    return (
        c.passed
        and c.checked
        and c.error is not None
        and _finite(c.error)
        and _finite(c.tolerance)
        and c.error <= c.tolerance
    )


def verdict_unchecked(c: Correctness) -> bool:
    """An honest "nothing to compare with": not checked, not passed, no error figure."""
    return not c.checked and not c.passed and c.error is None


def executes(stages: Iterable[StageId]) -> bool:
    """Whether a job with these stages runs its program (and so has an output to check)."""
    return bool(EXECUTING & set(stages))


def runs_anything(stages: Iterable[StageId]) -> bool:
    """Whether a job with these stages runs a program at all (execute, or the scale
    stage's series); one that only compiles has no time of a run to show."""
    return bool(RUNNING & set(stages))


def run_valid(
    correctness: Correctness | None, stages: Iterable[StageId], *, may_be_unchecked: bool
) -> tuple[bool, str]:
    """Whether a run's timings may stand, and if not, why (for its warning)."""
    if correctness is None:
        return (not executes(stages), "no correctness verdict for a job that executed")
    if verdict_passes(correctness):
        return (True, "")
    if verdict_unchecked(correctness):
        if may_be_unchecked:
            return (True, "")
        return (False, "output unchecked, but this job has a reference to check against")
    detail = correctness.detail or "the verdict does not pass"
    return (False, f"correctness failed ({detail})")


def group_agreed(group: GroupReport, executed: bool) -> bool:
    """Whether a worker group's processes agree.

    Only processes that executed (those with a verdict) are compared: each passed, and
    they hold one output digest between them. No process may have failed outright (no
    verdict and a message saying why), and when the job executes every process must have
    a verdict. A group that only compiled agrees when every process compiled.
    """
    if any(g.passed is None and g.message for g in group.members):
        return False
    ran = [g for g in group.members if g.passed is not None]
    if executed and len(ran) != len(group.members):
        return False
    return all(g.passed for g in ran) and len({g.digest for g in ran}) <= 1


def group_story(group: GroupReport) -> str:
    """Each process's outcome, for the warning of a group that did not agree."""
    return "; ".join(
        f"process {g.process_id}: "
        + (g.message or ("passed" if g.passed else "failed" if g.passed is False else "compiled"))
        for g in group.members
    )


def point_keeps_times(p: ScalingPoint) -> bool:
    """A scaling point's times stand only when it is marked correct with a finite error."""
    return p.correct is True and (p.error is None or math.isfinite(p.error))


def withhold(m: Measurement, note: str = WITHHELD) -> Measurement:
    """`m` without its samples, statistics, stopping reason, warm-up or shape."""
    return m.model_copy(
        update={
            "samples_s": [],
            "stats": None,
            "stopped_because": None,
            "warmup_discarded": None,
            "warmup_samples_s": [],
            "shape": None,
            "shape_checked": None,
            "note": note,
        }
    )


def _withhold_point(p: ScalingPoint, why: str) -> ScalingPoint:
    return p.model_copy(update={"samples_s": [], "median_s": None, "note": why})


def _withheld_note(note: str | None) -> str:
    """A failed scaling point's note, said once: gating it again adds nothing."""
    text = note or "failed"
    return text if text.startswith("withheld: ") else f"withheld: {text}"


def _warn(warnings: list[str], text: str) -> list[str]:
    """`warnings` with `text` added once: gating a gated run changes nothing."""
    return warnings if text in warnings else [*warnings, text]


def strip(run: RunResult, note: str = WITHHELD) -> RunResult:
    """`run` without a single speed-bearing field (`WITHHELD_FIELDS`), each measurement
    and scaling point noting why (`note`); its trace, lower and compile times, work counts
    and compiler output stay."""
    update: dict[str, Any] = {
        "measurements": [withhold(m, note) for m in run.measurements],
        "stage_seconds": run.stage_seconds.model_copy(update={"warm_up": None}),
        "harness_seconds": None,
        "extra": {k: v for k, v in run.extra.items() if k not in SPEED_EXTRA_KEYS},
        "profile": None,
        "device_time": None,
    }
    if run.profile is not None:
        update["warnings"] = _warn(
            run.warnings, "profile: the trace of a run whose timings are withheld is dropped."
        )
    if run.rates is not None:
        update["rates"] = run.rates.model_copy(
            update={"flops_per_s": None, "bytes_per_s": None, "boundary": None}
        )
    if run.sweep is not None:
        policies = [
            p.model_copy(
                update={"first_pass_s": None, "steady_pass_s": None, "steady_call_s": None}
            )
            for p in run.sweep.policies
        ]
        update["sweep"] = run.sweep.model_copy(update={"policies": policies})
    if run.scaling is not None:
        points = [_withhold_point(p, note) for p in run.scaling.points]
        update["scaling"] = run.scaling.model_copy(update={"points": points})
    if run.group is not None:
        members = [g.model_copy(update={"median_s": None}) for g in run.group.members]
        update["group"] = run.group.model_copy(update={"members": members})
    return run.model_copy(update=update)


def subject_verdicts(run: RunResult) -> dict[str, Correctness | None]:
    """The verdicts of further implementations timed beside the main one (the cuda path's
    baselines), as the run carries them in `extra.baselines`."""
    raw = run.extra.get("baselines")
    if not isinstance(raw, dict):
        return {}
    found: dict[str, Correctness | None] = {}
    for name, value in raw.items():
        try:
            found[str(name)] = Correctness.model_validate(value) if value is not None else None
        except ValueError:
            found[str(name)] = None
    return found


def gate(run: RunResult, *, may_be_unchecked: bool = False) -> RunResult:
    """`run` as it may be published: validity re-derived from its own verdict, its job's
    stages and its group; a run that is not valid stripped; failed parts of a valid run
    withheld. `may_be_unchecked` says whether the job has nothing to check against (the
    catalog knows: `workers.catalog.may_go_unchecked`). Gating a gated run changes nothing.
    """
    ran = executes(run.job.stages)
    valid, why = run_valid(run.correctness, run.job.stages, may_be_unchecked=may_be_unchecked)
    warnings = list(run.warnings)
    group = run.group
    if group is not None:
        agreed = group_agreed(group, ran)
        run = run.model_copy(update={"group": group.model_copy(update={"agreed": agreed})})
        if not agreed:
            valid = False
            why = (
                "the processes of the group did not all compute the same, correct output "
                f"({group_story(group)})"
            )
    if not runs_anything(run.job.stages):  # nothing ran: no time of a run, whatever is sent
        run = strip(run, NOTHING_EXECUTED)
    elif not ran:
        run = run.model_copy(
            update={"measurements": [withhold(m, NOTHING_EXECUTED) for m in run.measurements]}
        )
    if not valid:
        warnings = _warn(warnings, f"{why}: the timings are no result.")
        stripped = strip(run.model_copy(update={"warnings": warnings}))
        return stripped.model_copy(update={"valid": False})
    verdicts = subject_verdicts(run)
    measurements = []
    for m in run.measurements:
        verdict = verdicts.get(m.subject or "")
        # A baseline timed beside the cuda path's kernel keeps its times only with a
        # verdict of its own that passed: no verdict, no speed.
        baseline = run.job.path is PathId.CUDA and m.subject not in (None, KERNEL_SUBJECT)
        if (baseline or m.subject in verdicts) and (verdict is None or not verdict_passes(verdict)):
            detail = (verdict.detail if verdict else None) or "not checked"
            lost = f"{m.subject}: correctness failed ({detail}): no speed shown."
            warnings = _warn(warnings, lost)
            measurements.append(withhold(m))
        else:
            measurements.append(m)
    update: dict[str, Any] = {"measurements": measurements, "valid": True, "warnings": warnings}
    if run.scaling is not None:
        points = [
            p if point_keeps_times(p) else _withhold_point(p, _withheld_note(p.note))
            for p in run.scaling.points
        ]
        update["scaling"] = run.scaling.model_copy(update={"points": points})
    # Every speed from the samples kept: failed subjects' rows leave the comparison.
    return with_speeds(run.model_copy(update=update))
