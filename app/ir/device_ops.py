"""A chip run's measured instructions read against its own optimized HLO: what each does
and what the compiler estimated it would take (libtpu's `estimated_cycles`), added by the
server when it stores the run, from the whole stored text (the run's inline copy may be
cut short)."""

from __future__ import annotations

from workers.protocol import DeviceTime
from workers.protocol.hlo import HloModule, Instruction

WORK = ("convolution", "dot", "reduce", "all-reduce", "all-gather", "reduce-scatter")
"""The operations that name what a fusion mostly does, in that order of precedence."""


def kind_of(module: HloModule, ins: Instruction) -> str:
    """What an instruction does, in a word a reader of HLO would use: a fusion by the
    heaviest operation inside it (`convolution fusion`), anything else by its opcode
    (an asynchronous pair by the operation it starts)."""
    if ins.opcode != "fusion":
        return ins.opcode.removesuffix("-start").removesuffix("-done")
    inside = {
        i.opcode
        for name in ins.called
        if (c := module.computations_by_name.get(name)) is not None
        for i in c.instructions
    }
    work = next((w for w in WORK if w in inside), None)
    return f"{work} fusion" if work else "elementwise fusion"


def with_estimates(device_time: DeviceTime, module: HloModule) -> DeviceTime:
    """`device_time` with each measured instruction's kind and estimated cycles, and the
    entry computation's estimated cycles for one call (None where none is stated).

    Only the entry computation's instructions get an estimate: each runs once per call,
    as its measured time is counted. One in a loop's body runs once per trip, and its time
    per call adds up every trip, while its estimate is for one: set side by side, the two
    would differ by the trip count, which the trace does not state."""
    entry = module.entry.instructions if module.entry is not None else []
    once = {i.name for i in entry}
    ops = []
    for op in device_time.ops:
        ins = module.by_name.get(op.name)
        kind = kind_of(module, ins) if ins is not None else None
        cycles = ins.estimated_cycles if ins is not None and ins.name in once else None
        ops.append(op.model_copy(update={"kind": kind, "estimated_cycles": cycles}))
    stated = [i.estimated_cycles for i in entry]
    known = [c for c in stated if c is not None]
    total = sum(known) if known else None
    return device_time.model_copy(update={"ops": ops, "estimated_cycles": total})
