"""Admission: what every route that queues work goes through.

`Admission.queue(client, jobs)` alone decides whether validated jobs may enter the queue,
and queues them; nothing else calls the dispatcher's `submit` (a fit search's later probes,
which the server plans as earlier ones end, come through it too). It holds these rules,
each counted per job (a matrix counts its cells, a fit search its probes):

- the client's rate: SUBMIT_RATE jobs a minute;
- the queue's room: MAX_QUEUE queued jobs in all;
- the client's share: MAX_QUEUE_PER_CLIENT queued jobs per client, so one client cannot
  fill the queue;
- jobs no connected worker can run ("waiting") are capped apart, MAX_WAITING in all, so
  that jobs for absent hardware cannot lock out jobs the connected workers would run.

A refusal is 429 with Retry-After and a reason. The submission token is checked first,
before a body is read, with `check_token`. The client is the peer's address (one local
client over a unix socket); `X-Forwarded-For` counts only when the peer is one of
FORWARDED_ALLOW_IPS, or the socket's with FORWARDED_ALLOW_UDS (app.web.clients).

Everything is counted in the store, in one transaction per admission under the store's
admission lock (app.store.limits): the decision and the queueing are one step, and
several replicas share every limit (two replicas never each admit a client's quota).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fastapi import HTTPException, Request

from app.dispatch.requirements import job_requirements, unmet
from app.queue.ratelimit import retry_after
from app.settings import Settings
from app.store import Admitting, JobRow
from app.web.clients import Proxies, client_of
from app.web.tokens import bearer_of, token_matches
from workers.protocol import Capabilities

if TYPE_CHECKING:
    from app.dispatch import Dispatcher
    from app.queue.validation import ValidJob

QUEUE_RETRY_S = 30
"""Retry-After when the queue, a client's share or the waiting cap is full."""


def _busy(detail: str, retry_after: float) -> HTTPException:
    return HTTPException(
        status_code=429,
        detail=detail,
        headers={"Retry-After": str(max(1, math.ceil(retry_after)))},
    )


class Admission:
    """Admission: whose request this is, whether its token is right, and whether its jobs
    may queue. One per app, beside the dispatcher it queues into."""

    def __init__(self, dispatcher: Dispatcher, settings: Settings) -> None:
        self.dispatcher = dispatcher
        self.settings = settings
        self._trusted = Proxies.from_settings(settings)

    # --- who is asking ------------------------------------------------------------------

    def client(self, request: Request) -> str:
        """The key jobs are counted under: the peer's address, or, when the peer is a
        trusted proxy, the last address in X-Forwarded-For that is not a trusted proxy."""
        return client_of(request.scope, self._trusted)

    def check_bearer(self, request: Request, what: str) -> None:
        """`check_token` with the request's `Authorization: Bearer` token."""
        self.check_token(bearer_of(request.headers.get("authorization", "")), what)

    def check_token(self, presented: str | None, what: str, *, bearer: bool = True) -> None:
        """401 unless the server needs no submission token or `presented` is it."""
        expected = self.settings.SUBMIT_TOKEN
        if expected is None or token_matches(presented, expected):
            return
        missing = presented is None or not presented.strip()
        message = "missing" if missing else "wrong"
        headers = {"WWW-Authenticate": "Bearer"} if bearer else None
        raise HTTPException(
            status_code=401,
            detail=f"{what}: {message} {'bearer ' if bearer else ''}token",
            headers=headers,
        )

    def throttle(self, client: str) -> None:
        """Count one request that stores something without queueing work (an upload)
        against the client's rate; 429 with Retry-After when over it."""
        per = self.settings.SUBMIT_RATE
        with self.dispatcher.store.admitting(client) as admitting:
            wait = retry_after(admitting.hits(), 1, per, admitting.at)
            if wait is not None:
                raise _busy(f"more than {per} submissions a minute from this client", wait)
            admitting.count(1)

    # --- whether jobs may queue -----------------------------------------------------------

    def check(
        self, admitting: Admitting, jobs: Sequence[ValidJob], connected: Sequence[Capabilities]
    ) -> None:
        """429 (with Retry-After and the reason) unless every one of `jobs` may queue,
        counted inside the admission `gate`, with the `connected` workers' capabilities."""

        def runnable(requirements: dict[str, object]) -> bool:
            return any(unmet(requirements, caps) is None for caps in connected)

        settings = self.settings
        n = len(jobs)
        what = "the job" if n == 1 else f"{n} jobs"
        per = settings.SUBMIT_RATE
        wait = retry_after(admitting.hits(), n, per, admitting.at)
        if wait is not None:
            if n > per:
                detail = f"{what} are more than the {per} submissions a minute one client may make"
            else:
                detail = f"more than {per} submissions a minute from this client"
            raise _busy(detail, wait)
        queued, mine = admitting.queued()
        if queued + n > settings.MAX_QUEUE:
            head = "the queue is full" if n == 1 else f"the queue cannot take {n} more jobs"
            raise _busy(
                f"{head} ({settings.MAX_QUEUE} jobs at most); try again later", QUEUE_RETRY_S
            )
        if mine + n > settings.MAX_QUEUE_PER_CLIENT:
            raise _busy(
                f"this client has {mine} jobs queued; {what} would pass the "
                f"{settings.MAX_QUEUE_PER_CLIENT} one client may have queued",
                QUEUE_RETRY_S,
            )
        unrunnable = sum(
            1 for job in jobs if not runnable(dict(job_requirements(job.spec, job.devices)))
        )
        if unrunnable:  # queued jobs no connected worker can run, and these
            waiting = sum(
                count
                for requirements, count in admitting.queued_requirements()
                if not runnable(json.loads(requirements))
            )
            if waiting + unrunnable > settings.MAX_WAITING:
                raise _busy(
                    f"no connected worker can run {'it' if n == 1 else 'them'}, and "
                    f"{waiting} such jobs already wait ({settings.MAX_WAITING} at most); "
                    "try again when a capable worker is connected",
                    QUEUE_RETRY_S,
                )

    def queue(
        self,
        client: str,
        jobs: Sequence[ValidJob],
        then: Callable[[Admitting, list[JobRow]], None] | None = None,
    ) -> list[JobRow]:
        """Queue `jobs` whole or not at all: in one transaction of the store, `check`,
        count them against the client's rate, and submit each; then wake the workers.
        `then` stores what goes with the jobs (a fit search's probes) in the same
        transaction; what it raises leaves nothing queued."""
        connected = [w.capabilities for w in self.dispatcher.recent_workers()]
        with self.dispatcher.store.admitting(client) as admitting:
            self.check(admitting, jobs, connected)
            admitting.count(len(jobs))
            rows = self.dispatcher.submit(admitting, [(job.spec, job.devices) for job in jobs])
            if then is not None:
                then(admitting, rows)
        self.dispatcher.queued()
        return rows
