"""Source positions for an uploaded artifact's optimized HLO.

Compiling a deserialized `jax.export.Exported` leaves no `stack_frame_id` (and no
`source_file` / `source_line`) in the optimized HLO: only `op_name` metadata survives,
and every dot shares one op name. The StableHLO the export holds still has each op's full
location: `loc("jit(forward)/dot_general"(callsite("heads"("model.py":92:20) at …)))`.

So before compiling, every located op of the lowered module (`lowered.compiler_ir()`, the
live module jax then compiles) is renamed `<its op name>#<n>`, its location kept inside.
XLA copies that name into the HLO's `op_name` (an `@…` suffix would be dropped; `#n`
survives on CPU, TPU and GPU), so each instruction names the ops it came from. After the
compile, `place_positions` takes the tags out again and writes each instruction's Python
stack into its metadata as XLA writes it for a program compiled from source (the source
tables and a frame id, `workers.protocol.hlo.StackTable`), beside the user's innermost
`file:line` (`source_file`, `source_line`): the IR views, the HLO summary, the explained
fusions and the memory report then link to the user's lines, with the library's frame
inside them (a flax layer's), as they do for a catalog workload. Each entry parameter,
which jax names by its flat position (`leaves[3]`), is named by its argument's pytree
path from the artifact's header (`params/blocks/0/w`).

The rename touches metadata only: opcodes, shapes, fusions and memory are the same as an
untagged compile's; XLA derives a few instruction names from op names, so those differ.
A fusion whose own metadata names nothing (a TPU output fusion) takes the first stack of
the instructions it fused; an instruction that names nothing at all (XLA:GPU's combined
all-reduce of several gradients) takes that of the values it reads, up to three steps
back. Frames of Boundary's own code are never on a stack.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workers.export.sources import boundary_frame
from workers.protocol.hlo import (
    Frame,
    HloModule,
    StackTable,
    quoted,
    read_hlo,
    source_of,
    with_metadata,
)
from workers.protocol.hlo_summary import COLLECTIVES

Position = tuple[str, int]
Stack = tuple[Frame, ...]
"""Python frames, innermost first."""

TAG = "#"
_TAGGED = re.compile(r"^(?P<name>.*)#(?P<n>\d+)$")
_FRAME = re.compile(r'(?:"((?:[^"\\]|\\.)*)"\()?"((?:[^"\\]|\\.)+)":(\d+):\d+')
"""A frame of an MLIR location: `"Linear.__call__"("…/linear.py":422:8`, its function's
name optional."""
_FLAT_NAME = re.compile(r"^leaves\[(\d+)\]$")
"""jax's name of a flat argument (`workers.export.meshes.flat_call`'s `*leaves`)."""
_OUTER_NAME = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"')
_SKIPPED_OPS = frozenset({"func.func", "builtin.module", "func.return", "func.call"})
_MAX_STEPS_BACK = 3


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


def stack_of(location: str, own: Callable[[str], bool] = boundary_frame) -> Stack:
    """The Python frames of an MLIR location, innermost first, each with its function where
    the location names it, without the frames `own` says are Boundary's and without
    repeats."""
    stack: list[Frame] = []
    for function, file, line in _FRAME.findall(location):
        frame = Frame(file, int(line), function or None)
        if own(file) or any((f.file, f.line) == (file, frame.line) for f in stack):
            continue
        stack.append(frame)
    return tuple(stack)


def _untagged(op_name: str) -> str:
    return ";".join(re.sub(r"(#\d+)+$", "", part) for part in op_name.split(";"))


@dataclass(frozen=True)
class Placed:
    """What is written into one instruction's metadata: its stack's frame in the module's
    tables (0: none), the user's innermost position (a library's where the user's files
    are not on the stack), and a parameter's pytree path in place of jax's flat name."""

    frame: int
    position: Position | None
    path: str | None = None


def _with_source(line: str, placed: Placed) -> str:
    """`line` with its op_name untagged (or the parameter's path) and its source written."""

    def change(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
        kept = [(k, f'"{_untagged(v[1:-1])}"' if k == "op_name" else v) for k, v in fields]
        if placed.path is not None:
            kept = [(k, quoted(placed.path) if k == "op_name" else v) for k, v in kept]
        if placed.position is None or any(k == "source_file" for k, _ in kept):
            return kept
        file, number = placed.position
        stack = [StackTable.field(placed.frame)] if placed.frame else []
        return [("source_file", quoted(file)), ("source_line", str(number)), *stack, *kept]

    return with_metadata(line, change)


def _linked(op: str) -> bool:
    return op in ("fusion", "custom-call") or op.removesuffix("-start") in COLLECTIVES


def _position(stack: Stack) -> Position | None:
    """The user's innermost position on `stack` (an installed library's, when the user's
    own files are not on it)."""
    found = source_of(stack)
    frame = (found.user or found.library) if found is not None else None
    return (frame.file, frame.line) if frame is not None else None


def _stacks(
    module: HloModule, tags: dict[int, str], own: Callable[[str], bool]
) -> dict[str, Stack]:
    """Each instruction's stack: its own op's, else (a fusion) the first of the
    instructions it fused, else (a library call or collective XLA left unnamed) that of
    the values it reads, up to three steps back."""
    first: dict[int, Stack] = {}

    def stack_named(op_name: str) -> Stack:
        for part in op_name.split(";"):
            tagged = _TAGGED.match(part)
            if tagged is None or int(tagged["n"]) not in tags:
                continue
            n = int(tagged["n"])
            if n not in first:
                first[n] = stack_of(tags[n], own)
            if first[n]:
                return first[n]
        return ()

    own_stack: dict[str, Stack] = {}
    body_stack: dict[str, Stack] = {}
    for ins in module.instructions():
        stack = stack_named(ins.op_name) if ins.op_name else ()
        own_stack[ins.name] = stack
        if stack:
            body_stack.setdefault(ins.computation, stack)
    found: dict[str, Stack] = {}
    for ins in module.instructions():
        stack = own_stack[ins.name]
        if not stack and ins.opcode == "fusion":
            stack = next((body_stack[c] for c in ins.called if c in body_stack), ())
        frontier = [ins.name]
        for _ in range(_MAX_STEPS_BACK):
            if stack or not _linked(ins.opcode):
                break
            frontier = [
                v for f in frontier for v in module.by_name[f].operands if v in module.by_name
            ]
            stack = next((s for v in frontier if (s := own_stack.get(v))), ())
        found[ins.name] = stack
    return found


def _parameter_path(op_name: str | None, names: Sequence[str]) -> str | None:
    """An entry parameter's pytree path for jax's flat name of it (`leaves[3]`)."""
    found = _FLAT_NAME.match(op_name or "")
    return names[int(found[1])] if found and int(found[1]) < len(names) else None


def place_positions(
    hlo: str,
    tags: dict[int, str],
    own: Callable[[str], bool] = boundary_frame,
    names: Sequence[str] = (),
) -> str:
    """`hlo` (compiled from a tagged module) with the tags taken out of its op names, each
    instruction's stack written in as XLA writes a program's compiled from source (the
    source tables and a frame id, beside the user's innermost `file:line`), and each
    entry parameter named by its argument's path from `names` (the flat arguments'
    names, in order)."""
    module = read_hlo(hlo)
    stacks = _stacks(module, tags, own)
    table = StackTable() if not module.tables else None
    lines = hlo.split("\n")
    for ins in module.instructions():
        stack = stacks[ins.name]
        frame = table.add(stack) if table is not None and stack else 0
        path = _parameter_path(ins.parameter_path, names) if names else None
        placed = Placed(frame, _position(stack) if stack else None, path)
        lines[ins.line - 1] = _with_source(lines[ins.line - 1], placed)
    text = "\n".join(lines)
    return table.placed_in(text) if table is not None else text


@dataclass(frozen=True)
class Tagged:
    """A lowered program whose ops may have been tagged, and how to read its HLO back."""

    stablehlo: str | None
    """The StableHLO (with debug info) printed before tagging; None when not tagged."""
    tags: dict[int, str] | None
    seconds: float
    """Printing and tagging, outside every timed stage."""
    names: tuple[str, ...] = ()
    """The flat arguments' pytree paths, in order, for the entry parameters' names."""

    def hlo_of(self, compiled: Any) -> str:
        """The compiled program's optimized HLO, with the user's stacks when tagged."""
        text: str = compiled.as_text()
        if self.tags is None or not text:
            return text
        return place_positions(text, self.tags, names=self.names)


def tag_sources(workload: Any, lowered: Any, params: Any = None) -> Tagged:
    """Tag `lowered`'s ops when the workload is an uploaded program (whose compiled HLO
    would otherwise name no source, and its parameters only by position); a catalog
    workload's HLO has its stack frames and its arguments' names. `params`: the job's,
    for the arguments' paths."""
    if not getattr(workload, "tags_sources", False):
        return Tagged(None, None, 0.0)
    t0 = time.perf_counter()
    text = lowered.as_text(debug_info=True)
    tags = tag_module(lowered.compiler_ir("stablehlo"))
    names = tuple(s.name for s in workload.input_specs(params)) if params is not None else ()
    return Tagged(text, tags, time.perf_counter() - t0, names)
