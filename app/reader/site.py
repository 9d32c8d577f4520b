"""Render every reader view once per content version.

The server serves the result from memory (app.fastpath); `boundary export` writes the
same renderings to disk with relative links. One function builds both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment

from app.assets import Asset
from app.reader.content import READER_PATHS, READER_STAGES, Content
from app.reader.views import (
    embed_url,
    guide_context,
    guide_json,
    reader_context,
    reader_json,
    reader_url,
)

HTML = "text/html; charset=utf-8"
JSON = "application/json"


@dataclass(frozen=True)
class Rendered:
    """One URL's rendering: the page, and the htmx fragment where there is one."""

    url: str
    body: bytes
    content_type: str
    fragment: bytes | None = None


Linker = Callable[[str], Callable[[str], str]]


def dump_json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2).encode()


def render_site(
    content: Content,
    env: Environment,
    assets: dict[str, Asset],
    *,
    linker: Linker,
    export: bool = False,
    public_base: str = "",
) -> list[Rendered]:
    """Every reader page, fragment, embed and JSON twin, plus the guide."""

    def render(template: str, current: str, ctx: dict[str, Any], **extra: Any) -> bytes:
        link = linker(current)

        def static(name: str) -> str:
            return link(f"/static/{name}") if export else assets[name].url

        params = {"export": export, "embed": False, "fragment": False, **ctx, **extra}
        return env.get_template(template).render(link=link, static=static, **params).encode()

    out: list[Rendered] = []
    for path in READER_PATHS:
        for stage in READER_STAGES:
            url = reader_url(path, stage)
            ctx = reader_context(content, path, stage, public_base)
            page = render("reader.html", url, ctx, nav="reader")
            fragment = render("_reader.html", url, ctx, nav="reader", fragment=True)
            out.append(Rendered(url, page, HTML, fragment))
            out.append(Rendered(url + ".json", dump_json(reader_json(ctx)), JSON))
            eurl = embed_url(path, stage)
            out.append(Rendered(eurl, render("embed.html", eurl, ctx, embed=True), HTML))
            if (path, stage) == (content.site.default_path, content.site.default_stage):
                home = render("reader.html", "/", ctx, nav="reader")
                out.append(Rendered("/", home, HTML, fragment))
    gctx = guide_context(content)
    out.append(Rendered("/guide", render("guide.html", "/guide", gctx, nav="guide"), HTML))
    out.append(Rendered("/guide.json", dump_json(guide_json(gctx)), JSON))
    return out
