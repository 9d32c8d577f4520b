"""Source positions for an uploaded artifact's optimized HLO.

Compiling a deserialized `jax.export.Exported` leaves no `stack_frame_id` (and no
`source_file` / `source_line`) in the optimized HLO: only `op_name` metadata survives,
and every dot shares one op name. The StableHLO the export holds still has each op's full
location: `loc("jit(forward)/dot_general"(callsite("heads"("model.py":92:20) at …)))`.

So before compiling, every located op of the lowered module (`lowered.compiler_ir()`, the
live module jax then compiles) is renamed `<its op name>#<n>`, its location kept inside.
XLA copies that name into the HLO's `op_name` (an `@…` suffix would be dropped; `#n`
survives on CPU, TPU and GPU), so each instruction names the ops it came from. After the
compile, `place_positions` takes the tags out again and writes the user's innermost
`file:line` into each instruction's metadata (`source_file`, `source_line`), where XLA
puts it for a program compiled from source: the IR views, the HLO summary and the
explained fusions then link to the user's lines as they do for a catalog workload.

The rename touches metadata only: opcodes, shapes, fusions and memory are the same as an
untagged compile's; XLA derives a few instruction names from op names, so those differ.
A fusion whose own metadata names nothing (a TPU output fusion) takes the first position
of the instructions it fused; an instruction that names nothing at all (XLA:GPU's
combined all-reduce of several gradients) takes that of the values it reads, up to three
steps back. Frames of Boundary's own code are never a position.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.export.sources import boundary_frame
from workers.protocol.hlo import Frame, quoted, read_hlo, source_of, with_metadata
from workers.protocol.hlo_summary import COLLECTIVES

Position = tuple[str, int]

TAG = "#"
_TAGGED = re.compile(r"^(?P<name>.*)#(?P<n>\d+)$")
_FILE_POS = re.compile(r'"((?:[^"\\]|\\.)+)":(\d+):\d+')
_OUTER_NAME = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"')
_SKIPPED_OPS = frozenset({"func.func", "builtin.module", "func.return", "func.call"})
_MAX_STEPS_BACK = 3


def positions_of(location: str, own: Callable[[str], bool] = boundary_frame) -> list[Position]:
    """The (file, line) chain of an MLIR location, innermost first, without the frames
    `own` says are Boundary's and without repeats."""
    chain: list[Position] = []
    for file, line in _FILE_POS.findall(location):
        if own(file):
            continue
        position = (file, int(line))
        if position not in chain:
            chain.append(position)
    return chain


def tag_module(module: Any) -> dict[int, str]:
    """Rename every op of `module` that has a source location to `<name>#<n>` (its old
    location nested inside); returns n → the op's original location text."""
    from jax._src.lib.mlir import ir  # type: ignore[attr-defined]

    table: dict[int, str] = {}

    def visit(op: Any) -> Any:
        operation = op.operation if hasattr(op, "operation") else op
        if operation.name in _SKIPPED_OPS:
            return ir.WalkResult.ADVANCE
        text = str(operation.location)
        if '":' not in text:  # no file position anywhere in it
            return ir.WalkResult.ADVANCE
        n = len(table)
        found = _OUTER_NAME.match(text)
        # A module lowered before (kept by jax's caches) is tagged already: tag it afresh.
        name = re.sub(r"(#\d+)+$", "", found[1]) if found else operation.name
        with operation.context:
            operation.location = ir.Location.name(f"{name}{TAG}{n}", childLoc=operation.location)
        table[n] = text
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return table


def _untagged(op_name: str) -> str:
    return ";".join(re.sub(r"(#\d+)+$", "", part) for part in op_name.split(";"))


def _with_position(line: str, position: Position | None) -> str:
    """`line` with its op_name untagged and, if given, the position in its metadata."""

    def change(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
        kept = [(k, f'"{_untagged(v[1:-1])}"' if k == "op_name" else v) for k, v in fields]
        if position is None or any(k == "source_file" for k, _ in kept):
            return kept
        file, number = position
        return [("source_file", quoted(file)), ("source_line", str(number)), *kept]

    return with_metadata(line, change)


def _linked(op: str) -> bool:
    return op in ("fusion", "custom-call") or op.removesuffix("-start") in COLLECTIVES


def _innermost(location: str, own: Callable[[str], bool]) -> Position | None:
    """The user's innermost position of an MLIR location (an installed library's, when the
    user's own files are not on it)."""
    chain = positions_of(location, own)
    found = source_of(tuple(Frame(file, line) for file, line in chain))
    frame = (found.user or found.library) if found is not None else None
    return (frame.file, frame.line) if frame is not None else None


def place_positions(
    hlo: str, tags: dict[int, str], own: Callable[[str], bool] = boundary_frame
) -> str:
    """`hlo` (compiled from a tagged module) with the tags taken out of its op names and
    each instruction's innermost user position written into its metadata."""
    first: dict[int, Position | None] = {}

    def position_of(op_name: str) -> Position | None:
        for part in op_name.split(";"):
            tagged = _TAGGED.match(part)
            if tagged is None or int(tagged["n"]) not in tags:
                continue
            n = int(tagged["n"])
            if n not in first:
                first[n] = _innermost(tags[n], own)
            if first[n] is not None:
                return first[n]
        return None

    module = read_hlo(hlo)
    own_position: dict[str, Position | None] = {}
    body_position: dict[str, Position] = {}
    for ins in module.instructions():
        position = position_of(ins.op_name) if ins.op_name else None
        own_position[ins.name] = position
        if position is not None:
            body_position.setdefault(ins.computation, position)
    lines = hlo.split("\n")
    for ins in module.instructions():
        position = own_position.get(ins.name)
        if position is None and ins.opcode == "fusion":
            position = next((body_position[c] for c in ins.called if c in body_position), None)
        frontier = [ins.name]
        for _ in range(_MAX_STEPS_BACK):
            if position is not None or not _linked(ins.opcode):
                break
            frontier = [
                v for f in frontier for v in module.by_name[f].operands if v in module.by_name
            ]
            position = next((p for v in frontier if (p := own_position.get(v)) is not None), None)
        lines[ins.line - 1] = _with_position(lines[ins.line - 1], position)
    return "\n".join(lines)


@dataclass(frozen=True)
class Tagged:
    """A lowered program whose ops may have been tagged, and how to read its HLO back."""

    stablehlo: str | None
    """The StableHLO (with debug info) printed before tagging; None when not tagged."""
    tags: dict[int, str] | None
    seconds: float
    """Printing and tagging, outside every timed stage."""

    def hlo_of(self, compiled: Any) -> str:
        """The compiled program's optimized HLO, with the user's positions when tagged."""
        text: str = compiled.as_text()
        return place_positions(text, self.tags) if self.tags is not None and text else text


def tag_sources(workload: Any, lowered: Any) -> Tagged:
    """Tag `lowered`'s ops when the workload is an uploaded program (whose compiled HLO
    would otherwise name no source); a catalog workload's HLO has its stack frames."""
    if not getattr(workload, "tags_sources", False):
        return Tagged(None, None, 0.0)
    t0 = time.perf_counter()
    text = lowered.as_text(debug_info=True)
    tags = tag_module(lowered.compiler_ir("stablehlo"))
    return Tagged(text, tags, time.perf_counter() - t0)
