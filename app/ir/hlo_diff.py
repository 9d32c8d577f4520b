"""The HLO diff: two optimized HLO modules paired instruction by instruction.

`diff_modules` reads both texts (`app.ir.hlo_graph`), pairs their instructions
(`app.ir.hlo_match`: exact, parameters, metadata, propagation; `app.ir.hlo_regroup`:
splits and merges) and sorts the outcome: each pair identical or changed (with what
differs), each leftover only in A or only in B, each split and merge, and the collectives
of both sides set against each other. Pure text processing; no jax.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.ir.hlo_graph import HloGraph, Instr, read_module
from app.ir.hlo_match import (
    Matching,
    match_exact,
    match_metadata,
    match_parameters,
    propagate,
    seed_roots,
)
from app.ir.hlo_regroup import Regroup, find_regroups
from workers.protocol.hlo_summary import COLLECTIVES

DIFFERENCES = (
    "opcode",
    "custom-call target",
    "fusion kind",
    "fusion body",
    "shape",
    "layout",
    "replica groups",
    "backend config",
    "attributes",
    "operands",
)
"""What may differ between the two instructions of a pair, most telling first."""


@dataclass(frozen=True)
class Pair:
    """Two instructions paired, and what differs between them (nothing: identical)."""

    a: int
    b: int
    what: tuple[str, ...]
    stage: str


@dataclass(frozen=True)
class CollectivePair:
    """A collective of either side and its counterpart, if it has one."""

    a: int | None
    b: int | None
    kind: str


@dataclass
class HloDiff:
    """Everything the two modules' comparison found; instructions by index into `a`, `b`."""

    a: HloGraph
    b: HloGraph
    identical: list[Pair]
    changed: list[Pair]
    only_a: list[int]
    only_b: list[int]
    splits: list[Regroup]
    merges: list[Regroup]
    collectives: list[CollectivePair]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused: a large diff builds some hundred thousand objects
    that all live until it ends, and the collector would walk them again and again (it
    doubled the time of a 10,000-instruction diff). Reference counting still frees what
    dies; the collector runs again afterwards, as it did before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def diff_modules(
    text_a: str, text_b: str, *, truncated_a: bool = False, truncated_b: bool = False
) -> HloDiff:
    """Pair the instructions of the modules `text_a` and `text_b` (a truncated text is
    read as far as it goes)."""
    with _collector_paused():
        return _diff(text_a, text_b, truncated_a, truncated_b)


def _diff(text_a: str, text_b: str, truncated_a: bool, truncated_b: bool) -> HloDiff:
    m = Matching(
        read_module(text_a, truncated=truncated_a), read_module(text_b, truncated=truncated_b)
    )
    match_exact(m)
    match_parameters(m)
    regroups = find_regroups(m)
    match_metadata(m)
    seeds = seed_roots(m)
    seeds += [([i], [j]) for i, j in m.a_to_b.items()]
    seeds += [(list(r.a), list(r.b)) for r in regroups]
    propagate(m, seeds)
    pairs = [_classify(m, regroups, i, j) for i, j in sorted(m.a_to_b.items())]
    return HloDiff(
        a=m.a,
        b=m.b,
        identical=[p for p in pairs if not p.what],
        changed=[p for p in pairs if p.what],
        only_a=[i for i in m.a.units if m.free_a(i)],
        only_b=[j for j in m.b.units if m.free_b(j)],
        splits=[r for r in regroups if r.split],
        merges=[r for r in regroups if not r.split],
        collectives=_collectives(m),
    )


def _counterparts(m: Matching, regroups: list[Regroup], i: int) -> set[int]:
    """What an instruction of A stands for in B: its partner, or its split's parts."""
    if i in m.a_to_b:
        return {m.a_to_b[i]}
    return {j for r in regroups if i in r.a for j in r.b}


def _classify(m: Matching, regroups: list[Regroup], i: int, j: int) -> Pair:
    x, y = m.a.instrs[i], m.b.instrs[j]
    what: list[str] = []
    if x.op != y.op:
        what.append("opcode")
    if x.target != y.target:
        what.append("custom-call target")
    fused = x.op == y.op == "fusion"
    if fused and (x.fusion_kind, x.backend_kind) != (y.fusion_kind, y.backend_kind):
        what.append("fusion kind")
    if fused and x.body != y.body:
        what.append("fusion body")
    if x.dims != y.dims:
        what.append("shape")
    elif x.layout != y.layout:
        what.append("layout")
    if x.groups != y.groups:
        what.append("replica groups")
    if x.backend != y.backend:
        what.append("backend config")
    if (x.attrs, x.literal) != (y.attrs, y.literal) or (not fused and x.body != y.body):
        what.append("attributes")  # a reducer applied, a computation called, among them
    if not _same_operands(m, regroups, x, y):
        what.append("operands")
    return Pair(i, j, tuple(what), m.stage[i])


def _same_operands(m: Matching, regroups: list[Regroup], x: Instr, y: Instr) -> bool:
    """Whether each operand of `x` stands for the operand of `y` at the same position."""
    if len(x.operands) != len(y.operands):
        return False
    return all(
        ob in _counterparts(m, regroups, oa) for oa, ob in zip(x.operands, y.operands, strict=True)
    )


def is_collective(ins: Instr) -> bool:
    return ins.op in COLLECTIVES


def _collectives(m: Matching) -> list[CollectivePair]:
    """Every collective of either side: the pairs first (in A's order), then A's and B's
    own."""
    found: list[CollectivePair] = []
    for i in m.a.units:
        x = m.a.instrs[i]
        j = m.a_to_b.get(i)
        if j is not None and (is_collective(x) or is_collective(m.b.instrs[j])):
            kind = x.op if is_collective(x) else m.b.instrs[j].op
            found.append(CollectivePair(i, j, kind))
    found += [
        CollectivePair(i, None, m.a.instrs[i].op)
        for i in m.a.units
        if is_collective(m.a.instrs[i]) and i not in m.a_to_b
    ]
    found += [
        CollectivePair(None, j, m.b.instrs[j].op)
        for j in m.b.units
        if is_collective(m.b.instrs[j]) and j not in m.b_to_a
    ]
    return found
