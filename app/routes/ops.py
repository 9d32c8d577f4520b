"""Operator endpoints: /readyz (the store answers) and /metrics (Prometheus text format).

The exposition format is simple enough to write by hand, which spares a dependency.
"""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from app.deps import DispatcherDep
from workers.protocol import JobStatus

router = APIRouter(tags=["operations"])

QUANTILES = (0.5, 0.9, 0.99)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
READY_TIMEOUT_S = 2.0


@router.api_route("/readyz", methods=["GET", "HEAD"], include_in_schema=False)
async def readyz(dispatcher: DispatcherDep) -> JSONResponse:
    """200 when the job store answers a query within READY_TIMEOUT_S, 503 otherwise (on
    PostgreSQL: while the database is unreachable). Asked off the event loop, so a stalled
    database does not hold up the other requests meanwhile."""
    if await asyncio.to_thread(dispatcher.store.ping, READY_TIMEOUT_S):
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "store unreachable"}, status_code=503)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values (NaN when there are none)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


class Exposition:
    """Lines of the Prometheus text format, each metric introduced by HELP and TYPE."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: str) -> None:
        if labels:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@router.api_route("/metrics", methods=["GET", "HEAD"], include_in_schema=False)
async def metrics(dispatcher: DispatcherDep) -> PlainTextResponse:
    """Queue depth, jobs by status, stage durations of stored runs and worker liveness."""
    store = dispatcher.store
    out = Exposition()
    by_status = store.count_by_status()

    out.metric("boundary_queue_depth", "gauge", "Jobs waiting in the queue.")
    out.sample("boundary_queue_depth", by_status.get(JobStatus.QUEUED.value, 0))

    out.metric("boundary_jobs", "gauge", "Jobs in the store by status.")
    for status in JobStatus:
        out.sample("boundary_jobs", by_status.get(status.value, 0), status=status.value)

    out.metric("boundary_runs_stored", "gauge", "Runs kept in the store.")
    out.sample("boundary_runs_stored", store.count_runs())

    name = "boundary_stage_seconds"
    out.metric(name, "summary", "Wall time of the trace, lower and compile stages of stored runs.")
    for stage, values in store.stage_seconds().items():
        values.sort()
        for q in QUANTILES:
            out.sample(name, quantile(values, q), stage=stage, quantile=str(q))
        out.sample(f"{name}_sum", sum(values), stage=stage)
        out.sample(f"{name}_count", len(values), stage=stage)

    workers = dispatcher.connected_workers()
    out.metric("boundary_workers_connected", "gauge", "Workers heard from recently.")
    out.sample("boundary_workers_connected", len(workers))

    age = "boundary_worker_last_heartbeat_age_seconds"
    out.metric(age, "gauge", "Seconds since each connected worker was last heard from.")
    for w in workers:
        out.sample(age, round(w.age_s, 3), worker=w.id)

    out.metric("boundary_event_subscribers", "gauge", "Open job event streams.")
    out.sample("boundary_event_subscribers", dispatcher.hub.subscriber_count())
    return PlainTextResponse(out.text(), media_type=CONTENT_TYPE)
