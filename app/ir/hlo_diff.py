"""The HLO diff: two optimized HLO modules paired instruction by instruction.

`diff_modules` reads both texts (the one HLO reader, then `app.ir.hlo_graph`), runs the
matcher steps in order (`STEPS`; `app.ir.hlo_match` holds every pair to its rule) and
sorts the outcome: each pair identical or changed (with what differs, the step that made
it and whether it is a guess), each leftover only in A or only in B, each split and
merge, and the collectives of both sides set against each other. Pure text processing;
no jax.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.ir.hlo_graph import HloGraph, Node, graph_of
from app.ir.hlo_match import Matching, Regroup, Step, run_steps
from app.ir.hlo_matchers import (
    match_exact,
    match_metadata,
    match_parameters,
    match_roots,
    match_structure,
    propagate,
)
from app.ir.hlo_regroup import find_regroups
from workers.protocol.hlo import HloModule, read_hlo
from workers.protocol.hlo_summary import COLLECTIVES

STEPS: tuple[Step, ...] = (
    Step("exact", "the whole upstream graph is identical", match_exact),
    Step(
        "structure",
        "the same upstream structure, laid out or configured differently",
        match_structure,
    ),
    Step("parameters", "the program's inputs, by number", match_parameters),
    Step("regroup", "kernels split in several, or merged into one", find_regroups),
    Step("metadata", "the same JAX operation and source line", match_metadata),
    Step("roots", "the entry computations' roots", match_roots),
    Step("propagation", "the operands and users of every pair, bottom-up and top-down", propagate),
)
"""The matchers, in the order they run."""

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
    """Two instructions paired, what differs between them (nothing: identical), the step
    that paired them, and whether the pair is only a guess."""

    a: int
    b: int
    what: tuple[str, ...]
    step: str
    guess: bool


@dataclass(frozen=True)
class CollectivePair:
    """A collective of either side and its counterpart, if it has one."""

    a: int | None
    b: int | None
    kind: str


@dataclass(frozen=True)
class HloDiff:
    """Everything the two modules' comparison found; instructions by index into `a`, `b`."""

    a: HloGraph
    b: HloGraph
    same: tuple[tuple[int, int, str], ...]
    """The identical pairs as plain tuples (node in A, node in B, step): many, so kept
    where the cycle collector stops tracking them (`identical` gives them as Pairs)."""
    changed: list[Pair]
    only_a: list[int]
    only_b: list[int]
    splits: list[Regroup]
    merges: list[Regroup]
    collectives: list[CollectivePair]

    @property
    def identical(self) -> list[Pair]:
        return [Pair(i, j, (), step, False) for i, j, step in self.same]


def diff_modules(
    text_a: str,
    text_b: str,
    *,
    cut_a: bool = False,
    cut_b: bool = False,
    steps: tuple[Step, ...] = STEPS,
) -> HloDiff:
    """Pair the instructions of the modules `text_a` and `text_b` (a cut text is read as
    far as it goes) with the matcher `steps`; HloSyntaxError when a text does not parse."""
    return diff_read(read_hlo(text_a, cut=cut_a), read_hlo(text_b, cut=cut_b), steps)


def diff_read(a: HloModule, b: HloModule, steps: tuple[Step, ...] = STEPS) -> HloDiff:
    """Pair the instructions of two modules already read."""
    return outcome(run_steps(graph_of(a), graph_of(b), steps))


def outcome(m: Matching) -> HloDiff:
    """What the matching `m` found, sorted."""
    found = [(i, j, _differences(m, i, j)) for i, j in sorted(m.a_to_b.items())]
    return HloDiff(
        a=m.a,
        b=m.b,
        same=tuple((i, j, m.made[i][0]) for i, j, what in found if not what),
        changed=[Pair(i, j, what, *m.made[i]) for i, j, what in found if what],
        only_a=[i for i in m.a.units if m.free_a(i)],
        only_b=[j for j in m.b.units if m.free_b(j)],
        splits=[r for r in m.regroups if r.split],
        merges=[r for r in m.regroups if not r.split],
        collectives=_collectives(m),
    )


def _counterparts(m: Matching, i: int) -> set[int]:
    """What an instruction of A stands for in B: its partner, or its split's parts."""
    if i in m.a_to_b:
        return {m.a_to_b[i]}
    return {j for r in m.regroups if i in r.a for j in r.b}


def _differences(m: Matching, i: int, j: int) -> tuple[str, ...]:
    """What differs between the pair `i`, `j` (DIFFERENCES; nothing: identical)."""
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
    if not _same_operands(m, x, y):
        what.append("operands")
    return tuple(what)


def _same_operands(m: Matching, x: Node, y: Node) -> bool:
    """Whether each operand of `x` stands for the operand of `y` at the same position."""
    if len(x.operands) != len(y.operands):
        return False
    return all(ob in _counterparts(m, oa) for oa, ob in zip(x.operands, y.operands, strict=True))


def is_collective(node: Node) -> bool:
    return node.op in COLLECTIVES


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
