"""What a tool checks of its arguments before any of them reaches the API: ids that are
ids (never a path: `../workers`, `A/../B`), numbers that are finite, and a refusal that
names the argument at fault.

The SDK validates each argument's type and range from the tool's signature (its message
names the argument); what it cannot say is checked here, so that a tool never puts a
caller's string into a URL it did not mean, nor sends the API a number JSON cannot hold.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import quote

from mcp.server.mcpserver.exceptions import ToolError

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A run's, an upload's or a fit search's id: letters, digits, `_` and `-` (a run that
brings another's dumps is `<id>-dumps`); never `/` or `.`."""


def refused(field: str, message: str) -> ToolError:
    """A refusal naming the argument at fault, as the API names a body's field."""
    return ToolError(f"{field}: {message}")


def checked_id(field: str, value: str, what: str = "run") -> str:
    """`value` when it has an id's shape; else the 404 the API would give for a run that
    does not exist (an id is never a path to follow)."""
    if ID.fullmatch(value) is None:
        shown = value[:64]
        raise refused(field, f"no {what} {shown!r} on this server (HTTP 404)")
    return value


def segment(value: str) -> str:
    """`value` as one segment of a URL's path, whatever it holds."""
    return quote(value, safe="")


def finite(field: str, value: Any) -> None:
    """Refuse a NaN or an infinity (JSON's `1e999` reads as one) anywhere inside `value`,
    naming its place (`params.m`, `measure.samples`); the API takes finite numbers only."""
    stack: list[tuple[str, Any]] = [(field, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise refused(where, f"{item!r} is not a finite number (NaN and 1e999 are not)")
        if isinstance(item, dict):
            stack += [(f"{where}.{key}", v) for key, v in item.items()]
        elif isinstance(item, list):
            stack += [(f"{where}[{i}]", v) for i, v in enumerate(item)]
