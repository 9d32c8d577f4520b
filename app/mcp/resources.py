"""The reader's cards as MCP resources: one per path × stage, `boundary://cards/PATH/STAGE`.

Each reads the card's JSON twin (`/read/{path}/{stage}.json`) through the API and gives it
as Markdown: the explanation, what to inspect next, and the sources with their addresses,
so an assistant can cite them.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from app.mcp.api import BoundaryApi, Connect
from app.mcp.bounds import MAX_ANSWER_CHARS
from workers.protocol import PathId, StageId

CARD_PATHS = (PathId.JAX_GPU, PathId.JAX_TPU, PathId.CUDA)
"""The reader's paths (jax-cpu, the host reference, has no cards)."""

FIELDS = (
    ("programming_model", "Programming model"),
    ("execution_path", "Execution path"),
    ("boundary", "Timing boundary"),
    ("question", "The question"),
)


def card_uri(path: str, stage: str) -> str:
    return f"boundary://cards/{path}/{stage}"


def add_cards(server: MCPServer, connect: Connect) -> None:
    """One resource per card, read through `connect` (the reader needs no token)."""
    for path in CARD_PATHS:
        for stage in StageId:
            _add_card(server, connect, path.value, stage.value)


def _add_card(server: MCPServer, connect: Connect, path: str, stage: str) -> None:
    @server.resource(
        card_uri(path, stage),
        name=f"card-{path}-{stage}",
        title=f"The reader's card: {path}, {stage}",
        description=f"How the {path} path behaves at the {stage} stage, with its sources.",
        mime_type="text/markdown",
    )
    async def card() -> str:
        async with connect(None) as api:
            return await card_text(api, path, stage)


async def card_text(api: BoundaryApi, path: str, stage: str) -> str:
    """The card as Markdown, with its sources and the page's address; at most
    MAX_ANSWER_CHARS characters."""
    read = await api.get(f"/read/{path}/{stage}.json")
    card: dict[str, Any] = read["card"]
    lines = [f"# {card['title']}", "", card.get("summary") or "", ""]
    lines += [f"**{label}.** {card[key]}" for key, label in FIELDS if card.get(key)]
    lines += _listed("Assumptions", card.get("assumptions"))
    lines += _listed("Inspect next", card.get("inspect_next"))
    lines += ["", "## Sources", ""]
    lines += [f"- {s.get('title')} ({s.get('publisher')}): {s.get('url')}" for s in read["sources"]]
    page = api.address(read["links"]["self"])
    lines += ["", f"Page: {page} · guide: {api.address(read['links']['guide'])}"]
    text = "\n".join(lines)
    if len(text) > MAX_ANSWER_CHARS:
        note = f"\n… [cut: {len(text):,} characters in all; the page has the rest]"
        text = text[: MAX_ANSWER_CHARS - len(note)] + note
    return text


def _listed(heading: str, items: list[str] | None) -> list[str]:
    if not items:
        return []
    return ["", f"## {heading}", "", *(f"- {item}" for item in items)]
