"""One context per reader view, rendered three ways: page, htmx fragment and JSON.

Contexts are plain dicts of content models; `*_json` functions turn the same context into
the JSON twin, so the page and its `.json` can never disagree.
"""

from __future__ import annotations

from typing import Any

from app.reader.card_jobs import describe, form_fields
from app.reader.content import READER_PATHS, READER_STAGES
from app.reader.diagram import pipeline
from app.reader.models import Content
from workers.protocol import PathId, StageId


def reader_url(path: PathId | str, stage: StageId | str) -> str:
    return f"/read/{PathId(path).value}/{StageId(stage).value}"


def embed_url(path: PathId | str, stage: StageId | str) -> str:
    return f"/embed/{PathId(path).value}/{StageId(stage).value}"


def reader_context(
    content: Content, path: PathId, stage: StageId, public_base: str
) -> dict[str, Any]:
    """Everything the reader shows for one path at one stage."""
    card = content.card(path, stage)
    info = content.paths[path]
    here = reader_url(path, stage)
    return {
        "site": content.site,
        "content_version": content.version,
        "paths": [content.paths[p] for p in READER_PATHS],
        "stages": [content.stages[s].on(path) for s in READER_STAGES],
        "path": info,
        "stage": content.stages[stage].on(path),
        "card": card,
        "boundary": next(b for b in info.boundaries if b.stage == stage),
        "section": content.section(card.guide_section),
        "sources": [content.sources[s] for s in card.sources],
        "hardware": content.hardware,
        "diagram": pipeline(info, stage.value, title_id=f"diagram-{path.value}"),
        "links": {
            "self": here,
            "json": here + ".json",
            "embed": embed_url(path, stage),
            "guide": f"/guide#{card.guide_section}",
            "oembed": public_base + "/oembed?url=" + public_base + here,
        },
        "public_base": public_base,
        "card_job": _card_job(card.job),
        "pallas_job": _card_job(card.pallas.job) if card.pallas else None,
    }


def _card_job(job: Any) -> dict[str, Any] | None:
    """The card's catalog job: its command line, the run form's fields and its claims."""
    if job is None:
        return None
    return {
        "command": "boundary run " + describe(job),
        "target": job.target,
        "fields": form_fields(job),
        "claims": [c.says for c in job.claims],
    }


def reader_json(ctx: dict[str, Any]) -> dict[str, Any]:
    """The JSON twin of a reader page."""
    card = ctx["card"]
    return {
        "path": ctx["path"].model_dump(mode="json", include={"id", "label", "short", "hardware"}),
        "stage": ctx["stage"].model_dump(mode="json"),
        "card": card.model_dump(mode="json"),
        "diagram": {
            "steps": [s.model_dump(mode="json") for s in ctx["path"].steps],
            "boundary": ctx["boundary"].model_dump(mode="json"),
        },
        "guide_section": {"id": ctx["section"].id, "title": ctx["section"].title},
        "sources": [s.model_dump(mode="json") for s in ctx["sources"]],
        "links": ctx["links"],
        "content_version": ctx["content_version"],
    }


def guide_context(content: Content) -> dict[str, Any]:
    """The full explanation, every section, and the hardware facts."""
    return {
        "site": content.site,
        "content_version": content.version,
        "guide": content.guide,
        "hardware": content.hardware,
        "sources": content.sources,
        "paths": [content.paths[p] for p in READER_PATHS],
        "stages": [content.stages[s] for s in READER_STAGES],
        "cards_by_section": {
            s.id: [c for c in content.cards.values() if c.guide_section == s.id]
            for s in content.guide.sections
        },
        "links": {"self": "/guide", "json": "/guide.json"},
    }


def guide_json(ctx: dict[str, Any]) -> dict[str, Any]:
    return {
        "guide": ctx["guide"].model_dump(mode="json"),
        "hardware": ctx["hardware"].model_dump(mode="json"),
        "sources": {k: v.model_dump(mode="json") for k, v in ctx["sources"].items()},
        "content_version": ctx["content_version"],
    }


def not_found_context(content: Content, what: str) -> dict[str, Any]:
    """A 404 that lists what does exist."""
    return {
        "site": content.site,
        "content_version": content.version,
        "what": what,
        "valid_paths": [p.value for p in READER_PATHS],
        "valid_stages": [s.value for s in READER_STAGES],
        "examples": [reader_url(p, s) for p in READER_PATHS for s in READER_STAGES],
        "links": {"self": None, "json": None},
    }
