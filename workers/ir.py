"""Summaries of optimized HLO text: what XLA chose to run. Pure text parsing, no jax.

The optimized HLO printed by a Compiled stage lists computations, each a block of
instructions `%name = shape opcode(operands), attributes`. The summary reports the
fusions (and the library behind each custom fusion), custom calls and their targets,
collectives with their payload sizes, and counts of copies, transposes and top-level
instructions, so a reader can see, for example, that a chain of eight elementwise
operations became one kernel, or that a dot went to cuBLAS on a GPU and YNNPACK on a CPU.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from workers.protocol import HloCollective, HloCustomCall, HloFusion, HloSummary

_COMPUTATION = re.compile(
    r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(){}]+)\s*(?:\(.*\))?\s*(?:->.*)?\{$"
)
_INSTRUCTION = re.compile(
    r"^(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$"
)
_KIND = re.compile(r"\bkind=(\w+)")
_CALLS = re.compile(r"\bcalls=(\{[^}]*\}|%?[^\s,{}]+)")
_TO_APPLY = re.compile(r"\bto_apply=%?([^\s,{}]+)")
_BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_REPLICA_GROUPS = re.compile(
    r"replica_groups=(\{\}|\{\{.*?\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)"
)
_ARRAY_SHAPE = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")

COLLECTIVES = frozenset(
    {
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-broadcast",
        "ragged-all-to-all",
    }
)
"""Communication opcodes; their asynchronous `-start` forms count once, `-done` not at all."""

_PLUMBING = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
"""Opcodes that move no data worth listing among a fusion's operations."""

_ELEMENT_BYTES: dict[str, int] = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}

# Markers in custom-call targets and custom fusion kinds, and the library each names.
_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("__cublas$lt", "cuBLASLt"),
    ("__cublas", "cuBLAS"),
    ("__cudnn", "cuDNN"),
    ("__triton", "Triton"),
    ("__ynn", "YNNPACK"),
    ("__xnn", "XNNPACK"),
    ("onednn", "oneDNN"),
    ("tpu_custom_call", "Mosaic TPU"),
    ("mosaic_gpu", "Mosaic GPU"),
    ("cusolver", "cuSOLVER"),
    ("cufft", "cuFFT"),
    ("lapack", "LAPACK"),
    ("ducc", "DUCC FFT"),
)


def library_of(target: str) -> str | None:
    """The library a custom-call target or custom fusion kind belongs to, if known."""
    lowered = target.lower()
    for marker, library in _LIBRARIES:
        if marker.lower() in lowered:
            return library
    return None


def shape_bytes(shape: str) -> int | None:
    """Bytes held by an HLO shape (tuples summed); None if an element type is unknown."""
    total = 0
    found = False
    for element, dims in _ARRAY_SHAPE.findall(shape):
        size = _ELEMENT_BYTES.get(element)
        if size is None and element.startswith("f8"):
            size = 1
        if size is None:
            return None
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += size * count
        found = True
    return total if found else None


@dataclass
class Instruction:
    """One parsed HLO instruction."""

    name: str
    shape: str
    op: str
    rest: str


@dataclass
class Computation:
    """One HLO computation: a name and its instructions in order."""

    name: str
    entry: bool
    instructions: list[Instruction] = field(default_factory=list)


def parse_computations(text: str) -> list[Computation]:
    """Every computation in an HLO module's text, with its instructions."""
    computations: list[Computation] = []
    current: Computation | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if current is None:
            # Headers start at the margin; header blocks such as FileNames never end in "{".
            if raw[:1] not in {" ", "\t"} and line.endswith("{"):
                match = _COMPUTATION.match(line)
                if match is not None:
                    current = Computation(match["name"], bool(match["entry"]))
            continue
        if line == "}":
            computations.append(current)
            current = None
            continue
        match = _INSTRUCTION.match(line)
        if match is not None:
            current.instructions.append(
                Instruction(match["name"], match["shape"], match["op"], match["rest"])
            )
    return computations


def _called(rest: str) -> list[str]:
    match = _CALLS.search(rest)
    if match is None:
        return []
    return [part.strip().lstrip("%") for part in match[1].strip("{}").split(",") if part.strip()]


def summarize_hlo(text: str) -> HloSummary:
    """Summarize optimized HLO text (as printed by `Compiled.as_text()`)."""
    computations = parse_computations(text)
    by_name = {c.name: c for c in computations}
    fused: set[str] = set()
    helpers: set[str] = set()
    for computation in computations:
        for ins in computation.instructions:
            if ins.op == "fusion":
                fused.update(_called(ins.rest))
            applied = _TO_APPLY.search(ins.rest)
            if applied is not None:
                helpers.add(applied[1])

    summary = HloSummary()
    libraries: list[str] = []
    op_counts: Counter[str] = Counter()
    for computation in computations:
        top_level = computation.name not in fused and computation.name not in helpers
        for ins in computation.instructions:
            if top_level:
                op_counts[ins.op] += 1
            if ins.op in {"copy", "copy-start"}:
                summary.copies += 1
            elif ins.op == "transpose":
                summary.transposes += 1
            elif ins.op == "fusion":
                summary.fusions.append(_fusion(ins, by_name))
            elif ins.op == "custom-call":
                target_match = _TARGET.search(ins.rest)
                target = target_match[1] if target_match else "unknown"
                summary.custom_calls.append(
                    HloCustomCall(target=target, library=library_of(target), shape=ins.shape)
                )
            elif ins.op in COLLECTIVES or ins.op.removesuffix("-start") in COLLECTIVES:
                groups = _REPLICA_GROUPS.search(ins.rest)
                summary.collectives.append(
                    HloCollective(
                        kind=ins.op.removesuffix("-start"),
                        shape=ins.shape,
                        bytes=shape_bytes(ins.shape),
                        replica_groups=groups[1] if groups else None,
                    )
                )
    for found in [f.library for f in summary.fusions] + [c.library for c in summary.custom_calls]:
        if found is not None and found not in libraries:
            libraries.append(found)
    summary.op_counts = dict(op_counts.most_common())
    summary.instructions = sum(op_counts.values())
    summary.libraries = libraries
    return summary


def _fusion(ins: Instruction, by_name: dict[str, Computation]) -> HloFusion:
    kind_match = _KIND.search(ins.rest)
    backend_match = _BACKEND_KIND.search(ins.rest)
    backend_kind = backend_match[1] if backend_match else None
    calls = _called(ins.rest)
    ops: list[str] = []
    for name in calls:
        body = by_name.get(name)
        for inner in body.instructions if body else []:
            if inner.op not in _PLUMBING and inner.op not in ops:
                ops.append(inner.op)
    return HloFusion(
        name=ins.name,
        kind=kind_match[1] if kind_match else "unknown",
        calls=calls,
        backend_kind=backend_kind,
        library=library_of(backend_kind) if backend_kind else None,
        ops=ops,
    )
