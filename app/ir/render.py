"""Tokens to HTML: the class each token kind gets, and one line of IR or source as markup."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from pygments.lexer import Lexer
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    String,
    _TokenType,
)

# The class of a token type is that of its nearest listed ancestor (Keyword.Type before
# Keyword); plain text, punctuation and operators get none.
_CLASSES: dict[_TokenType, str] = {
    Keyword.Type: "ty",
    Keyword: "kw",
    Operator.Word: "kw",
    Name.Builtin: "bi",
    Name.Function: "op",
    Name.Class: "op",
    Name.Variable: "va",
    Name.Attribute: "at",
    Name.Decorator: "at",
    Name.Constant: "co",
    Name.Label: "co",
    String: "st",
    Number: "nu",
    Comment: "cm",
}

TOKEN_CLASSES: tuple[str, ...] = ("ty", "kw", "bi", "op", "va", "at", "co", "st", "nu", "cm")
"""Every class a token can get; the stylesheet colours each (tests check the contrast)."""

PALETTE = 8
"""Source-line colours, cycled: line n gets colour n mod PALETTE."""


def colour(key: str) -> int:
    """The palette slot of a source key: its line number mod PALETTE."""
    digits = key.rsplit(":", 1)[-1]
    return int(digits) % PALETTE if digits.isdigit() else 0


_cache: dict[_TokenType, str] = {}

MAX_LINE_CHARS = 3000
"""Characters of one line shown; the rest is named and left to the download."""


def token_class(kind: _TokenType) -> str:
    """The CSS class for a Pygments token type, or '' for plain text."""
    found = _cache.get(kind)
    if found is None:
        node: _TokenType | None = kind
        while node is not None and node not in _CLASSES:
            node = node.parent
        found = _CLASSES[node] if node is not None else ""
        _cache[kind] = found
    return found


Marks = Sequence[tuple[int, int]]
"""Character ranges of a line to mark (a search's matches), [start, end)."""


def _marked(value: str, offset: int, marks: Marks) -> str:
    """`value` (which starts at `offset` in its line) escaped, its marked parts in <mark>."""
    if not marks:
        return escape(value, quote=False)
    out: list[str] = []
    pos = 0
    for start, end in marks:
        a, b = max(start - offset, pos), min(end - offset, len(value))
        if a >= b:
            continue
        out.append(escape(value[pos:a], quote=False))
        out.append(f"<mark>{escape(value[a:b], quote=False)}</mark>")
        pos = b
    out.append(escape(value[pos:], quote=False))
    return "".join(out)


def tokens_html(tokens: Iterable[tuple[_TokenType, str]], marks: Marks = ()) -> str:
    """Escaped text with a span around each token that has a class, and each range of
    `marks` in a <mark> (a match that crosses tokens is marked piece by piece)."""
    out: list[str] = []
    run: list[str] = []
    current = ""
    offset = 0
    for kind, value in tokens:
        cls = token_class(kind)
        if cls != current and run:  # neighbours of one class share a span: a smaller DOM
            text = "".join(run)
            out.append(f'<span class="{current}">{text}</span>' if current else text)
            run = []
        current = cls
        run.append(_marked(value, offset, marks))
        offset += len(value)
    if run:
        text = "".join(run)
        out.append(f'<span class="{current}">{text}</span>' if current else text)
    return "".join(out)


def highlight(lexer: Lexer, text: str, marks: Marks = ()) -> str:
    """`text` (one line or a fragment of one) highlighted by `lexer`, `marks` marked."""
    return tokens_html(lexer.get_tokens(text), marks)


def _shifted(marks: Marks, by: int) -> Marks:
    return [(a - by, b - by) for a, b in marks]


def line_html(lexer: Lexer, line: str, folds: list[tuple[int, int]], marks: Marks = ()) -> str:
    """One line, highlighted, with each folded span hidden behind a marker and each range
    of `marks` (a search's matches) in a <mark>."""
    cut = ""
    if len(line) > MAX_LINE_CHARS:
        rest = len(line) - MAX_LINE_CHARS
        line = line[:MAX_LINE_CHARS]
        folds = [(a, min(b, MAX_LINE_CHARS)) for a, b in folds if a < MAX_LINE_CHARS]
        cut = f'<span class="cut"> … {rest:,} more characters (in the download)</span>'
    if not folds:
        return highlight(lexer, line, marks) + cut
    out: list[str] = []
    pos = 0
    for start, end in folds:
        out.append(highlight(lexer, line[pos:start], _shifted(marks, pos)))
        hidden = highlight(lexer, line[start:end], _shifted(marks, start))
        out.append(f'<span class="fm" aria-hidden="true">…</span><span class="fd">{hidden}</span>')
        pos = end
    out.append(highlight(lexer, line[pos:], _shifted(marks, pos)))
    return "".join(out) + cut
