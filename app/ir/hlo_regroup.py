"""Splits and merges: one kernel in A whose work B does in several, and the reverse.

A kernel's keys say what it computes (`app.ir.hlo_graph.HloGraph.keys`: each operation of
its body by JAX operation and source line, or by opcode and shape where the metadata is
silent). A kernel of B whose keys lie (mostly) inside one kernel of A is a part of it; two
or more parts that reach one another and together cover (most of) it make a split, as
long as they compute no more matrix products than it does (two layers written on one
line are two products, not the parts of one). A merge is the same with the sides
swapped. Only kernels left unpaired by the exact steps take part, and of those only
kernels whose body one side has more of than the other.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from app.ir.hlo_graph import KERNELS, HloGraph
from app.ir.hlo_match import Matching, Regroup

INSIDE = 0.75
"""The share of a part's keys that must be the whole's."""
COVERED = 0.6
"""The share of the whole's keys that its parts must cover together."""
SHARED = frozenset({"parameter", "constant"})
"""Instructions that connect whatever reads them, so connect nothing."""
HOPS = 3
"""Instructions that are no kernel (bitcasts, copies, tuples) two parts may be apart."""
COMMON = 32
"""A key found in more kernels than this is too common to propose a candidate."""


def _kernels(g: HloGraph, free: set[int], surplus: Counter[int]) -> list[int]:
    """The free kernels of `g` that may be part of a split or merge: those whose body this
    side has more of than the other (`surplus`); a kernel only renamed, or placed
    differently, has its twin there."""
    found = [
        k
        for k in g.units
        if k in free and g.instrs[k].op in KERNELS and surplus[g.instrs[k].body] > 0
    ]
    return [k for k in found if g.keys(k)]


def _rank(g: HloGraph) -> dict[int, float]:
    """Each instruction's place in program order, from 0 to 1."""
    return g.ranks()


def _parts(
    wholes: HloGraph, whole_ids: list[int], parts: HloGraph, part_ids: list[int]
) -> dict[int, list[int]]:
    """Each whole (by id) with the parts that lie inside it and nowhere better (an
    operation written once and called several times, like a norm, ties: the whole nearest
    in program order wins)."""
    at_whole, at_part = _rank(wholes), _rank(parts)
    index: dict[str, list[int]] = defaultdict(list)
    for w in whole_ids:
        for key in wholes.keys(w):
            index[key].append(w)
    found: dict[int, list[int]] = defaultdict(list)
    for p in part_ids:
        keys = parts.keys(p)
        candidates = {w for key in keys for w in index.get(key, ())[: COMMON + 1]}
        best: tuple[float, int, float] | None = None
        home: int | None = None
        for w in candidates:
            whole = wholes.keys(w)
            if len(whole) <= len(keys):
                continue
            shared = len(keys & whole)
            rank = (shared / len(keys), shared, -abs(at_whole[w] - at_part[p]))
            if rank[0] >= INSIDE and (best is None or rank > best):
                best, home = rank, w
        if home is not None:
            found[home].append(p)
    return found


def _near(g: HloGraph, start: int) -> set[int]:
    """The kernels reached from `start` through its operands and users, crossing at most
    HOPS instructions that are no kernel (nor a parameter or constant, which many read)."""
    found: set[int] = set()
    frontier = [start]
    seen = {start}
    for _ in range(HOPS + 1):
        step: list[int] = []
        for k in frontier:
            for n in (*g.instrs[k].operands, *g.instrs[k].users):
                if n in seen:
                    continue
                seen.add(n)
                if g.instrs[n].op in KERNELS:
                    found.add(n)
                elif g.instrs[n].op not in SHARED:
                    step.append(n)
        frontier = step
    return found


def _connected(g: HloGraph, members: list[int]) -> list[list[int]]:
    """The members in groups that reach one another (see `_near`)."""
    groups: list[set[int]] = []
    for k in members:
        linked = _near(g, k)
        joined = [grp for grp in groups if grp & linked or k in grp]
        merged = {k}.union(*joined)
        groups = [grp for grp in groups if grp not in joined] + [merged]
    return [sorted(grp) for grp in groups]


def _within(wholes: HloGraph, whole: int, parts: HloGraph, members: list[int]) -> list[int]:
    """The members that can be parts of the whole: each delivers an array of the whole's
    element counts or feeds other members only; nearest the whole in program order
    first, as long as their matrix products add up to no more than the whole's."""
    at_whole, at_part = _rank(wholes)[whole], _rank(parts)
    counts, inside = wholes.instrs[whole].counts, set(members)
    members = [
        p
        for p in members
        if set(parts.instrs[p].counts) & set(counts) or set(parts.instrs[p].users) <= inside
    ]
    left = wholes.gemms(whole)
    kept: list[int] = []
    for p in sorted(members, key=lambda p: abs(at_part[p] - at_whole)):
        if parts.gemms(p) <= left:
            left -= parts.gemms(p)
            kept.append(p)
    return sorted(kept)


def _grouped(
    wholes: HloGraph, whole_ids: list[int], parts: HloGraph, part_ids: list[int]
) -> list[tuple[int, list[int]]]:
    out: list[tuple[int, list[int]]] = []
    for whole, found in _parts(wholes, whole_ids, parts, part_ids).items():
        keys = wholes.keys(whole)
        best: tuple[int, list[int]] | None = None
        members = _within(wholes, whole, parts, found)
        for group in _connected(parts, members) if len(members) > 1 else []:
            covered = len(set().union(*(parts.keys(p) for p in group)) & keys)
            if (
                len(group) > 1
                and covered >= COVERED * len(keys)
                and (best is None or covered > best[0])
            ):
                best = (covered, group)
        if best is not None:
            out.append((whole, best[1]))
    return sorted(out)


def find_regroups(m: Matching) -> None:
    """Splits, then merges among what is left, over the kernels still free; their members
    are taken out of the pairing (`Matching.taken_a`, `taken_b`)."""
    free_a = {i for i in m.a.units if m.free_a(i)}
    free_b = {j for j in m.b.units if m.free_b(j)}
    bodies_a = Counter(m.a.instrs[i].body for i in free_a)
    bodies_b = Counter(m.b.instrs[j].body for j in free_b)
    kernels_a = _kernels(m.a, free_a, bodies_a - bodies_b)
    kernels_b = _kernels(m.b, free_b, bodies_b - bodies_a)
    found: list[Regroup] = []
    for whole, members in _grouped(m.a, kernels_a, m.b, kernels_b):
        found.append(Regroup((whole,), tuple(members)))
        free_a.discard(whole)
        free_b.difference_update(members)
    kernels_a = [k for k in kernels_a if k in free_a]
    kernels_b = [k for k in kernels_b if k in free_b]
    for whole, members in _grouped(m.b, kernels_b, m.a, kernels_a):
        found.append(Regroup(tuple(members), (whole,)))
    for regroup in found:
        m.taken_a.update(regroup.a)
        m.taken_b.update(regroup.b)
    m.regroups.extend(found)
