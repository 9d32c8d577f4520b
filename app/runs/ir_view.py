"""IR text as HTML: line-numbered, lightly highlighted, cheap enough for large modules.

Pygments has no lexer for MLIR or HLO, so a small tokenizer marks what a reader scans
for: op names, SSA values, types, attributes, comments, and collectives in bold colour.
PTX and SASS use Pygments' own lexers where they exist.
"""

from __future__ import annotations

import re
from html import escape

from markupsafe import Markup

COLLECTIVES = re.compile(
    r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"all_reduce|all_gather|reduce_scatter|all_to_all|collective_permute)\b"
)

_TOKEN = re.compile(
    r"(?P<comment>//.*$|#.*$)"
    r"|(?P<string>\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<value>%[\w.#-]+)"
    r"|(?P<op>\b(?:stablehlo|mhlo|func|sdy|chlo|tt|arith)\.[\w.]+)"
    r"|(?P<type>\b(?:tensor<[^>]*>|[fsu](?:8|16|32|64)\[[^\]]*\]|bf16\[[^\]]*\]|pred\[[^\]]*\]|"
    r"f32|f16|bf16|f64|s32|s64|u32|i1|i32|i64|pred)\b)"
    r"|(?P<attr>\b[a-z_]+(?==))",
    re.MULTILINE,
)

MAX_LINES_HIGHLIGHTED = 20_000


def _highlight_line(line: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(line):
        out.append(escape(line[pos : m.start()]))
        kind = m.lastgroup or "text"
        out.append(f'<span class="t-{kind}">{escape(m.group(0))}</span>')
        pos = m.end()
    out.append(escape(line[pos:]))
    html = "".join(out)
    return COLLECTIVES.sub(r'<mark class="collective">\1</mark>', html)


def render_ir(text: str) -> Markup:
    """An ordered list of lines; CSS numbers them, the browser's find searches them."""
    lines = text.splitlines()
    highlight = len(lines) <= MAX_LINES_HIGHLIGHTED
    items = "".join(
        f"<li>{_highlight_line(line) if highlight else escape(line)}</li>" for line in lines
    )
    return Markup(f'<ol class="ir-lines">{items}</ol>')
