"""Two IR texts side by side: what changed between the optimized HLOs (or PTXs) of two runs.

A line diff (difflib) whose long unchanged stretches fold into one row, so what differs
stays on screen. HLO metadata (`metadata={op_name=... source_file=...}`) is dropped
before diffing by default: it names Python source lines, which differ between any two
programs without changing what runs. Input and output are capped in size.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from workers.protocol.hlo import SOURCE_TABLES, without_metadata

MAX_LINES = 6000
"""Lines of each text considered; beyond this the diff says it stopped."""
MAX_ROWS = 2500
"""Rows rendered at most."""
CONTEXT = 3
"""Unchanged lines kept around each change."""
MAX_LINE_CHARS = 400

_MLIR_LOC = re.compile(r"\s+loc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")
_JAXPR_NOTE = re.compile(r"\s+#\s+\S+:\d+(?::\d+)?(?:\s+\([^)]*\))?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class DiffRow:
    """One row of the side-by-side view: a line on either side, or a fold."""

    kind: str  # equal | replace | delete | insert | fold
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""


@dataclass
class IrDiff:
    """The diff of two texts and what it counts."""

    name: str
    rows: list[DiffRow] = field(default_factory=list)
    removed: int = 0
    added: int = 0
    changed: int = 0
    identical: bool = False
    notes: list[str] = field(default_factory=list)


def normalize(text: str) -> str:
    """IR text without what only points at Python source: HLO's metadata attributes and
    the FileNames / FunctionNames / FileLocations / StackFrames tables they refer to,
    StableHLO's loc(...) notes and #loc definitions, a jaxpr's `# file:line` notes."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("#loc"):
            continue
        if line.strip() in SOURCE_TABLES:
            skipping = True
        elif skipping and not line.strip():
            skipping = False
        elif not skipping:
            kept.append(without_metadata(line))
    return _JAXPR_NOTE.sub("", _MLIR_LOC.sub("", "\n".join(kept)))


def _lines(text: str, side: str, notes: list[str]) -> list[str]:
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        notes.append(f"side {side}: only the first {MAX_LINES:,} of {len(lines):,} lines compared")
        lines = lines[:MAX_LINES]
    return [line[:MAX_LINE_CHARS] for line in lines]


def ir_diff(name: str, a: str, b: str, *, strip_metadata: bool = True) -> IrDiff:
    """The side-by-side diff of `a` (left) and `b` (right), with long equal runs folded."""
    out = IrDiff(name)
    if strip_metadata:
        a, b = normalize(a), normalize(b)
        out.notes.append(
            "source locations (each instruction's metadata and the stack-frame tables) dropped"
        )
    left, right = _lines(a, "A", out.notes), _lines(b, "B", out.notes)
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(_equal_rows(left, right, i1, i2, j1, j2))
            continue
        out.removed += i2 - i1
        out.added += j2 - j1
        if tag == "replace":
            out.changed += min(i2 - i1, j2 - j1)
        for k in range(max(i2 - i1, j2 - j1)):
            li, rj = i1 + k, j1 + k
            has_left, has_right = li < i2, rj < j2
            kind = tag
            if tag == "replace" and not (has_left and has_right):
                kind = "delete" if has_left else "insert"
            rows.append(
                DiffRow(
                    kind,
                    li + 1 if has_left else None,
                    left[li] if has_left else "",
                    rj + 1 if has_right else None,
                    right[rj] if has_right else "",
                )
            )
    out.identical = out.removed == 0 and out.added == 0
    if len(rows) > MAX_ROWS:
        out.notes.append(f"showing the first {MAX_ROWS:,} of {len(rows):,} rows")
        rows = rows[:MAX_ROWS]
    out.rows = rows
    return out


def _equal_rows(  # noqa: PLR0917 - the four ends of one difflib opcode
    left: list[str], right: list[str], i1: int, i2: int, j1: int, j2: int
) -> list[DiffRow]:
    """An unchanged stretch: kept whole when short, else its edges around one fold."""
    span = i2 - i1
    head = CONTEXT if i1 > 0 or j1 > 0 else 0  # a change comes before it
    tail = CONTEXT if i2 < len(left) or j2 < len(right) else 0  # a change comes after it
    shown = range(span)
    rows: list[DiffRow] = []
    if span > head + tail + 1:
        shown = range(head)
    for k in shown:
        rows.append(DiffRow("equal", i1 + k + 1, left[i1 + k], j1 + k + 1, right[j1 + k]))
    if span > head + tail + 1:
        rows.append(DiffRow("fold", left=f"{span - head - tail:,} unchanged lines"))
        for k in range(span - tail, span):
            rows.append(DiffRow("equal", i1 + k + 1, left[i1 + k], j1 + k + 1, right[j1 + k]))
    return rows
