"""What HTML forms send, read one way everywhere: a whole number, a number, and a sample
count. Forms send strings; these are where "512" becomes 512. Each reader raises
FormValueError with the words a form shows beside its field; everything after goes
through the API's strict checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class FormValueError(ValueError):
    """A form field that does not read as what it must be; the message says why."""


def _converted(convert: Callable[[str], T], raw: str, complaint: str) -> T:
    """`raw` (stripped) through `convert`; FormValueError saying `complaint`, in which
    `{text}` stands for what was typed, when it does not convert."""
    text = raw.strip()
    try:
        return convert(text)
    except ValueError:
        raise FormValueError(complaint.format(text=repr(text[:20]))) from None


def whole_number(name: str, raw: str) -> int:
    """`raw` (stripped) as an integer."""
    return _converted(int, raw, f"{name} must be a whole number ({{text}} is not one)")


def number(name: str, raw: str) -> float:
    """`raw` (stripped) as a number."""
    return _converted(float, raw, f"{name}: {{text}} is no number")


def sample_count(raw: str) -> int | str:
    """`raw` (stripped) as a sample count: "auto", or decimal digits."""
    text = raw.strip()
    if text == "auto":
        return text
    if text.isdecimal():
        return int(text)
    raise FormValueError(f"samples must be a count or auto ({text[:20]!r} is neither)")
