"""What HTML forms send, read one way everywhere: a whole number, a number, and a sample
count. Forms send strings; these are where "512" becomes 512. Each reader raises
FormValueError with the words a form shows beside its field; everything after goes
through the API's strict checks."""

from __future__ import annotations


class FormValueError(ValueError):
    """A form field that does not read as what it must be; the message says why."""


def whole_number(name: str, raw: str) -> int:
    """`raw` (stripped) as an integer."""
    text = raw.strip()
    try:
        return int(text)
    except ValueError:
        raise FormValueError(f"{name} must be a whole number ({text[:20]!r} is not one)") from None


def number(name: str, raw: str) -> float:
    """`raw` (stripped) as a number."""
    text = raw.strip()
    try:
        return float(text)
    except ValueError:
        raise FormValueError(f"{name}: {text[:20]!r} is no number") from None


def sample_count(raw: str) -> int | str:
    """`raw` (stripped) as a sample count: "auto", or decimal digits."""
    text = raw.strip()
    if text == "auto":
        return text
    if text.isdecimal():
        return int(text)
    raise FormValueError(f"samples must be a count or auto ({text[:20]!r} is neither)")
