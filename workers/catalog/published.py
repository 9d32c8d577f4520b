"""The server's own numbers: a run's path through the result gate, every field by its one
written rule (the table is `workers.catalog.result_rules.RULES`, and docs/design/result-rules.md
reads it out).

The path, one concern per module:

1. checked (`rule_checks`, the server alone, before this: `checked_problems`): a result
   that is not its leased job or its registered worker's is refused whole;
2. server (`server_fields`): what a worker sent under the server's own fields is dropped
   (the server adds those from what it stores);
3. bounded (`rule_bounds`), recomputed (`rule_recomputed`, `rule_correctness`) and text
   (`rule_kinds`), in that order, each by its one mechanism (`rule_kinds.enforce`);
4. the gate (`workers.protocol.gate`): validity from the run's own verdict, every time and
   rate of a run that is not valid or ran nothing withheld together, and every statistic
   and rate of a valid one worked out from its samples; a run the worker marked not valid,
   or whose times are no kernel's speed (Pallas interpret mode), shows none either.

The publish step (`workers.measure.publish`) builds every run through `published`, the
server passes every posted run through it again (`app.dispatch.results.prepare`) and every
stored run once more when it is read, so a rule added here reaches old runs too. Pydantic
and the catalog only, no jax: both halves import it. Applying it twice changes nothing.
"""

from __future__ import annotations

import math

from workers.catalog import may_go_unchecked
from workers.catalog.kernels import INTERPRET_WARNING
from workers.catalog.result_rules import RULES
from workers.catalog.rule_checks import Lease
from workers.catalog.rule_kinds import (
    Facts,
    Problems,
    checked_problems,
    enforce,
    server_fields,
    untouched,
)
from workers.catalog.rule_recomputed import interpreted, job_params
from workers.catalog.rule_walk import tree_copy
from workers.protocol import RunResult
from workers.protocol.gate import gate, runs_anything, strip
from workers.protocol.jobs import main_boundary
from workers.protocol.targets import own_target

NO_SPEED_NOTE = f"withheld: {INTERPRET_WARNING}"
"""What each measurement of a Pallas interpret-mode run says in place of its samples."""

WORKER_INVALID = "the worker marked this run not valid: the timings are no result."


def refusals(run: RunResult, lease: Lease) -> dict[int, Problems]:
    """Each way a posted `run` is not what its `lease` allows, by the status it is
    refused with (422; 409 where it contradicts the registered worker): the checked rules."""
    return checked_problems(run, lease, RULES)


def without_server_fields(run: RunResult, stored: RunResult | None = None) -> RunResult:
    """`run` with nothing in the server's own fields (a posted result), or with what the
    server had stored there (`stored`: the same run, read again)."""
    copied = tree_copy(run, untouched(RULES))
    server_fields(copied, RULES, stored)
    return copied


def _own_target(run: RunResult) -> str | None:
    """The target of the real chips a run executed on (by the device kind the worker
    registered); none for a run that ran nothing (one compiled without the hardware)."""
    if not runs_anything(run.job.stages):
        return None
    env = run.environment
    return own_target(env.device_kind, env.device_count)


def ruled(run: RunResult, result_dtypes: dict[str, str] | None = None) -> RunResult:
    """`run` with every bounded, recomputed and text field by its rule (the gate aside)."""
    copied = tree_copy(run, untouched(RULES))
    facts = Facts(copied, run.job, job_params(run.job), result_dtypes, _own_target(run))
    enforce(copied, facts, RULES)
    return copied


def published(
    run: RunResult, *, worker_valid: bool = True, result_dtypes: dict[str, str] | None = None
) -> RunResult:
    """`run` with every figure by its rule (module docstring), through the result gate.

    `worker_valid`: what the worker said of its own run; a run is valid only where the
    worker says so *and* the server's checks pass. `result_dtypes`: an uploaded program's
    result dtypes by result name, from its header, for each result's tolerance."""
    run = ruled(run, result_dtypes)
    gated = gate(run, may_be_unchecked=may_go_unchecked(run.job.workload, run.params))
    if gated.valid and not worker_valid:
        warnings = (
            gated.warnings
            if WORKER_INVALID in gated.warnings
            else [*gated.warnings, WORKER_INVALID]
        )
        stripped = strip(gated.model_copy(update={"warnings": warnings}))
        return stripped.model_copy(update={"valid": False})
    if gated.valid and interpreted(run.job):
        return _no_speed(gated)
    return _group_median(gated)


def _group_median(run: RunResult) -> RunResult:
    """Process 0's median in a group's report is the run's own: its samples are the ones
    the run carries (the others' are withheld, as the server has none of theirs)."""
    if run.group is None:
        return run
    main = main_boundary(run.job)
    own = next((m for m in run.measurements if m.boundary is main and m.stats), None)
    median = own.stats.median if own is not None and own.stats is not None else None
    members = [
        m.model_copy(update={"median_s": median if m.process_id == 0 else None})
        for m in run.group.members
    ]
    return run.model_copy(update={"group": run.group.model_copy(update={"members": members})})


def _no_speed(run: RunResult) -> RunResult:
    """A valid interpret-mode run without a single time or rate, its verdict standing."""
    stripped = strip(run, NO_SPEED_NOTE)
    warnings = [INTERPRET_WARNING, *(w for w in stripped.warnings if w != INTERPRET_WARNING)]
    return stripped.model_copy(update={"valid": True, "warnings": warnings})


RUN_SECONDS_SLACK_S = 5.0
"""How much longer than the server held its lease a worker's whole-job time may be (the
two clocks and the result's transfer)."""


def reported_seconds(run: RunResult) -> float:
    """The intervals a run reports, added up: its stages, and every sample (the discarded
    ones too) times the calls it spans. A job's wall time cannot be shorter."""
    st = run.stage_seconds
    total = math.fsum(x for x in (st.trace, st.lower, st.compile, st.warm_up) if x is not None)
    for m in run.measurements:
        total += math.fsum([*m.samples_s, *m.warmup_samples_s]) * m.calls_per_sample
    if run.scaling is not None:
        total += math.fsum(x for p in run.scaling.points for x in p.samples_s)
    return total


def run_seconds(run: RunResult, posted: float | None, held_s: float | None) -> float | None:
    """The whole job's wall time, as the worker timed it (the API's `run_seconds`): kept
    only for a valid run that ran something and whose times are a speed, when it is no
    shorter than the intervals the run reports and no longer than the server held the
    job's lease (`held_s`, None when not known: a stored run read again)."""
    if not run.valid or not runs_anything(run.job.stages) or interpreted(run.job):
        return None
    wall = posted if isinstance(posted, int | float) and not isinstance(posted, bool) else None
    if wall is None or not math.isfinite(wall) or wall < 0 or wall < reported_seconds(run):
        return None
    if held_s is not None and wall > held_s * 1.05 + RUN_SECONDS_SLACK_S:
        return None
    return float(wall)
