"""The dispatcher: queues jobs, leases them to capable workers, takes their reports and
reaps what expires. One per app; it lives in `AppState.dispatcher`.

Split by concern: `core` (shared state and the workers it knows), `leasing` (jobs in,
leases out), `reports` (what workers send about the jobs they hold) and `reaper`.
"""

from __future__ import annotations

from app.dispatch.core import (
    Ack,
    LeaseEnded,
    LeaseGrant,
    UnknownWorker,
    WorkerEntry,
    WrongKey,
    cap_text,
)
from app.dispatch.leasing import LeasingMixin
from app.dispatch.reaper import START_ALLOWANCE_S, ReaperMixin
from app.dispatch.worker_reports import ReportsMixin


class Dispatcher(LeasingMixin, ReportsMixin, ReaperMixin):
    """Jobs in, leases out, reports taken, expiries reaped."""


__all__ = [
    "START_ALLOWANCE_S",
    "Ack",
    "Dispatcher",
    "LeaseEnded",
    "LeaseGrant",
    "UnknownWorker",
    "WorkerEntry",
    "WrongKey",
    "cap_text",
]
