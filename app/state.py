"""What routes need: one app's `AppState`, found in each request's scope.

FastAPI builds each route's parameters, models and handler for every app a router is
included in (pydantic's schemas and validators: about 0.15 s of CPU for this API), and a
process that builds many apps (the tests build hundreds) paid that for each. So the API's
routes, handlers and body and stream caps are built once per process
(app.main.shared_api) and serve every app the process builds: `Bound` passes them one
app's requests with that app's state in each request's scope (`request.state.boundary`,
`state_of_scope`), and runs that app's own lifespan, which the shared app has none of.

Kept apart from app.main so that app.deps (and every router through it) can name the
state without importing the factory that builds the routers.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jinja2 import Environment
from starlette.types import ASGIApp, Receive, Scope, Send

from app.reader.models import Content
from app.settings import Settings
from app.web.assets import Asset

if TYPE_CHECKING:  # the API side is imported when it is built (see app.main.build_api)
    from app.dispatch import Dispatcher
    from app.pages.compare.hlo_diffs import HloDiffs
    from app.queue.admission import Admission
    from app.web.bodylimit import BodyRules
    from app.web.streams import StreamLedger

STATE_KEY = "boundary"
"""The name of an app's state among the request's state (`request.state.boundary`)."""


@dataclass
class AppState:
    """The settings, reader content, templates and assets, and the bench's dispatcher."""

    settings: Settings
    content: Content
    env: Environment
    assets: dict[str, Asset]
    dispatcher: Dispatcher | None = None
    admission: Admission | None = None
    body_rules: BodyRules | None = None
    streams: StreamLedger | None = None
    hlo_diffs: HloDiffs | None = None


def state_of_scope(scope: Scope) -> AppState:
    """The state of the app a request (its ASGI scope) is for."""
    state: AppState = scope["state"][STATE_KEY]
    return state


class Bound:
    """Serve `api` (shared) with `state`; answer the lifespan with `lifespan`."""

    def __init__(
        self,
        api: ASGIApp,
        state: AppState,
        lifespan: Callable[[], AbstractAsyncContextManager[Any]],
    ) -> None:
        self.api = api
        self.state = state
        from starlette.routing import Router  # (not on the reader's fast path at start-up)

        self._lifespan = Router(lifespan=lambda _app: lifespan())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan.lifespan(scope, receive, send)
            return
        # The server's own request state (a copy per request) with this app's beside it.
        scope["state"] = {**scope.get("state", {}), STATE_KEY: self.state}
        await self.api(scope, receive, send)
