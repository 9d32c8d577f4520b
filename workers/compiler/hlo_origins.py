"""Where each instruction of an optimized HLO module came from: its JAX operation
(`metadata={op_name=…}`) and the user's innermost source line.

A program compiled from source names its lines through `stack_frame_id=N`, resolved in
the module's StackFrames → FileLocations → FileNames tables; an uploaded program's HLO
has them written in as `source_file`/`source_line` (`workers.compiler.source_tags`).
Frames of Boundary's own code (the export wrapper, the worker's stages) are skipped.
Pure text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from workers.export.sources import boundary_frame
from workers.protocol.hlo import OP_NAME

_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_ROW = re.compile(r"^(\d{1,12})\s+(.*)$")
_FIELD = re.compile(r"\b(\w+)=(\d{1,12})(?!\d)")
_SOURCE = re.compile(r'\bsource_file="([^"]*)"\s+source_line=(\d{1,12})(?!\d)')
_FRAME = re.compile(r"\bstack_frame_id=(\d{1,12})(?!\d)")


@dataclass(frozen=True)
class Origin:
    op_name: str | None
    source: str | None
    """`file:line` as the program names the file, or None."""


def _tables(lines: list[str]) -> dict[str, dict[int, str]]:
    tables: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in lines:
        if line.startswith(("%", "ENTRY")):
            break  # the tables come before the first computation
        stripped = line.strip()
        if stripped in _TABLES:
            current = tables.setdefault(stripped, {})
        elif current is not None and (m := _ROW.match(stripped)):
            current[int(m[1])] = m[2]
        else:
            current = None
    return tables


def frame_sources(lines: list[str], own: Callable[[str], bool]) -> dict[int, str]:
    """Each stack frame's innermost position outside Boundary's code, as `file:line`."""
    tables = _tables(lines)
    files = {k: v.strip().strip('"') for k, v in tables.get("FileNames", {}).items()}
    places: dict[int, tuple[str, int]] = {}
    for k, row in tables.get("FileLocations", {}).items():
        fields = dict(_FIELD.findall(row))
        if "file_name_id" in fields and "line" in fields:
            places[k] = (files.get(int(fields["file_name_id"]), "?"), int(fields["line"]))
    frames: dict[int, tuple[int, int]] = {}
    for k, row in tables.get("StackFrames", {}).items():
        fields = dict(_FIELD.findall(row))
        frames[k] = (int(fields.get("file_location_id", 0)), int(fields.get("parent_frame_id", 0)))
    found: dict[int, str] = {}
    for start in frames:
        frame, seen = start, set()
        while frame in frames and frame not in seen:  # a frame may name itself as parent
            seen.add(frame)
            location, frame = frames[frame]
            place = places.get(location)
            if place is not None and not own(place[0]):
                found[start] = f"{place[0]}:{place[1]}"
                break
    return found


def instruction_origins(
    hlo: str, wanted: Collection[str], own: Callable[[str], bool] = boundary_frame
) -> dict[str, Origin]:
    """The origin of each instruction named in `wanted` that the module defines."""
    lines = hlo.splitlines()
    frames: dict[int, str] | None = None
    found: dict[str, Origin] = {}
    for line in lines:
        head, sep, _ = line.partition(" = ")
        if not sep:
            continue
        name = head.strip().removeprefix("ROOT ").lstrip("%")
        if name not in wanted:
            continue
        meta = line.rfind("metadata={")
        tail = line[meta:] if meta >= 0 else ""
        op = OP_NAME.search(tail)
        source = None
        if (m := _SOURCE.search(tail)) is not None and not own(m[1]):
            source = f"{m[1]}:{m[2]}"
        elif (m := _FRAME.search(tail)) is not None:
            frames = frame_sources(lines, own) if frames is None else frames
            source = frames.get(int(m[1]))
        # The HLO printer escapes quotes in names (params[\'embed\']): read them back.
        op_name = op[1].replace("\\'", "'") if op else None
        found[name] = Origin(op_name, source)
    return found
