"""What the IR view folds by default: source tables, metadata, location notes, long configs.

A fold hides text on screen only; downloads and the raw text keep everything. Block folds
are runs of whole lines (HLO's FileNames/FunctionNames/FileLocations/StackFrames tables,
StableHLO's `#loc` definitions); inline folds are spans within a line (`metadata={...}`,
long `backend_config=...`, `loc(...)`, a jaxpr's `# file:line` note).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.ir.sources import MLIR_ARTIFACTS
from workers.protocol.hlo import SOURCE_TABLES, attribute_spans

LONG_CONFIG = 48
"""A backend config longer than this many characters is folded."""

_MLIR_LOC = re.compile(r"\s+loc\(")
_JAXPR_NOTE = re.compile(r"\s+#\s+\S.*$")


@dataclass(frozen=True)
class BlockFold:
    """Lines [start, end) folded behind one summary line."""

    start: int
    end: int
    label: str


def _closing(line: str, start: int) -> int:
    """The index just past the bracketed value starting at `start` (quotes respected)."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    if start >= len(line):
        return start
    if line[start] == '"':
        i = start + 1
        while i < len(line) and line[i] != '"':
            i += 2 if line[i] == "\\" else 1
        return min(i + 1, len(line))
    if line[start] not in pairs:
        end = start
        while end < len(line) and line[end] not in ", ":
            end += 1
        return end
    depth, i, quoted = 0, start, False
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(line)


def inline_folds(artifact: str, line: str) -> list[tuple[int, int]]:
    """Spans of `line` to fold, in order and not overlapping."""
    spans: list[tuple[int, int]] = []
    if artifact == "hlo" and "=" in line:
        for key, start, end in attribute_spans(line):
            value = end - start - len(f", {key}=")
            if key == "metadata" or (key == "backend_config" and value > LONG_CONFIG):
                spans.append((start, end))
    elif artifact in MLIR_ARTIFACTS and "loc(" in line and not line.startswith("#loc"):
        for m in _MLIR_LOC.finditer(line):
            spans.append((m.start(), _closing(line, m.end() - 1)))
    elif artifact == "jaxpr" and "#" in line:
        note = _JAXPR_NOTE.search(line)
        if note:
            spans.append((note.start(), len(line)))
    return spans


def block_folds(artifact: str, lines: list[str]) -> list[BlockFold]:
    """Whole-line folds: HLO's source tables and StableHLO's location definitions."""
    folds: list[BlockFold] = []
    if artifact == "hlo":
        start: int | None = None
        names: list[str] = []
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped in SOURCE_TABLES:
                start = i if start is None else start
                names.append(stripped)
            elif start is not None and line.startswith(("%", "ENTRY")):
                end = i
                while end > start and not lines[end - 1].strip():
                    end -= 1
                folds.append(BlockFold(start, end, _tables_label(names, end - start)))
                break
    elif artifact in MLIR_ARTIFACTS:
        run_start: int | None = None
        for i, line in enumerate([*lines, ""]):
            if line.startswith("#loc"):
                run_start = i if run_start is None else run_start
            elif run_start is not None:
                count = i - run_start
                label = f"{count:,} location definition{'s' if count != 1 else ''} (#loc)"
                folds.append(BlockFold(run_start, i, label))
                run_start = None
    return folds


def _tables_label(names: list[str], count: int) -> str:
    return f"source tables ({', '.join(names)}): {count:,} lines"
