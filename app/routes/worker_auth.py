"""Who may call the worker API: the worker token on every request (the bearer), and on
every message after registration the worker's own key beside its id.

A worker's id is public (the API and the pages show which worker ran a job); the key its
registration returned is not, and the store keeps only its SHA-256. A message that names
a worker without that worker's key is refused, so one worker cannot lease, heartbeat or
report as another.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import HTTPException, Request

from app.deps import SettingsDep
from app.dispatch import Dispatcher, UnknownWorker, WrongKey
from app.web.tokens import bearer_of, token_matches


class Signed(Protocol):
    """A worker's message after registration: who it says it is, and its proof."""

    @property
    def worker_id(self) -> str: ...
    @property
    def worker_key(self) -> str | None: ...


def require_worker_token(request: Request, settings: SettingsDep) -> None:
    """Dependency: 401 unless the request carries `Authorization: Bearer <WORKER_TOKEN>`."""
    if settings.WORKER_TOKEN is None:
        raise HTTPException(
            status_code=401,
            detail="worker endpoints needs a token, and none is configured on this server",
            headers={"WWW-Authenticate": "Bearer"},
        )
    header = request.headers.get("authorization", "")
    if not token_matches(bearer_of(header), settings.WORKER_TOKEN):
        message = "missing bearer token" if not header else "wrong bearer token"
        raise HTTPException(
            status_code=401,
            detail=f"worker endpoints: {message}",
            headers={"WWW-Authenticate": "Bearer"},
        )


def authenticate(dispatcher: Dispatcher, message: Signed) -> None:
    """401 when the message carries no worker key, 403 when the key is not its worker's,
    404 for an unknown worker: a worker's id is public (the API shows who ran a job),
    its key is not, so a worker speaks only for itself."""
    try:
        dispatcher.check_key(message.worker_id, message.worker_key)
    except UnknownWorker:
        raise unknown_worker(message.worker_id) from None
    except WrongKey as exc:
        if exc.missing:
            raise HTTPException(
                status_code=401,
                detail="worker_key missing: every message after registration carries the "
                "key the registration returned (protocol 4); upgrade the worker",
            ) from None
        raise HTTPException(
            status_code=403,
            detail=f"worker_key is not the key of worker {message.worker_id[:64]!r}: a "
            "worker may only lease and report as itself",
        ) from None


def unknown_worker(worker_id: str) -> HTTPException:
    return HTTPException(
        status_code=404, detail=f"unknown worker {worker_id[:64]!r}: register again"
    )
