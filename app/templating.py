"""The Jinja2 environment and the filters templates share.

Links go through `link()`, which is the identity on the server and a relative file path in
a static export, so the same templates serve both.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from functools import lru_cache

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

from app.settings import REPO_ROOT

TEMPLATE_DIR = REPO_ROOT / "templates"

_INLINE_CODE = re.compile(r"`([^`]+)`")


def inline(text: str) -> Markup:
    """Escape prose and render `backticked` identifiers as <code>."""
    escaped = str(escape(text))
    return Markup(_INLINE_CODE.sub(r"<code>\1</code>", escaped))


@lru_cache(maxsize=256)
def highlight_code(text: str, language: str) -> Markup:
    """Syntax-highlighted HTML for a code example (Pygments, CSS classes, no inline styles)."""
    lexer = get_lexer_by_name({"cuda": "cuda", "python": "python", "bash": "bash"}[language])
    formatter = HtmlFormatter(cssclass="hl", wrapcode=True)
    return Markup(highlight(text, lexer, formatter))


def export_file(url: str) -> str:
    """Where a site URL lives in a static export, relative to the export's root."""
    path, _, fragment = url.partition("#")
    path = path.split("?", 1)[0]
    if path in ("", "/"):
        target = "index.html"
    elif path.startswith("/static/") or path.endswith(".json"):
        target = path.lstrip("/")
    else:
        target = path.strip("/") + ".html"
    return target + (f"#{fragment}" if fragment else "")


def server_linker(_current: str) -> Callable[[str], str]:
    """Links as the server serves them: unchanged."""
    return lambda url: url


def export_linker(current: str) -> Callable[[str], str]:
    """Links between exported files, relative to the file for `current`."""
    here = posixpath.dirname(export_file(current))

    def link(url: str) -> str:
        if url.startswith(("http://", "https://", "#")):
            return url
        target = export_file(url)
        path, _, fragment = target.partition("#")
        rel = posixpath.relpath(path, here or ".")
        return rel + (f"#{fragment}" if fragment else "")

    return link


def make_environment() -> Environment:
    """A fresh template environment (one per app, so tests never share state)."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        autoescape=select_autoescape(["html", "svg", "xml"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["inline"] = inline
    env.filters["highlight"] = highlight_code
    return env


def pygments_css() -> str:
    """The stylesheet for highlighted code, scoped to `.hl`."""
    css: str = HtmlFormatter(style="friendly").get_style_defs(".hl")  # type: ignore[no-untyped-call]
    return css
