"""How much one tool answer may say: at most MAX_ANSWER_CHARS characters of text.

An assistant reads every character it is given, so an answer that could grow with the
program (a list of fusions, a memory report's buffers, a fit's probes) is cut to fit,
and says so: `truncated` is true and `total_chars` is what the whole answer would have
taken. IR text is never cut here but paged (`get_ir`), IR_PAGE_CHARS at a time.
"""

from __future__ import annotations

import json
from typing import Any

MAX_ANSWER_CHARS = 20_000
"""The most characters any tool's answer holds."""

IR_PAGE_CHARS = 12_000
"""The characters of IR text `get_ir` returns by default; its `max_chars` may go up to
MAX_IR_PAGE_CHARS, which leaves room in the answer for the page's own fields."""

MAX_IR_PAGE_CHARS = 16_000

MIN_LIST = 1
"""A list is never cut below this many items: the first entry still shows its shape."""

MIN_CUT_STRING = 400
KEEP_STRING = 300
"""A string longer than MIN_CUT_STRING may be cut, never below KEEP_STRING characters."""


def dumped(value: Any) -> str:
    """`value` as the JSON text a tool answers with (compact, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def bounded(answer: dict[str, Any], limit: int = MAX_ANSWER_CHARS) -> str:
    """`answer` as JSON text of at most `limit` characters. When the whole is longer,
    the longest lists and strings inside it are shortened (lists keep their first
    items, strings their beginning) until it fits, and the answer says so with
    `truncated: true` and `total_chars`, the size of the whole."""
    text = dumped(answer)
    if len(text) <= limit:
        return text
    total = len(text)
    trimmed: Any = {**answer, "truncated": True, "total_chars": total}
    while len(text) > limit:
        shorter = _shorten(trimmed, len(text) - limit)
        if shorter is None:  # nothing left to shorten: say only what was cut
            return dumped({"truncated": True, "total_chars": total})
        trimmed = shorter
        text = dumped(trimmed)
    return text


def _shorten(value: Any, excess: int) -> Any | None:
    """`value` with its largest list or string made shorter, or None when none can be."""
    path = _largest(value, ())
    if path is None:
        return None
    return _replace(value, path, excess)


def _largest(value: Any, path: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The path to the list or string inside `value` whose JSON is longest, among those
    that can still be shortened."""
    best: tuple[int, tuple[Any, ...]] | None = None
    for size, where in _candidates(value, path):
        if best is None or size > best[0]:
            best = (size, where)
    return best[1] if best else None


def _candidates(value: Any, path: tuple[Any, ...]) -> list[tuple[int, tuple[Any, ...]]]:
    found: list[tuple[int, tuple[Any, ...]]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_candidates(item, (*path, key)))
    elif isinstance(value, list):
        if len(value) > MIN_LIST:
            found.append((len(dumped(value)), path))
        for i, item in enumerate(value):
            found.extend(_candidates(item, (*path, i)))
    elif isinstance(value, str) and len(value) > MIN_CUT_STRING:
        found.append((len(value), path))
    return found


def _replace(value: Any, path: tuple[Any, ...], excess: int) -> Any:
    """A copy of `value` with the list or string at `path` shortened."""
    if not path:
        return _cut(value, excess)
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, excess)}
    copy = list(value)
    copy[head] = _replace(value[head], rest, excess)
    return copy


def _cut(value: Any, excess: int) -> Any:
    if isinstance(value, str):
        keep = max(KEEP_STRING, len(value) - excess - 40)
        return value[:keep] + " … [cut]"
    keep = max(MIN_LIST, min(len(value) - 1, len(value) // 2))
    return value[:keep]
