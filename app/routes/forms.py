"""What HTML forms send, read one way everywhere: a whole number, a number, a sample
count, and a typed value (a matrix's axis). Forms send strings; these are where "512"
becomes 512. Each reader raises FormValueError with the words a form shows beside its
field (the form answers 422); everything after goes through the API's strict checks.

Only the ASCII digits 0 to 9 count as digits. Python's own conversions are too kind
for a form: `'²'.isdigit()` is true and `int('²')` then raises, `int('٣')` reads an
Arabic-Indic three, `int()` refuses more than 4,300 digits, and `float()` reads 'nan',
'inf' and '1e999'. A length cap keeps every number far from those limits.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_DIGITS = 12
"""No form number needs more (samples ≤ 1,000; sizes ≤ 32,768; seeds < 2**31)."""
MAX_NUMBER_CHARS = 32
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


class FormValueError(ValueError):
    """A form field that does not read as what it must be; the message says why."""


def _shown(text: str) -> str:
    """What was typed, short enough to show beside the field."""
    return repr(text[:20] + ("…" if len(text) > 20 else ""))


def whole_number(name: str, raw: str, *, low: int | None = None, high: int | None = None) -> int:
    """`raw` (stripped) as an integer of at most MAX_DIGITS ASCII digits, within bounds."""
    text = raw.strip()
    if _WHOLE.fullmatch(text) is None:
        raise FormValueError(
            f"{name} must be a whole number ({_shown(text)} is not one): "
            "write it with the digits 0 to 9"
        )
    if len(text.lstrip("+-").lstrip("0")) > MAX_DIGITS:
        raise FormValueError(f"{name} must be a whole number of at most {MAX_DIGITS} digits")
    value = int(text)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"from {low:,} to {high:,}" if low is not None and high is not None else ""
        span = span or (f"at least {low:,}" if low is not None else f"at most {high:,}")
        raise FormValueError(f"{name}: {value:,} is out of range ({span})")
    return value


def number(name: str, raw: str) -> float:
    """`raw` (stripped) as a finite decimal number such as 0.001 or 1e-3 (ASCII only)."""
    text = raw.strip()
    if len(text) > MAX_NUMBER_CHARS or _DECIMAL.fullmatch(text) is None:
        raise FormValueError(f"{name}: {_shown(text)} is no number such as 0.001 or 1e-3")
    value = float(text)
    if not math.isfinite(value):
        raise FormValueError(f"{name}: {_shown(text)} is too large")
    return value


def sample_count(raw: str) -> int | str:
    """`raw` (stripped) as a sample count: "auto", or a whole number of samples."""
    text = raw.strip()
    if text == "auto":
        return text
    try:
        return whole_number("samples", text, low=0)
    except FormValueError:
        raise FormValueError(
            f"samples must be a count or auto ({_shown(text)} is neither): write a count "
            "with the digits 0 to 9"
        ) from None


def typed_value(name: str, raw: str) -> Any:
    """A value typed into a form as the type it spells: true/false, a whole number, a
    number, or else the text itself (the parameter's own validation then names it).

    A digit string too long to be a form number, or text with digits other than 0 to 9,
    is refused here, by name."""
    text = raw.strip()
    lowered = text.lower()
    if lowered in {"true", "false"}:
        return lowered == "true"
    if _WHOLE.fullmatch(text):
        return whole_number(name, text)
    if _DECIMAL.fullmatch(text):
        return number(name, text)
    if any(ch.isdigit() and not ch.isascii() for ch in text):
        raise FormValueError(f"{name}: write numbers with the digits 0 to 9 ({_shown(text)})")
    return text
