"""What routes need, attached to the FastAPI app as `app.state.boundary`.

Kept apart from app.main so that app.deps (and every router through it) can name the
state without importing the factory that builds the routers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jinja2 import Environment

from app.assets import Asset
from app.reader.content import Content
from app.settings import Settings

if TYPE_CHECKING:  # the API side is imported when it is built (see app.main.build_api)
    from app.admission import Admission
    from app.dispatch import Dispatcher


@dataclass
class AppState:
    """The settings, reader content, templates and assets, and the bench's dispatcher."""

    settings: Settings
    content: Content
    env: Environment
    assets: dict[str, Asset]
    dispatcher: Dispatcher | None = None
    admission: Admission | None = None
