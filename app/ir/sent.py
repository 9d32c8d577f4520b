"""The Python lines `boundary export-fn` sent with an uploaded program, as the IR view and
the run page show them.

The IR names a position as `file:line` (the file shortened by `short_file`); the lines
sent are looked up under the same key. The source panel then shows, per file, each line
the IR names with the lines sent around it, the named ones linked to their IR lines like
a catalog workload's own source. The text is the user's, sent over the network: it is
escaped (and highlighted) here, never trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from markupsafe import Markup
from pygments.lexers.python import PythonLexer

from app.ir.render import colour, highlight
from workers.catalog.jaxexport import SentSources

SHOWN_AROUND = 2
"""Lines shown before and after each line the IR names, of those sent."""
CELL_CHARS = 120
"""Characters of a line shown in a table cell (the panel shows it whole)."""


def short_file(file: str) -> str:
    """A file as the pages name it: an installed package's path from the package on."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


@dataclass(frozen=True)
class SentLines:
    """The lines sent with a program, by the file as the pages name it."""

    files: dict[str, dict[int, str]]
    cut: bool = False

    @classmethod
    def of(cls, sent: SentSources) -> SentLines:
        files: dict[str, dict[int, str]] = {}
        for f in sent.files:
            files.setdefault(short_file(f.path), {}).update(f.lines)
        return cls(files, sent.cut)

    def text(self, key: str) -> str | None:
        """The line a `file:line` key names, if it was sent."""
        file, _, line = key.rpartition(":")
        return self.files.get(file, {}).get(int(line)) if line.isdigit() else None

    def cells(self, keys: list[str]) -> dict[str, str]:
        """Each key's line as a table cell shows it: stripped, and cut to CELL_CHARS."""
        found: dict[str, str] = {}
        for key in keys:
            text = (self.text(key) or "").strip()
            if text:
                found[key] = text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"
        return found


def sent_panel(
    sent: SentLines,
    counts: dict[str, int],
    order: list[str],
    *,
    selected: str,
    target: Callable[[str], str],
    artifact: str,
) -> Markup:
    """The source panel of an uploaded program's IR: for each file the IR names (in the
    order `order` first names them), the lines it names among those sent, with the lines
    sent around them; `counts` says how many `artifact` lines each key has, `target` where
    its link goes. A named line that was not sent is listed by its key alone."""
    py = PythonLexer(stripnl=False, ensurenl=False)
    by_file: dict[str, list[int]] = {}
    for key in order:
        file, _, line = key.rpartition(":")
        if line.isdigit():
            by_file.setdefault(file, []).append(int(line))
    rows: list[str] = []
    for file, named in by_file.items():
        lines = sent.files.get(file, {})
        rows.append(f'<div class="sl sf"><span class="n"></span><code>{escape(file)}</code></div>')
        shown = sorted(n for n in lines if any(abs(n - m) <= SHOWN_AROUND for m in named))
        for i, n in enumerate(shown):
            if i and n != shown[i - 1] + 1:
                rows.append('<div class="sl gap"><span class="n">⋯</span></div>')
            key = f"{file}:{n}"
            body = highlight(py, lines[n])
            if key not in counts:
                plain = f'<span class="n">{n}</span><span class="cnt"></span><code>{body}</code>'
                rows.append(f'<div class="sl">{plain}</div>')
                continue
            cls = f"sl s{colour(key)}" + (" sel" if key == selected else "")
            many = "s" if counts[key] != 1 else ""
            rows.append(
                f'<div class="{cls}" id="S-{escape(key)}" data-src="{escape(key)}">'
                f'<a class="n" href="{escape(target(key))}" title="{counts[key]} {artifact} '
                f'line{many}">{n}</a><span class="cnt">×{counts[key]}</span>'
                f"<code>{body}</code></div>"
            )
        for n in (m for m in named if m not in lines):
            key = f"{file}:{n}"
            cls = f"sl s{colour(key)}" + (" sel" if key == selected else "")
            rows.append(
                f'<div class="{cls}" id="S-{escape(key)}" data-src="{escape(key)}">'
                f'<span class="cnt">×{counts[key]}</span>'
                f'<a class="n name" href="{escape(target(key))}">{escape(key)}</a>'
                '<code class="meta"> (line not sent)</code></div>'
            )
    return Markup("".join(rows))
