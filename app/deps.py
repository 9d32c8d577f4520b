"""Dependency aliases shared by routes."""

from __future__ import annotations

from typing import Annotated

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


StateDep = Annotated[AppState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]


def get_dispatcher(request: Request) -> Dispatcher:
    dispatcher = get_state(request).dispatcher
    if dispatcher is None:
        raise HTTPException(status_code=503, detail="the bench is not running on this server")
    return dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]


def get_admission(request: Request) -> Admission:
    admission = get_state(request).admission
    if admission is None:
        raise HTTPException(status_code=503, detail="the bench is not running on this server")
    return admission


AdmissionDep = Annotated[Admission, Depends(get_admission)]
"""The one admission for everything that queues work (app.queue.admission)."""


def get_hlo_diffs(request: Request) -> HloDiffs:
    diffs = get_state(request).hlo_diffs
    if diffs is None:
        raise HTTPException(status_code=503, detail="the bench is not running on this server")
    return diffs


HloDiffsDep = Annotated[HloDiffs, Depends(get_hlo_diffs)]
"""The app's HLO diffs: their reports kept, the ones being worked out shared."""
