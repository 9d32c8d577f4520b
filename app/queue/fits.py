"""Fit searches run by the server: create one, take each probe's verdict as its job ends,
queue the planner's next probes, end it, or cancel it.

Every probe is a job queued through admission (`Admission.queue`), counted like a
matrix's cells, and stored with the search in the same transaction. What moves a search
on is the end of one of its probes' jobs (the dispatcher's `on_ended`, on the replica
where it ended) and, so that nothing is lost to a refused admission or a replica that
went down, a look at every live search after each reap (`on_reap`). Each look reads
the stored probes afresh and is harmless twice: two replicas planning the same probe
meet at the store (`ProbeTaken`), and the second one's admission rolls back.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import HTTPException

from app.queue.admission import Admission
from app.queue.fit_criteria import criterion_of
from app.queue.fit_spec import FitSpec, check_fit, probe_valid
from app.queue.fit_state import TargetState, TargetStatus, target_states
from app.queue.submission import field_errors
from app.queue.validation import ValidJob
from app.store import Admitting, JobRow, Store
from app.store.fits import LIVE, FitRow, ProbeRow, ProbeTaken, insert_fit_in, insert_probes_in
from workers.protocol import FINAL_STATUSES, JobStatus, parse_target

log = logging.getLogger("boundary.fits")


@dataclass(frozen=True)
class _Planned:
    """A probe to store: its target and value, and its job, or why it has none."""

    target: str
    value: int
    job: ValidJob | None
    failed: str | None


class FitSearches:
    """The server's fit searches, over the one admission (and its dispatcher)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.dispatcher = admission.dispatcher
        self.store: Store = admission.dispatcher.store

    def watch(self) -> None:
        """Move searches on as their probes end, and look at every live one after each
        reap (once per app)."""
        self.dispatcher.on_ended(self.job_ended)
        self.dispatcher.on_reap(self.look_at_all)

    # --- create ----------------------------------------------------------------------

    def submit(self, spec: FitSpec, client: str) -> str:
        """`create`, once every probe it could queue passes a job's checks (422 naming
        each field at fault otherwise)."""
        problems = check_fit(spec, self.store, self.admission.settings.MAX_JOB_BYTES)
        if problems:
            field_errors(problems)
        return self.create(spec, client)

    def create(self, spec: FitSpec, client: str) -> str:
        """Store `spec` and queue its first probes for every target, whole or not at all
        (429 from admission when they cannot all queue); its id."""
        fit_id = secrets.token_hex(8)
        planned = self._plan(spec, target_states(spec, [], self.dispatcher.capacities()))
        spec_json = spec.model_dump(mode="json")

        def store_fit(admitting: Admitting) -> None:
            admitting.within(lambda tx, d: insert_fit_in(tx, d, fit_id, spec_json, client))

        self._queue(fit_id, client, planned, before=store_fit)
        return fit_id

    # --- move on ---------------------------------------------------------------------

    def job_ended(self, job_id: str) -> None:
        """A job ended: when it is a probe, its search takes the next step."""
        fit_id = self.store.fit_of_job(job_id)
        if fit_id is not None:
            self.look_at(fit_id)

    def look_at_all(self) -> None:
        for fit_id in self.store.live_fits():
            try:
                self.look_at(fit_id)
            except Exception:
                log.exception("fit search %s: could not take its next step", fit_id)

    def look_at(self, fit_id: str) -> None:
        """Record the verdicts of probes whose jobs ended, then queue the next probes of
        each target, or end the search when every target has its answer (or failed)."""
        fit = self.store.get_fit(fit_id)
        if fit is None or fit.status != LIVE:
            return
        spec = FitSpec.model_validate(fit.spec)
        self._record(spec, self.store.fit_probes(fit_id))
        states = target_states(spec, self.store.fit_probes(fit_id), self.dispatcher.capacities())
        if all(s.status is not TargetStatus.SEARCHING for s in states):
            self._end(fit, states)
            return
        planned = self._plan(spec, states)
        if not planned:
            return
        try:
            self._queue(fit_id, fit.client or "", planned)
        except ProbeTaken:
            return  # another replica queued them first
        except HTTPException as exc:  # admission refused (429): the next look tries again
            log.info("fit search %s waits for room in the queue: %s", fit_id, exc.detail)

    def cancel(self, fit_id: str) -> bool:
        """Cancel a live search and its probes still queued or compiling; False when it
        had ended."""
        if not self.store.end_fit(fit_id, JobStatus.CANCELLED.value, "cancelled on request"):
            return False
        for probe in self.store.fit_probes(fit_id):
            if probe.job_id is not None and probe.job_status not in FINAL_STATUSES:
                self.dispatcher.cancel(probe.job_id)
        return True

    # --- steps -----------------------------------------------------------------------

    def _plan(self, spec: FitSpec, states: list[TargetState]) -> list[_Planned]:
        """The probes each target wants now, each checked like a job submitted alone, in
        turns between the targets (each target's first, then each one's second, …): a
        client's jobs are leased in the order they were queued, so every target's search
        moves on before any target's second probe."""
        settings = self.admission.settings
        wanted = [[(state.target, value) for value in state.wanted] for state in states]
        planned = []
        for target, value in _in_turns(wanted):
            job, problems = probe_valid(spec, target, value, self.store, settings.MAX_JOB_BYTES)
            failed = "; ".join(f"{f}: {m}" if f else m for f, m in problems) or None
            planned.append(_Planned(target, value, job, failed))
        return planned

    def _queue(
        self,
        fit_id: str,
        client: str,
        planned: list[_Planned],
        before: Callable[[Admitting], None] | None = None,
    ) -> None:
        """Queue the planned probes' jobs and store the probes in one admission (those
        that failed their checks are stored with the reason, and no job)."""
        jobs = [p.job for p in planned if p.job is not None]

        def store_probes(admitting: Admitting, rows: list[JobRow]) -> None:
            if before is not None:
                before(admitting)
            ids = iter(row.id for row in rows)
            probes = [
                (p.target, p.value, next(ids) if p.job is not None else None, p.failed)
                for p in planned
            ]
            admitting.within(lambda tx, _: insert_probes_in(tx, fit_id, probes))

        self.admission.queue(client, jobs, then=store_probes)

    def _record(self, spec: FitSpec, probes: list[ProbeRow]) -> None:
        """Keep the verdict of each probe whose job ended and has none yet."""
        for probe in probes:
            if probe.judged or probe.job_id is None or probe.job_status not in FINAL_STATUSES:
                continue
            if probe.job_status != JobStatus.DONE:
                reason = probe.job_reason or "no reason given"
                why = f"its compile's job {probe.job_status}: {reason}"
                self.store.record_probe(
                    probe.job_id, fits=None, peak_bytes=None, refused=None, failed=why
                )
                continue
            self._judge(spec, probe)

    def _judge(self, spec: FitSpec, probe: ProbeRow) -> None:
        """A done probe's verdict, by its target's criterion, from its run's figures."""
        assert probe.job_id is not None
        run = self.store.get_run(probe.job_id)
        result = json.loads(run.result) if run is not None else {}
        target = result.get("target") or {}
        refused = target.get("refused")
        peak = (result.get("memory_analysis") or {}).get("peak_bytes")
        if peak is None and refused is not None:  # the refusal's own figure
            peak = (target.get("memory") or {}).get("peak_bytes")
        criterion = criterion_of(parse_target(probe.target), spec.usable_fraction)
        fits = criterion.fits(peak, refused)
        failed = None if fits is not None else "its compile reported no peak to judge"
        self.store.record_probe(
            probe.job_id, fits=fits, peak_bytes=peak, refused=refused, failed=failed
        )

    def _end(self, fit: FitRow, states: list[TargetState]) -> None:
        failed = [s for s in states if s.status is TargetStatus.FAILED]
        if not failed:
            self.store.end_fit(fit.id, JobStatus.DONE.value, None)
            return
        reasons = []
        for state in failed:
            probe = state.failure
            assert probe is not None
            name = parse_target(state.target).id
            reasons.append(f"{name}: the probe at {probe.value} failed ({probe.failed})")
        self.store.end_fit(fit.id, JobStatus.FAILED.value, "; ".join(reasons))


def _in_turns(lists: list[list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The items of `lists` taken in turns: each list's first, then each one's second, …"""
    longest = max((len(items) for items in lists), default=0)
    return [items[i] for i in range(longest) for items in lists if i < len(items)]
