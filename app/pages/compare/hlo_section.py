"""What the compare page's "What changed" section and the full HLO-diff listing show of
two runs' HLO diff (`app.pages.compare.hlo_changes` builds its report).

A large pair takes seconds the first time; `app.pages.compare.hlo_diffs` works it out off
the event loop, once, and keeps its report.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from app.pages.compare.hlo_changes import HloDiffMissing, HloDiffUnreadable
from app.pages.compare.hlo_diffs import HloDiffs
from app.pages.compare.hlo_words import groups
from app.pages.jobs import PREFIX

TOP = 10
"""Rows per group on the compare page; the full listing has them all."""
MAX_ROWS = 2000
"""Rows per group on the full listing (the JSON has every one)."""


def links(a: str, b: str) -> dict[str, str]:
    query = urlencode({"a": a, "b": b})
    return {"all": f"/compare/hlo-diff?{query}", "json": f"{PREFIX}/compare/hlo-diff?{query}"}


def section(report: dict[str, Any], top: int | None) -> dict[str, Any]:
    """What the "What changed" section shows: the sentences and the groups' first `top`
    rows (all rows, up to MAX_ROWS a group, for None)."""
    return {
        "a": report["a"],
        "b": report["b"],
        "summary": report["summary"],
        "sentences": report["sentences"],
        "compilers": report["compilers"],
        "truncated": report["truncated"],
        "groups": groups(report, top if top is not None else MAX_ROWS),
        "full": top is None,
        "links": links(report["a"], report["b"]),
        "unreadable": None,
    }


async def changes_section(diffs: HloDiffs, a: str, b: str) -> dict[str, Any] | None:
    """The compare page's section for the first runs of its two sides; None while a side
    has no HLO (still queued, or a path without XLA)."""
    try:
        found = await diffs.report(a, b)
    except HloDiffMissing:
        return None
    except HloDiffUnreadable as exc:  # said on the page, never a broken page
        return {"a": a, "b": b, "unreadable": str(exc), "sentences": [], "groups": [],
                "links": links(a, b), "full": False, "truncated": None}  # fmt: skip
    return section(found, TOP)
