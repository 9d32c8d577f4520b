"""Typed values from text, for the command line and the server's HTML forms alike.

Both sides read `key=value` words before the catalog validates them strictly; this is
the one place where "512" becomes 512, so `boundary run` and a form agree on types.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_DIGITS = 4000
"""Longer digit strings stay text (Python refuses to convert past 4,300 digits), so the
parameter's own validation names them instead of the conversion failing."""


def parse_value(text: str) -> Any:
    """A value as the type it spells: bool, int, float, string, or a JSON object or list
    (`input_rules={"tokens": {"kind": "int", "low": 0, "high": 50257}}`)."""
    if text[:1] in ("{", "["):
        try:
            found = json.loads(text, parse_constant=lambda name: name)
        except (ValueError, RecursionError):
            return text
        if isinstance(found, dict | list):
            return found
    lowered = text.lower()
    if lowered in {"true", "false"}:
        return lowered == "true"
    if len(text) > MAX_DIGITS:
        return text
    if _INTEGER.fullmatch(text):
        return int(text)
    # Only ASCII digits count (float() would also read '٣'); "nan", "inf" and "1e999"
    # stay strings, so the parameter's own validation rejects them by name.
    if not _DECIMAL.fullmatch(text):
        return text
    number = float(text)
    return number if math.isfinite(number) else text
