"""Reaping in the job store: leases that expired, jobs that ran past the server's limit,
and jobs that waited in the queue too long. Any number of replicas may reap at once.

`reap_leases` runs in one transaction that first takes the one row of `reaper` with
SKIP LOCKED: while one replica reaps, another skips its turn instead of waiting. The
rows it moves are picked with SKIP LOCKED too and every move is conditional, so an
expired lease is re-queued exactly once whichever replicas reap.

The outage rule: reaping stamps `reaper.last_reap_at` on the database's clock (at least
STAMPS_PER_OUTAGE times per `outage_s`). When a reap finds the previous stamp older than
`outage_s` (no replica reaped for that long: every replica was down or cut off from the
database, and workers could not heartbeat), or in the future (the database's clock
stepped back), every running lease first gets one full lease period, and its start moves
by the gap: downtime is not the workers' fault. One replica restarting while another
reaps changes nothing.

A part of `app.store.Store`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.store.base import StoreBase
from app.store.jobs import end_sql, moved_in, requeue_sql
from app.store.schema import JOB_COLUMNS, JobRow
from workers.protocol import JobStatus

CLOCK_STEP_BACK_S = 1.0
"""A previous stamp this far ahead of the clock means the clock stepped back."""
STAMPS_PER_OUTAGE = 4
"""How often reaping stamps the time within an outage's length: often enough that a gap
longer than an outage means no replica reaped, seldom enough that an idle server does
not write its database twice a second."""


@dataclass(frozen=True)
class Expired:
    """A running job whose lease expired or that ran past the limit, as the reaper saw it."""

    job: JobRow
    overdue: bool
    """It ran past the server's limit (its lease did not expire)."""


Decide = Callable[[Expired], tuple[JobStatus, str]]
"""The reaper's verdict on an expired lease: (queued or failed, the reason)."""


class Reaping(StoreBase):
    """reap_leases and expired_queued on the store."""

    def reap_leases(
        self, *, lease_s: float, overdue_s: float, outage_s: float, decide: Decide
    ) -> list[JobRow]:
        """Move every running job whose lease expired, or that has held its lease longer
        than `overdue_s`, as `decide` says; the jobs moved. Empty when another replica is
        reaping right now."""
        moved: list[JobRow] = []
        with self._tx() as tx:
            stamp = tx.execute(
                self._sql("SELECT last_reap_at, {NOW} FROM reaper WHERE id = 1{SKIP_LOCKED}")
            )
            if not stamp:
                return moved
            last, at = stamp[0]
            gap = float(at) - float(last if last is not None else at)
            outage = gap > outage_s or gap < -CLOCK_STEP_BACK_S
            if outage:
                tx.execute(
                    self._sql(
                        "UPDATE jobs SET lease_deadline = {NOW} + ?, leased_at = leased_at + ? "
                        "WHERE status = 'running'"
                    ),
                    (lease_s, gap),
                )
            if outage or last is None or gap > outage_s / STAMPS_PER_OUTAGE:
                tx.execute(self._sql("UPDATE reaper SET last_reap_at = {NOW} WHERE id = 1"))
            rows = tx.execute(
                self._sql(
                    f"SELECT {JOB_COLUMNS}, lease_deadline >= {{NOW}} FROM jobs "
                    "WHERE status = 'running' "
                    "AND (lease_deadline < {NOW} OR leased_at < {NOW} - ?) "
                    "ORDER BY id{SKIP_LOCKED}"
                ),
                (overdue_s,),
            )
            for row in rows:
                found = Expired(JobRow.from_row(row[:-1]), overdue=bool(row[-1]))
                status, reason = decide(found)
                job = found.job
                if status == JobStatus.QUEUED:
                    changed = tx.execute(self._sql(requeue_sql(True)), (job.id, job.lease_id))
                else:
                    changed = tx.execute(
                        self._sql(end_sql((JobStatus.RUNNING,), with_lease=True)),
                        (status.value, reason, None, job.id, JobStatus.RUNNING.value, job.lease_id),
                    )
                if changed:
                    moved.append(moved_in(tx, self.dialect, changed[0], reason))
        return moved

    def expired_queued(self, max_age_s: float) -> list[JobRow]:
        """Queued jobs that entered the queue more than `max_age_s` seconds ago."""
        rows = self._read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = 'queued' AND queued_at < {{NOW}} - ?",
            (max_age_s,),
        )
        return [JobRow.from_row(r) for r in rows]
