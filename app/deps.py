"""Dependency aliases shared by routes."""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request

from app.dispatch import Dispatcher
from app.pages.compare.hlo_diffs import HloDiffs
from app.queue.admission import Admission
from app.settings import Settings
from app.state import AppState, state_of_scope


def get_state(request: Request) -> AppState:
    return state_of_scope(request.scope)


def get_app_settings(request: Request) -> Settings:
    return get_state(request).settings


T = TypeVar("T")

StateDep = Annotated[AppState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]


def _running(part: T | None) -> T:
    """A part of the bench (set when the server starts it), or 503 where it is not running."""
    if part is None:
        raise HTTPException(status_code=503, detail="the bench is not running on this server")
    return part


def get_dispatcher(request: Request) -> Dispatcher:
    return _running(get_state(request).dispatcher)


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]


def get_admission(request: Request) -> Admission:
    return _running(get_state(request).admission)


AdmissionDep = Annotated[Admission, Depends(get_admission)]
"""The one admission for everything that queues work (app.queue.admission)."""


def get_hlo_diffs(request: Request) -> HloDiffs:
    return _running(get_state(request).hlo_diffs)


HloDiffsDep = Annotated[HloDiffs, Depends(get_hlo_diffs)]
"""The app's HLO diffs: their reports kept, the ones being worked out shared."""
