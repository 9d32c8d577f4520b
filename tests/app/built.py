"""Apps built for tests, and the state each was built with.

`create_app` hands its `AppState` to `on_state`; `build_app` keeps it, so a test asks
`state_of(app)` for the dispatcher or the admission instead of reaching through the
middleware's attributes to the FastAPI app's `state`."""

from __future__ import annotations

import weakref
from typing import Any

from app.main import create_app
from app.settings import Settings
from app.state import AppState

_STATES: weakref.WeakKeyDictionary[Any, AppState] = weakref.WeakKeyDictionary()


def build_app(settings: Settings, **options: Any) -> Any:
    """`create_app(settings, **options)`, its state kept for `state_of`."""
    found: list[AppState] = []
    app = create_app(settings, on_state=found.append, **options)
    _STATES[app] = found[0]
    return app


def state_of(app: Any) -> AppState:
    """The state `app` was built with (by `build_app`)."""
    return _STATES[app]
