"""The HLO summary that explains itself: each fusion, library call and collective of the
optimized HLO with its kind, shape and bytes, the source lines it came from (through the
module's stack frames) and, when the pass pipeline was captured, the pass that made it."""

from __future__ import annotations

import re

from app.ir.pipeline import origins
from app.ir.sources import source_map
from app.ir.view import Keys
from workers.protocol import HloExplained, PipelineCapture, SourceText
from workers.protocol.hlo import BACKEND_KIND, CUSTOM_CALL_TARGET, INSTRUCTION, KIND, shape_bytes

MAX_EXPLAINED = 200
"""Instructions explained per run."""

_EXPLAINED = re.compile(
    r"^(fusion|custom-call|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|ragged-all-to-all)(-start)?$"
)


def _computation_of(lines: list[str]) -> dict[int, str]:
    """Line index → the name of the computation it belongs to."""
    owner: dict[int, str] = {}
    current = ""
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            current = line.split("(", 1)[0].replace("ENTRY", "").strip().lstrip("%")
        owner[i] = current
    return owner


def explain(
    hlo: str, source: SourceText | None, pipeline: PipelineCapture | None
) -> list[HloExplained]:
    """The explained instructions of `hlo`, in the order they appear."""
    lines = hlo.splitlines()
    smap = source_map("hlo", lines)
    keys = Keys(source.path if source is not None else "")
    owner = _computation_of(lines)
    # Source lines of a fusion are those of the instructions inside its computation.
    by_computation: dict[str, list[str]] = {}
    for i, chain in smap.positions.items():
        key = keys.key(chain)
        found = by_computation.setdefault(owner.get(i, ""), [])
        if key not in found:
            found.append(key)
    made = {}
    if pipeline is not None and pipeline.snapshots:
        made = {o.name: o for o in origins(pipeline, hlo)}
    out: list[HloExplained] = []
    for i, line in enumerate(lines):
        m = INSTRUCTION.match(line)
        if not m or not _EXPLAINED.match(m.group("op")):
            continue
        name, op, shape = m.group("name"), m.group("op"), m.group("shape")
        kind = op.removesuffix("-start")
        if op == "fusion":
            backend = BACKEND_KIND.search(line)
            plain = KIND.search(line)
            kind = backend.group(1) if backend else (plain.group(1) if plain else "fusion")
        elif op == "custom-call":
            target = CUSTOM_CALL_TARGET.search(line)
            kind = target.group(1) if target else "custom-call"
        sources: list[str] = []
        if i in smap.positions:
            sources.append(keys.key(smap.positions[i]))
        called = re.search(r"\bcalls=%?([\w.\-]+)", line)
        for key in by_computation.get(called.group(1), []) if called else []:
            if key not in sources:
                sources.append(key)
        origin = made.get(name)
        out.append(
            HloExplained(
                name=name,
                op=op,
                kind=kind,
                shape=shape.strip(),
                bytes=shape_bytes(shape),
                source=sources,
                made_by=origin.pass_name if origin else None,
                pipeline_step=origin.order if origin else None,
            )
        )
        if len(out) >= MAX_EXPLAINED:
            break
    return out
