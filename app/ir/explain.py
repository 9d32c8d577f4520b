"""The HLO summary that explains itself: each fusion, library call and collective of the
optimized HLO with its kind, shape and bytes, the source lines it came from (through the
module's stack frames, read by the one HLO reader) and, when the pass pipeline was
captured, the pass that made it."""

from __future__ import annotations

import re

from app.ir.pipeline import origins
from app.ir.view import Keys
from workers.protocol import HloExplained, PipelineCapture, SourceText
from workers.protocol.hlo import HloModule, Instruction, shape_bytes

MAX_EXPLAINED = 200
"""Instructions explained per run."""

_EXPLAINED = re.compile(
    r"^(fusion|custom-call|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|ragged-all-to-all)(-start)?$"
)


def _key(keys: Keys, ins: Instruction) -> str | None:
    if ins.source is None:
        return None
    return keys.key([(f.file, f.line) for f in ins.source.stack])


def _kind(ins: Instruction) -> str:
    if ins.opcode == "fusion":
        return ins.backend_kind or ins.fusion_kind or "fusion"
    if ins.opcode == "custom-call":
        return ins.custom_call_target or "custom-call"
    return ins.opcode.removesuffix("-start")


def explain(
    module: HloModule, hlo: str, source: SourceText | None, pipeline: PipelineCapture | None
) -> list[HloExplained]:
    """The explained instructions of `module` (read from the text `hlo`), in the order
    they appear."""
    keys = Keys(source.path if source is not None else "")
    # Source lines of a fusion are those of the instructions inside its computation.
    by_computation: dict[str, list[str]] = {}
    for ins in module.instructions():
        key = _key(keys, ins)
        found = by_computation.setdefault(ins.computation, [])
        if key is not None and key not in found:
            found.append(key)
    made = {}
    if pipeline is not None and pipeline.snapshots:
        made = {o.name: o for o in origins(pipeline, hlo)}
    out: list[HloExplained] = []
    for ins in module.instructions():
        if not _EXPLAINED.match(ins.opcode):
            continue
        own = _key(keys, ins)
        sources = [own] if own is not None else []
        for key in by_computation.get(ins.called[0], []) if ins.opcode == "fusion" else []:
            if key not in sources:
                sources.append(key)
        origin = made.get(ins.name)
        out.append(
            HloExplained(
                name=ins.name,
                op=ins.opcode,
                kind=_kind(ins),
                shape=ins.shape.strip(),
                bytes=shape_bytes(ins.shape),
                source=sources,
                made_by=origin.pass_name if origin else None,
                pipeline_step=origin.order if origin else None,
            )
        )
        if len(out) >= MAX_EXPLAINED:
            break
    return out
