"""Which Python source line each line of IR came from.

Three IRs carry source positions, each its own way:

- a jaxpr printed with `source_info=True` ends an equation's first line with
  `# file:line:col (function)`;
- StableHLO printed with `debug_info=True` ends an op with `loc(#locN)`, and `#locN = ...`
  lines at the end of the module name a file position, a named wrapper around another
  location, or a call site (`callsite(callee at caller)`);
- optimized HLO ends an instruction with `metadata={... stack_frame_id=N}`, resolved through
  the module's stack-frame tables by the one HLO reader (`workers.protocol.hlo`).

Each gives, per line, the chain of (file, line) positions from the innermost frame outwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workers.catalog.jaxexport import boundary_frame
from workers.protocol.hlo import HloSyntaxError, read_hlo

Position = tuple[str, int]
"""A source file (as the IR spells it) and a 1-based line."""

MLIR_ARTIFACTS: tuple[str, ...] = ("stablehlo", "mosaic", "triton", "mosaic_gpu")
"""Artifacts printed as MLIR with `loc(...)` notes: StableHLO, and each Pallas kernel's
own IR (Mosaic TPU, Triton, Mosaic GPU), whose locations point into the kernel body."""

_N = r"\d{1,12}(?!\d)"
"""A line number or table id as the IR may give it: a number of thousands of digits (which
Python will not even convert) is no position, so it is not read as one."""

_JAXPR_NOTE = re.compile(
    r"#\s+(?P<file>[^\s#][^#]*?):(?P<line>" + _N + r")(?::\d+)?(?:\s+\([^)]*\))?\s*$"
)
_MLIR_USE = re.compile(r"\bloc\((#loc\d*)\)\s*$")
_MLIR_DEF = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_MLIR_FILE = re.compile(r'^"(?P<file>(?:[^"\\]|\\.)*)":(?P<line>' + _N + r"):\d+")
_MLIR_NAMED = re.compile(r'^"(?:[^"\\]|\\.)*"\((#loc\d*)\)$')
_MLIR_CALLSITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")
_MLIR_FUSED = re.compile(r"^fused\[(.*)\]$")


@dataclass
class SourceMap:
    """Per IR line (0-based), its source positions, innermost first; lines without are absent."""

    positions: dict[int, list[Position]]
    problem: str | None = None
    """Why the text's positions could not be read (it does not parse), or None."""

    def files(self) -> list[str]:
        """Every file named, in first-seen order."""
        seen: dict[str, None] = {}
        for chain in self.positions.values():
            for file, _ in chain:
                seen.setdefault(file, None)
        return list(seen)


def _jaxpr(lines: list[str]) -> SourceMap:
    found: dict[int, list[Position]] = {}
    open_eq: list[Position] | None = None
    for i, line in enumerate(lines):
        m = _JAXPR_NOTE.search(line)
        if m:
            chain = [(m.group("file").strip(), int(m.group("line")))]
            found[i] = chain
            # An equation whose parameters continue on later lines ends its first line with
            # `[`; the lines up to the closing `]` belong to the same equation.
            open_eq = chain if line[: m.start()].rstrip().endswith("[") else None
        elif open_eq is not None:
            found[i] = open_eq
            if line.lstrip().startswith("]"):
                open_eq = None
    return SourceMap(found)


def _mlir(lines: list[str]) -> SourceMap:
    defs: dict[str, str] = {}
    for line in lines:
        m = _MLIR_DEF.match(line)
        if m:
            defs[m.group(1)] = m.group(2).strip()
    memo: dict[str, list[Position]] = {}

    def resolve(ref: str, depth: int = 0) -> list[Position]:
        if ref in memo:
            return memo[ref]
        body = defs.get(ref, "")
        chain: list[Position] = []
        if depth < 64:
            if m := _MLIR_FILE.match(body):
                chain = [(m.group("file"), int(m.group("line")))]
            elif m := _MLIR_NAMED.match(body):
                chain = resolve(m.group(1), depth + 1)
            elif m := _MLIR_CALLSITE.match(body):
                chain = resolve(m.group(1), depth + 1) + resolve(m.group(2), depth + 1)
            elif m := _MLIR_FUSED.match(body):
                for part in m.group(1).split(","):
                    chain += resolve(part.strip(), depth + 1)
        memo[ref] = chain
        return chain

    found: dict[int, list[Position]] = {}
    for i, line in enumerate(lines):
        if line.startswith("#loc"):
            continue
        m = _MLIR_USE.search(line)
        if m:
            chain = resolve(m.group(1))
            if chain:
                found[i] = chain
    return SourceMap(found)


def _hlo(lines: list[str], cut: bool) -> SourceMap:
    try:
        module = read_hlo("\n".join(lines), cut=cut)
    except HloSyntaxError as exc:
        return SourceMap({}, f"the HLO does not parse, so its lines link to no source ({exc})")
    return SourceMap(
        {
            ins.line - 1: [(f.file, f.line) for f in ins.source.stack]
            for ins in module.instructions()
            if ins.source is not None
        }
    )


def source_map(artifact: str, lines: list[str], *, cut: bool = False) -> SourceMap:
    """The source positions of `lines` of the artifact named `artifact` (empty if it has
    none), without Boundary's own frames (the export wrapper, the worker's stages): a line
    is linked to the code it came from, never to the code that traced it. `cut`: the text
    was stopped at the storage cap."""
    if artifact == "hlo":
        return _hlo(lines, cut)  # the reader leaves Boundary's frames out
    if artifact == "jaxpr":
        found = _jaxpr(lines)
    elif artifact in MLIR_ARTIFACTS:
        found = _mlir(lines)
    else:
        return SourceMap({})
    own = {f: boundary_frame(f) for f in {p[0] for c in found.positions.values() for p in c}}
    kept: dict[int, list[Position]] = {}  # (a large module names few files, on many lines)
    for i, chain in found.positions.items():
        users = [p for p in chain if not own[p[0]]]
        if users:
            kept[i] = users
    return SourceMap(kept)
