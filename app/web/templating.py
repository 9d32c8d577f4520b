"""The Jinja2 environment and the filters templates share.

Links go through `link()`, which is the identity on the server and a relative file path in
a static export, so the same templates serve both.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from types import CodeType

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from jinja2.bccache import Bucket, BytecodeCache
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

from app.settings import REPO_ROOT
from app.web.units import format_seconds, format_si
from workers.catalog.exported import STAND_IN_TOO_BIG
from workers.protocol.targets import CHIPS, TargetModel

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
    html = highlight(text, lexer, formatter)
    # The block scrolls sideways on a phone: keyboard users must be able to reach it.
    return Markup(html.replace('<div class="hl">', '<div class="hl" tabindex="0">', 1))


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


def plural(count: int, one: str, many: str | None = None) -> str:
    """'1 fusion', '2 fusions' (`many` for irregular words: 'copy', 'copies')."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def relative_time(iso_time: str | None, now: datetime | None = None) -> Markup:
    """A <time> saying how long ago `iso_time` was ('3 min ago'), the exact UTC time on hover."""
    if not iso_time:
        return Markup("—")
    try:
        then = datetime.fromisoformat(iso_time)
    except ValueError:
        return Markup("{}").format(iso_time)
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0.0, ((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 45:
        ago = "just now"
    elif seconds < 3600:
        ago = f"{round(seconds / 60) or 1} min ago"
    elif seconds < 86400:
        ago = plural(round(seconds / 3600), "hour") + " ago"
    else:
        ago = plural(round(seconds / 86400), "day") + " ago"
    exact = then.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso_time, exact, ago)


def outliers_text(outliers: str | None) -> str:
    """pytest-benchmark's 'a;b' outlier counts, said in words."""
    if not outliers or ";" not in outliers:
        return outliers or "—"
    beyond_stddev, beyond_iqr = outliers.split(";", 1)
    return (
        f"{outliers}: {beyond_stddev} beyond 1 standard deviation of the mean; "
        f"{beyond_iqr} beyond 1.5 IQR outside the quartiles"
    )


UNCHECKED = "output unchecked"


def unchecked_why(detail: str | None) -> str:
    """Why an output went unchecked, without the words the verdict beside it already says
    ("output unchecked: no reference …" → "no reference …")."""
    text = detail or ""
    if text.startswith(UNCHECKED):
        text = text[len(UNCHECKED) :].lstrip(": ")
    return text


def unchecked_advice(detail: str | None) -> str:
    """What a user can do about an output that went unchecked, by why it did."""
    if STAND_IN_TOO_BIG in (detail or ""):
        return (
            "upload reference outputs made elsewhere (params.reference: an .npz, whole or "
            "sampled), or run it on a worker whose job limit (BOUNDARY_MAX_JOB_BYTES) leaves "
            "room for the CPU run"
        )
    return (
        "upload reference outputs (an .npz) with the function, or export it for CPU too so a "
        "CPU run can stand in on other paths"
    )


DEVICELESS = "Compiled without the hardware:"
"""How a worker's warning about a compile without the hardware begins
(workers/run/deviceless.py): the run page's verdict says it, so its list of warnings does not."""


def beyond_verdict(warnings: list[str], deviceless: bool) -> list[str]:
    """A run's warnings without the one its verdict already says: that nothing was executed
    on a target compiled without the hardware."""
    return [w for w in warnings if not (deviceless and w.startswith(DEVICELESS))]


def chip_name(model: str) -> str:
    """A target model's published name ("v6e" → "TPU v6e (Trillium)"), or the id itself."""
    try:
        return CHIPS[TargetModel(model)].name
    except ValueError:
        return model


def capitalize_first(text: str) -> str:
    """`text` with its first letter upper case and the rest as written."""
    return text[:1].upper() + text[1:]


class CompiledTemplates(BytecodeCache):
    """Every template's compiled code, shared by the environments of one process.

    Compiling a template is most of the first render of a page (about 60 ms for a run
    page), and each app has its own environment: a process that builds many apps (the
    tests build hundreds) compiles each template once. Jinja keys a template by its name
    and file and checks the checksum of its source, so an edited template is compiled
    again. Only `make_environment` uses it: every environment it makes has the same
    options and filters, which compiled code depends on."""

    def __init__(self) -> None:
        self._code: dict[str, tuple[str, CodeType]] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        kept = self._code.get(bucket.key)
        if kept is not None and kept[0] == bucket.checksum:
            bucket.code = kept[1]

    def dump_bytecode(self, bucket: Bucket) -> None:
        if bucket.code is not None:
            self._code[bucket.key] = (bucket.checksum, bucket.code)


COMPILED = CompiledTemplates()


def make_environment() -> Environment:
    """A fresh template environment (one per app, so tests never share state; only the
    templates' compiled code is shared, `CompiledTemplates`)."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATE_DIR),
        autoescape=select_autoescape(["html", "svg", "xml"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=COMPILED,
    )
    env.filters["inline"] = inline
    env.filters["highlight"] = highlight_code
    env.filters["plural"] = plural
    env.filters["ago"] = relative_time
    env.filters["outliers"] = outliers_text
    env.filters["unchecked_why"] = unchecked_why
    env.filters["unchecked_advice"] = unchecked_advice
    env.filters["capitalize_first"] = capitalize_first
    env.filters["beyond_verdict"] = beyond_verdict
    env.filters["chip_name"] = chip_name
    env.filters["seconds"] = format_seconds  # the run pages' units, on every page
    env.filters["si"] = format_si
    return env


CODE_BACKGROUND = "#f0f0f0"
"""The code blocks' background (the style's own): every token colour is checked against it."""
MIN_CONTRAST = 4.5
"""WCAG AA for body text."""


def _luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    channels = [int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg: str, bg: str) -> float:
    """The WCAG contrast ratio of two #rgb or #rrggbb colours."""
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def _readable(hex_colour: str, bg: str = CODE_BACKGROUND) -> str:
    """`hex_colour`, darkened in steps (keeping its hue) until it reads on `bg`."""
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    rgb = [int(h[i : i + 2], 16) for i in (0, 2, 4)]
    out = "#" + h.lower()
    while contrast(out, bg) < MIN_CONTRAST:
        rgb = [int(c * 0.9) for c in rgb]
        out = "#" + "".join(f"{c:02x}" for c in rgb)
    return out


@lru_cache(maxsize=1)
def pygments_css() -> str:
    """The stylesheet for highlighted code, scoped to `.hl`; every colour is darkened where
    needed to meet 4.5:1 on the code background (the style's comments are lighter). Made
    once per process: it depends on the installed Pygments alone."""
    css: str = HtmlFormatter(style="friendly").get_style_defs(".hl")  # type: ignore[no-untyped-call]
    return re.sub(
        r"(?<![-\w])color: (#[0-9A-Fa-f]{6}|#[0-9A-Fa-f]{3})\b",
        lambda m: "color: " + _readable(m.group(1)),
        css,
    )
