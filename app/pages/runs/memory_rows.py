"""The rows of the memory report's tables (`app.pages.runs.memory`): one per buffer and one
per block reserved whole.

A buffer's row names where it came from in the user's words: the line of the user's own
file that made it (linked to that line beside the HLO), the installed library's line
under it (a flax layer's), or, for a parameter, its argument's pytree path
(`params/blocks/0/w`). A block's row says its size, what of it is live at the peak and
the value whose top sets its size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from app.ir.sent import short_file
from app.ir.view import Keys
from workers.protocol import MemoryBlock, MemoryBuffer
from workers.protocol.hlo import top_level_parts
from workers.protocol.sizes import byte_text as gb


@dataclass(frozen=True)
class Link:
    text: str
    href: str
    title: str = ""
    """The whole of what the text shortens (a file's full path), for a tooltip."""


def _place(source: str | None) -> tuple[str, int] | None:
    if not source or ":" not in source:
        return None
    file, _, line = source.rpartition(":")
    return (file, int(line)) if line.isdigit() else None


def source_link(job_id: str, source: str | None, keys: Keys) -> Link | None:
    """A buffer's `file:line` as the IR view keys it, linked to that line's source panel;
    its text the file's own name and the line (the whole path in its title)."""
    place = _place(source)
    if place is None:
        return None
    file, line = place
    key = keys.key([place])
    name = file.replace("\\", "/").rsplit("/", 1)[-1]
    text = f"line {key}" if ":" not in key else f"{name}:{line}"
    return Link(text, f"/runs/{job_id}/ir/hlo?src={quote(key, safe='')}", f"{file}:{line}")


def library_text(library: str | None) -> str | None:
    """The library's frame as the pages name an installed file: from its package on."""
    place = _place(library)
    return f"{short_file(place[0])}:{place[1]}" if place is not None else None


_LAYOUT = re.compile(r"\{[^{}]*\}|/\*[^*]*\*/")


def shown_shape(shape: str) -> str:
    """A shape as the table shows it: a tuple (a table of pointers, whose shape can name a
    hundred elements) by its count and first two elements, layouts left out."""
    if not shape.startswith("("):
        return shape
    parts = top_level_parts(_LAYOUT.sub("", shape[1:-1]))
    if len(parts) <= 3:
        return f"({', '.join(parts)})"
    return f"a tuple of {len(parts)}: ({', '.join(parts[:2])}, …)"


def breakable(text: str | None, joints: str = "/;") -> list[str]:
    """`text` in pieces after each of its `joints` (a JAX op name's or a pytree path's `/`
    and `;`, a shape's `,`), so that a cell breaks it only there."""
    if not text:
        return []
    pieces, start = [], 0
    for i, c in enumerate(text):
        if c in joints and i + 1 < len(text):
            pieces.append(text[start : i + 1])
            start = i + 1
    return [*pieces, text[start:]]


@dataclass(frozen=True)
class BufferRow:
    """One row of the buffers table (attributes, not a dict: a 200-row table reads them
    thousands of times)."""

    bytes: int
    size: str
    held: str | None
    """Where it holds less than its bytes at the peak (an output's buffer lent to a
    temporary): how much it holds."""
    padding: int | None
    padding_text: str
    kind: str
    instructions: list[Link]
    shape: list[str]
    layout: str | None
    op_name: list[str]
    source: Link | None
    library: str | None
    argument: list[str]
    """A parameter's argument, by its pytree path (in pieces, as `breakable`)."""
    live: str
    offset: str
    reserved: bool
    """A parameter, output or constant holding its bytes at the peak before (or after)
    its value is live."""


def buffer_row(job_id: str, b: MemoryBuffer, keys: Keys, peak_step: int) -> BufferRow:
    """One row of the buffers table."""
    padding = b.bytes - b.logical_bytes if b.logical_bytes is not None else None
    links = [
        Link(n, f"/runs/{job_id}/ir/hlo?q={quote('%' + n + ' =', safe='')}") for n in b.instructions
    ]
    reserved = b.live_at_peak and b.kind in ("parameter", "output", "constant")
    op_name = "; ".join(dict.fromkeys(b.op_name.split(";"))) if b.op_name else None
    return BufferRow(
        bytes=b.bytes,
        size=gb(b.bytes),
        held=gb(b.held) if b.live_at_peak and b.held < b.bytes else None,
        padding=padding,
        padding_text=gb(padding) if padding else ("0" if padding == 0 else "—"),
        kind=b.kind,
        instructions=links,
        shape=breakable(shown_shape(b.shape), ","),
        layout=b.layout,
        op_name=breakable(op_name if op_name != b.parameter_path else None),
        source=source_link(job_id, b.source, keys),
        library=library_text(b.library),
        argument=breakable(b.parameter_path) if b.kind == "parameter" else [],
        live=f"{b.live[0]:,}–{b.live[1]:,}",
        offset=f"{b.offset:,}",
        reserved=reserved and not b.live[0] <= peak_step <= b.live[1],
    )


@dataclass(frozen=True)
class BlockRow:
    """One row of the blocks table."""

    name: str
    size: str
    bytes: int
    live: str | None
    counted: str | None
    top: Link | None
    top_at: str | None
    source: Link | None
    why: str


def _at(size: int, offset: int, live: list[int]) -> str:
    return f"{gb(size)} at offset {offset:,}, live at steps {live[0]:,}–{live[1]:,}"


def block_row(job_id: str, k: MemoryBlock, keys: Keys) -> BlockRow:
    """A block reserved whole: its size, what of it is live or counted at the peak, and
    the value at its top."""
    value = k.set_by
    top = None
    if value is not None:
        href = f"/runs/{job_id}/ir/hlo?q={quote('%' + value.instruction + ' =', safe='')}"
        top = Link(value.instruction, href)
    return BlockRow(
        name=k.name,
        size=gb(k.bytes),
        bytes=k.bytes,
        live=gb(k.live_bytes) if k.memory_space == 0 else None,
        counted=gb(k.counted_bytes) if k.counted_bytes else None,
        top=top,
        top_at=_at(value.bytes, value.offset, value.live) if value is not None else None,
        source=source_link(job_id, value.source, keys) if value is not None else None,
        why=k.why,
    )
