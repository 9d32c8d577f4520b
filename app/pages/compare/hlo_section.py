"""What the compare page's "What changed" section and the full HLO-diff listing show of
two runs' HLO diff (`app.pages.compare.hlo_changes` works it out and caches it).

A large pair takes a second or two the first time, so the diff is computed in a worker
thread (two at most), never on the event loop.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import anyio

from app.dispatch import Dispatcher
from app.pages.compare.hlo_changes import HloDiffMissing, HloDiffUnreadable, hlo_report
from app.pages.compare.hlo_words import groups
from app.pages.jobs import PREFIX

TOP = 10
"""Rows per group on the compare page; the full listing has them all."""
MAX_ROWS = 2000
"""Rows per group on the full listing (the JSON has every one)."""

DIFFERS = anyio.CapacityLimiter(2)
"""How many diffs are worked out at once, each in a worker thread (a large one holds a
few hundred MB while it runs); more requests wait their turn."""


async def report(dispatcher: Dispatcher, a: str, b: str) -> dict[str, Any]:
    """The report of job `a` against job `b`, worked out off the event loop; HloDiffMissing."""
    return await anyio.to_thread.run_sync(hlo_report, dispatcher.store, a, b, limiter=DIFFERS)


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
        "groups": groups(report, top if top is not None else MAX_ROWS),
        "full": top is None,
        "links": links(report["a"], report["b"]),
        "unreadable": None,
    }


async def changes_section(dispatcher: Dispatcher, a: str, b: str) -> dict[str, Any] | None:
    """The compare page's section for the first runs of its two sides; None while a side
    has no HLO (still queued, or a path without XLA)."""
    try:
        found = await report(dispatcher, a, b)
    except HloDiffMissing:
        return None
    except HloDiffUnreadable as exc:  # said on the page, never a broken page
        return {"a": a, "b": b, "unreadable": str(exc), "sentences": [], "groups": [],
                "links": links(a, b), "full": False}  # fmt: skip
    return section(found, TOP)
