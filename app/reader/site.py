"""Render every reader view once per content version.

The server serves the result from memory (app.web.fastpath); `boundary export` writes the
same renderings to disk with relative links. One function builds both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from jinja2 import Environment

from app.reader.content import READER_PATHS, READER_STAGES, Content
from app.reader.tour import GPU_JOB, TPU_JOB, command, run_form_fields
from app.reader.views import (
    embed_url,
    guide_context,
    guide_json,
    reader_context,
    reader_json,
    reader_url,
)
from app.web.assets import Asset
from workers.protocol import PathId, StageId

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


@dataclass(frozen=True)
class Deferred:
    """A rendering not made yet: the server makes each on its first request, so start-up
    stays fast; the export makes them all at once."""

    url: str
    make: Callable[[], Rendered]


def names_origin(url: str) -> bool:
    """Whether the rendering at `url` writes the site's origin into its text (a reader page
    with its embed snippet and oEmbed discovery link; not twins, embeds or the guide)."""
    return url == "/" or (url.startswith("/read/") and not url.endswith(".json"))


def render_site(
    content: Content,
    env: Environment,
    assets: dict[str, Asset],
    *,
    linker: Linker,
    export: bool = False,
    public_base: str = "",
) -> list[Deferred]:
    """Every reader page, fragment, embed and JSON twin, plus the guide, deferred."""

    def render(template: str, current: str, ctx: dict[str, Any], **extra: Any) -> bytes:
        link = linker(current)

        def static(name: str) -> str:
            return link(f"/static/{name}") if export else assets[name].url

        params = {"export": export, "embed": False, "fragment": False, **ctx, **extra}
        return env.get_template(template).render(link=link, static=static, **params).encode()

    def reader(path: PathId, stage: StageId, url: str) -> Rendered:
        ctx = reader_context(content, path, stage, public_base)
        page = render(
            "reader.html", url, ctx, nav="reader", tour=tour_context() if url == "/" else None
        )
        fragment = render("_reader.html", url, ctx, nav="reader", fragment=True)
        return Rendered(url, page, HTML, fragment)

    def tour_context() -> dict[str, Any]:
        return {
            "fields": run_form_fields(TPU_JOB),
            "tpu": command(TPU_JOB),
            "gpu": command(GPU_JOB),
            "size": "8192³ bfloat16",
        }

    def twin(path: PathId, stage: StageId, url: str) -> Rendered:
        return Rendered(url, dump_json(reader_json(reader_context(content, path, stage, ""))), JSON)

    def embed(path: PathId, stage: StageId, url: str) -> Rendered:
        ctx = reader_context(content, path, stage, public_base)
        return Rendered(url, render("embed.html", url, ctx, embed=True), HTML)

    def guide() -> Rendered:
        return Rendered(
            "/guide", render("guide.html", "/guide", guide_context(content), nav="guide"), HTML
        )

    def guide_twin() -> Rendered:
        return Rendered("/guide.json", dump_json(guide_json(guide_context(content))), JSON)

    out: list[Deferred] = []
    for path in READER_PATHS:
        for stage in READER_STAGES:
            url, eurl = reader_url(path, stage), embed_url(path, stage)
            out.append(Deferred(url, partial(reader, path, stage, url)))
            out.append(Deferred(url + ".json", partial(twin, path, stage, url + ".json")))
            out.append(Deferred(eurl, partial(embed, path, stage, eurl)))
    home = (content.site.default_path, content.site.default_stage)
    out.append(Deferred("/", partial(reader, *home, "/")))
    out.append(Deferred("/guide", guide))
    out.append(Deferred("/guide.json", guide_twin))
    return out
