"""Validation errors said in plain words, one problem per named field, the input never
echoed: for the API's 422 answers, the forms and the submission layer alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

MAX_FIELD_CHARS = 80
MAX_ERRORS = 20


def clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def problem_detail(problems: list[tuple[str | None, str]]) -> list[dict[str, str | None]]:
    """(field, message) problems as a 422 lists them: [{"field", "message"}], each clipped,
    at most MAX_ERRORS."""
    return [
        {"field": clip(field) if field else None, "message": clip(message, 300)}
        for field, message in problems[:MAX_ERRORS]
    ]


_UNION_TAGS = frozenset({"int", "str", "float", "bool", "none", "list", "dict"})


def _is_union_tag(part: str | int) -> bool:
    """Pydantic names the member of a union in the error location ('constrained-int')."""
    return isinstance(part, str) and (part in _UNION_TAGS or any(c in part for c in "[-'("))


_PLAIN: dict[str, str] = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "int_type": "must be a whole number (an integer)",
    "int_parsing": "must be a whole number (an integer)",
    "int_from_float": "must be a whole number (an integer)",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "string_too_short": "must be at least {min_length} characters",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "needs at least {min_length} values",
    "too_long": "takes at most {max_length} values",
    "string_pattern_mismatch": "is not in the form it takes",
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
}
"""Pydantic's error types, said in plain words after the field's name ("m must be at least 1")."""


_PATTERN_WORDS: dict[str, str] = {
    "^[A-Za-z_][A-Za-z0-9_]*$": "must be letters, digits and _, not starting with a digit",
    "^[0-9a-f]{64}$": "must be a SHA-256: 64 lowercase hexadecimal digits",
}
"""Patterns the checks use (a name, a stored file's digest), said in words rather than as
a regular expression; any other reads "is not in the form it takes"."""


def _plain(err: Any, loc: str) -> str:
    template = _PLAIN.get(err["type"])
    ctx = err.get("ctx") or {}
    pattern = ctx.get("pattern") if err["type"] == "string_pattern_mismatch" else None
    if pattern is not None and pattern in _PATTERN_WORDS:
        template = _PATTERN_WORDS[pattern]
    elif err["type"] == "too_short" and ctx.get("min_length") == 1:
        template = "must not be empty"
    if template is None:
        return str(err["msg"])
    try:
        said = template.format(**ctx)
    except (KeyError, IndexError):
        return str(err["msg"])
    if err["type"] == "extra_forbidden":
        return said
    name = loc.rsplit(".", 1)[-1] if loc else "the value"
    if name.isdigit():  # an item of a list: "item 2 must be at least 1"
        name = f"item {int(name) + 1}"
    return f"{name} {said}"


_PARTS = frozenset({"query", "path", "header", "cookie", "body"})


def request_problems(errors: Sequence[Any]) -> list[dict[str, str | None]]:
    """FastAPI's validation errors for a request's query, path or body, in our shape:
    [{"field", "message"}], the field named (without "query."), the input never echoed."""
    problems: list[dict[str, str | None]] = []
    for err in list(errors)[:20]:
        loc = [str(p) for p in err.get("loc", ()) if not _is_union_tag(p)]
        if len(loc) > 1 and loc[0] in _PARTS and loc[0] != "body":
            loc = loc[1:]
        field = ".".join(loc)
        message = _plain({"type": None, "msg": "invalid", **err}, field)[:300]
        problems.append({"field": field[:80] or None, "message": message})
    return problems


def pydantic_problems(exc: ValidationError, prefix: str = "") -> list[tuple[str | None, str]]:
    """One problem per field, in plain words; a union's alternatives are joined into one."""
    by_field: dict[str | None, list[str]] = {}
    for err in exc.errors(include_url=False, include_input=False, include_context=True):
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        field = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or None)
        message = _plain(err, loc)
        messages = by_field.setdefault(field, [])
        if message not in messages:
            messages.append(message)
    return [(field, _joined(field, messages)) for field, messages in by_field.items()]


def _joined(field: str | None, messages: list[str]) -> str:
    """A union's alternatives as one sentence: "samples must be at least 1, or 'auto'"."""
    name = (field or "").rsplit(".", 1)[-1] or "the value"
    lead = f"{name} must be "
    if len(messages) > 1 and all(m.startswith(lead) for m in messages):
        rest = [m.removeprefix(lead).removeprefix("one of ") for m in messages]
        return lead + ", or ".join(rest)
    return "; or ".join(messages)
