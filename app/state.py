"""What routes need, attached to the FastAPI app as `app.state.boundary`.

Kept apart from app.main so that app.deps (and every router through it) can name the
state without importing the factory that builds the routers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jinja2 import Environment

from app.reader.models import Content
from app.settings import Settings
from app.web.assets import Asset

if TYPE_CHECKING:  # the API side is imported when it is built (see app.main.build_api)
    from app.dispatch import Dispatcher
    from app.queue.admission import Admission


@dataclass
class AppState:
    """The settings, reader content, templates and assets, and the bench's dispatcher."""

    settings: Settings
    content: Content
    env: Environment
    assets: dict[str, Asset]
    dispatcher: Dispatcher | None = None
    admission: Admission | None = None
