"""One artifact as the IR view shows it: a page of lines, search hits, source links.

The view is built on the server so that it works without JavaScript: `start` pages
through the text, `q` filters it to matching lines, `src` selects one source line and
marks the IR lines it became. With JavaScript the same markup is searched and linked in
place and the next page loads when it scrolls into view.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from html import escape
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup
from pygments.lexers.python import PythonLexer

from app.ir.folds import BlockFold, block_folds, inline_folds
from app.ir.lexers import lexer_for
from app.ir.render import colour, highlight, line_html
from app.ir.sent import SentLines, sent_panel, short_file
from app.ir.sources import Position, SourceMap, source_map
from workers.protocol.hlo import library_file

PAGE_LINES = 500
"""Lines per page without JavaScript; the next page is a link."""
PART_LINES = 200
"""Lines per part that JavaScript loads as the reader scrolls: small, so that parsing and
laying out one part stays far below a 200 ms main-thread task on a slow machine."""
MAX_HITS = 200
"""Matching lines shown for one search."""

SASS_TERMS: tuple[str, ...] = (
    "HMMA", "IMMA", "HGMMA", "UTMALDG", "LDG", "STG", "LDS", "STS", "LDSM", "LDGSTS", "LDGDEPBAR",
    "DEPBAR", "BAR.SYNC", "SHFL", "FFMA", "FADD", "FMUL", "MUFU.EX2", "MUFU.RCP", "FMNMX",
    "IMAD", "IADD3", "LEA", "ISETP", "BRA", "EXIT", "RED", "ATOM", "MEMBAR", "S2R", "S2UR",
    "CS2R", "ULDC", "MOV", "F2F", "F2FP", "I2F", "WARPSYNC", "BSSY", "BSYNC", "CALL", "RET",
)  # fmt: skip
"""SASS opcodes worth searching for: tensor-core, memory, barrier and math instructions."""
BUNDLE_TERMS: tuple[str, ...] = (
    "vmatpush", "vmatmul", "vmatres", "mxu0", "mxu1", "vld", "vst", "dma", "sld", "sst",
    "vwait", "vsyncadd", "schedule:", "===== kernel",
)  # fmt: skip
"""TPU bundle words worth searching for: matrix-unit pushes and products, loads, stores,
DMAs and synchronisation, and each kernel's schedule line."""


@dataclass
class SourceText:
    """The workload function's source as the run carries it."""

    path: str
    first_line: int
    text: str
    sha256: str = ""
    function: str = ""

    @classmethod
    def from_run(cls, run: dict[str, Any] | None) -> SourceText | None:
        found = (run or {}).get("source")
        if not isinstance(found, dict) or not isinstance(found.get("text"), str):
            return None
        return cls(
            path=str(found.get("path", "")),
            first_line=int(found.get("first_line", 1)),
            text=found["text"],
            sha256=str(found.get("sha256", "")),
            function=str(found.get("function", "")),
        )


@dataclass
class Keys:
    """Source positions as the view names them: the workload's own lines by number, any
    other position as `file:line` with the file shortened."""

    path: str
    """The workload source's file; '' when the run carries no source."""

    def short(self, file: str) -> str:
        if self.path and file.endswith(self.path):
            return self.path
        return short_file(file)

    def key(self, chain: list[Position]) -> str:
        """The one position a line links to: the innermost in the workload's file, if any,
        else the innermost in the user's own files (outside installed packages)."""
        if self.path:
            for file, line in chain:
                if file.endswith(self.path):
                    return str(line)
        file, line = next(((f, n) for f, n in chain if not library_file(f)), chain[0])
        return f"{self.short(file)}:{line}"


@dataclass
class IrView:
    """Everything the `_ir.html` partial shows for one artifact."""

    name: str
    base: str
    total: int
    start: int
    end: int
    q: str
    src: str
    lines: Markup
    source: Markup | None
    source_title: str
    hits: int | None = None
    prev_url: str | None = None
    next_url: str | None = None
    more_url: str | None = None
    folded: int = 0
    terms: list[str] = field(default_factory=list)
    linked: int = 0
    max_hits: int = MAX_HITS
    source_unmapped: str = ""
    """The source the run sent when no line of this artifact maps into it (not shown)."""
    problem: str | None = None
    """Why the text's source positions could not be read, when they could not."""

    def url(self, **changes: str | int | None) -> str:
        params: dict[str, str | int] = {"q": self.q, "src": self.src}
        params.update({k: v for k, v in changes.items() if v is not None})
        kept = {k: v for k, v in params.items() if v not in ("", 0)}
        return self.base + ("?" + urlencode(kept) if kept else "")


def _line_div(
    view: IrView, n: int, body: str, key: str | None, *, extra: str = "", href: str = ""
) -> str:
    """One IR line: its number, the source line it came from (a link), its text."""
    selected = key is not None and key == view.src
    classes = ["l"]
    if key is not None:
        classes.append(f"s{colour(key)}")
        if selected:
            classes.append("sel")
    classes.append(extra)
    attrs = f' data-src="{escape(key)}"' if key is not None else ""
    link = href or f"#L{n}"
    gutter = f'<a class="n" href="{escape(link)}">{n}</a>'
    if key is not None:
        label = key if ":" in key else f"line {key}"
        gutter += (
            f'<a class="sr" href="{escape(view.url(q="", src=key))}#S-{escape(key)}" '
            f'title="source {escape(label)}">{escape(key.rsplit(":", 1)[-1])}</a>'
        )
    else:
        gutter += '<span class="sr"></span>'
    return (
        f'<div class="{" ".join(c for c in classes if c)}" id="L{n}"{attrs}>'
        f"{gutter}<code>{body}</code></div>"
    )


@dataclass(frozen=True)
class _Document:
    """What paging and search need from one artifact, worked out once per text."""

    lines: list[str]
    smap: SourceMap
    line_keys: dict[int, str]
    blocks: list[BlockFold]


@lru_cache(maxsize=6)
def _document(name: str, text: str, source_path: str, cut: bool) -> _Document:
    # Kept for the few artifacts being read: scrolling loads their next pages one by one.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    smap = source_map(name, lines, cut=cut)
    keys = Keys(source_path)
    line_keys = {i: keys.key(chain) for i, chain in smap.positions.items()}
    return _Document(lines, smap, line_keys, block_folds(name, lines))


def build_view(
    name: str,
    text: str,
    base: str,
    *,
    start: int | None = None,
    q: str = "",
    src: str = "",
    source: SourceText | None = None,
    part: bool = False,
    sent: SentLines | None = None,
    uploaded: bool = False,
    cut: bool = False,
) -> IrView:
    """The view of artifact `name` (text `text`, served at `base`) for these parameters.
    `sent`: the Python lines sent with an uploaded program (`uploaded`), shown beside the
    IR when the run carries no source of its own; `cut`: the text was stopped at the
    storage cap."""
    doc = _document(name, text, source.path if source is not None else "", cut)
    all_lines, line_keys, blocks = doc.lines, doc.line_keys, doc.blocks
    total = len(all_lines)
    lexer = lexer_for(name)
    block_at = {b.start: b for b in blocks}
    in_block = {i for b in blocks for i in range(b.start, b.end)}

    view = IrView(name, base, total, 0, 0, q, src, Markup(""), None, "")
    view.folded = sum(b.end - b.start for b in blocks)
    view.problem = doc.smap.problem
    view.linked = len(line_keys)
    if name == "sass":
        view.terms = _sass_terms(all_lines)
    elif name == "bundles":
        view.terms = list(BUNDLE_TERMS)

    def page_of(i: int) -> int:
        return (i // PAGE_LINES) * PAGE_LINES

    rows: list[str] = []
    if q:
        needle = q.lower()
        found = [i for i, line in enumerate(all_lines) if needle in line.lower()]
        view.hits = len(found)
        for i in found[:MAX_HITS]:
            key = line_keys.get(i)
            href = view.url(q="", start=page_of(i) + 1) + f"#L{i + 1}"
            line = all_lines[i]
            marks = [(m.start(), m.end()) for m in re.finditer(re.escape(q), line, re.IGNORECASE)]
            body = line_html(lexer, line, inline_folds(name, line), marks)
            rows.append(_line_div(view, i + 1, body, key, extra="hit", href=href))
        view.start, view.end = 0, total
    else:
        if start is None:
            first_src = next((i for i, k in sorted(line_keys.items()) if k == src), 0)
            first = page_of(first_src)
        else:
            first = max(0, min(start - 1, max(total - 1, 0)))
            first = first if part else page_of(first)  # a part starts where the last ended
        last = min(first + (PART_LINES if part else PAGE_LINES), total)
        view.start, view.end = first, last
        rows = _page_rows(
            view,
            all_lines,
            first=first,
            last=last,
            lexer=lexer,
            line_keys=line_keys,
            block_at=block_at,
            in_block=in_block,
        )
        if first > 0:
            view.prev_url = view.url(start=page_of(first - 1) + 1)
        if last < total:
            view.next_url = view.url(start=page_of(last) + 1)
            view.more_url = view.url(start=last + 1, part="lines")
    view.lines = Markup(_chunked(rows))
    view.source, view.source_title = _source_panel(source, line_keys, view, sent, uploaded)
    return view


CHUNK_ROWS = 50
"""Rows per chunk: the browser lays out and styles only the chunks near the visible part."""


def _chunked(rows: list[str]) -> str:
    """Rows in chunks the stylesheet marks `content-visibility: auto`, so a toggle or a
    scroll costs the visible chunks' layout, not all of a large page's."""
    # The comment between chunks lets ir.js insert a long answer one chunk per task.
    return "<!--chunk-->".join(
        '<div class="ir-chunk">' + "".join(rows[i : i + CHUNK_ROWS]) + "</div>"
        for i in range(0, len(rows), CHUNK_ROWS)
    )


def _page_rows(
    view: IrView,
    lines: list[str],
    *,
    first: int,
    last: int,
    lexer: Any,
    line_keys: dict[int, str],
    block_at: dict[int, BlockFold],
    in_block: set[int],
) -> list[str]:
    rows: list[str] = []
    for i in range(first, last):
        block = block_at.get(i)
        if block is not None:
            rows.append(
                f'<div class="fold-row"><label for="ir-unfold">⋯ {escape(block.label)} '
                f"folded: show them</label></div>"
            )
        key = line_keys.get(i)
        body = line_html(lexer, lines[i], inline_folds(view.name, lines[i]))
        rows.append(_line_div(view, i + 1, body, key, extra="fb" * (i in in_block)))
    return rows


def _sass_terms(lines: list[str]) -> list[str]:
    """The opcodes this SASS uses (most frequent first), then the common ones it lacks."""
    counts: dict[str, int] = {}
    for line in lines:
        if "*/" not in line or ";" not in line:
            continue
        body = line.split("*/", 1)[1].strip()
        if body.startswith("@"):
            body = body.split(None, 1)[-1]
        word = body.split(" ", 1)[0].rstrip(";")
        if word[:1].isupper():
            counts[word] = counts.get(word, 0) + 1
    seen = sorted(counts, key=lambda w: -counts[w])[:60]
    return seen + [t for t in SASS_TERMS if t not in counts]


NONE_SENT = (
    "Source positions the IR names. No Python lines were sent with this program "
    "(boundary export-fn --no-source, or uploaded without its .sources.json), so only "
    "file:line is shown"
)


def _source_panel(
    source: SourceText | None,
    line_keys: dict[int, str],
    view: IrView,
    sent: SentLines | None,
    uploaded: bool,
) -> tuple[Markup | None, str]:
    """The source beside the IR: the workload's function, the lines sent with an uploaded
    program, or the positions the IR names."""
    first_ir: dict[str, int] = {}
    counts: dict[str, int] = {}
    for i in sorted(line_keys):
        k = line_keys[i]
        first_ir.setdefault(k, i)
        counts[k] = counts.get(k, 0) + 1

    def target(k: str) -> str:
        return view.url(q="", src=k) + f"#L{first_ir[k] + 1}"

    if source is not None and not any(
        str(source.first_line + i) in counts for i in range(source.text.count("\n") + 1)
    ):
        # No IR line maps into it (SASS, PTX, a kernel's own IR): the source would take
        # half the width from the IR, and at a phone's width come before it, for nothing.
        view.source_unmapped = source.path
        return None, ""
    if source is not None:
        py = PythonLexer(stripnl=False, ensurenl=False)
        rows: list[str] = []
        for offset, line in enumerate(source.text.split("\n")):
            n = source.first_line + offset
            k = str(n)
            body = highlight(py, line)
            if k in counts:
                cls = f"sl s{colour(k)}" + (" sel" if k == view.src else "")
                many = "s" if counts[k] != 1 else ""
                rows.append(
                    f'<div class="{cls}" id="S-{k}" data-src="{k}">'
                    f'<a class="n" href="{escape(target(k))}" title="{counts[k]} {view.name} '
                    f'line{many}">{n}</a><span class="cnt">×{counts[k]}</span>'
                    f"<code>{body}</code></div>"
                )
            else:
                plain = f'<span class="n">{n}</span><span class="cnt"></span><code>{body}</code>'
                rows.append(f'<div class="sl" id="S-{k}">{plain}</div>')
        title = f"{source.path}, from line {source.first_line}"
        return Markup("".join(rows)), title
    if not counts:
        return None, ""
    if sent is not None:
        order = sorted(counts, key=lambda k: first_ir[k])
        panel = sent_panel(
            sent, counts, order, selected=view.src, target=target, artifact=view.name
        )
        cut = ", cut to its limits" if sent.cut else ""
        return panel, f"Your Python lines, as boundary export-fn sent them{cut}"
    rows = []
    for k in sorted(counts, key=lambda k: first_ir[k]):
        cls = f"sl s{colour(k)}" + (" sel" if k == view.src else "")
        rows.append(
            f'<div class="{cls}" id="S-{escape(k)}" data-src="{escape(k)}">'
            f'<span class="cnt">×{counts[k]}</span>'
            f'<a class="n name" href="{escape(target(k))}">{escape(k)}</a></div>'
        )
    title = NONE_SENT if uploaded else "Source positions the IR names (the server has no source)"
    return Markup("".join(rows)), title
