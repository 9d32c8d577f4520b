"""The HLO diff's matcher steps, each with one job (`app.ir.hlo_match` runs them in order
and holds every pair to its rule).

- exact: equal `merkle` fingerprints (opcode, shape and layout, attributes, a fusion's
  body, and the same of every operand up the graph), paired in program order;
- structure: equal `structure` fingerprints, the same without layouts and backend configs;
- parameters: the entry computations' parameters, by number (the program's inputs);
- metadata: an instruction's JAX operation and source line survive the renaming a
  different target or option brings; the best-suited instruction with the same metadata
  is taken (as a guess, when only the operation and line agree);
- roots: the entry computations' roots;
- propagation, greedy, from every pair (and split, and merge) outward: operands of a pair
  by position (top-down), users of a pair that read it at the same position with the
  same local signature (bottom-up), as long as the choice is unambiguous.
"""

from __future__ import annotations

import bisect
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from app.ir.hlo_graph import HloGraph, Node
from app.ir.hlo_match import Matching

LOOSE = frozenset({"layout", "tuple"})
"""Families whose metadata is often borrowed from a neighbour."""
CANDIDATES = 16
"""Instructions with the same metadata weighed for one instruction, at most, besides
those that read what its own operands were paired with."""
SCANNED = 64
"""Instructions with the same metadata looked at on either side of its place, at most."""


def affinity(x: Node, y: Node) -> int:
    """How well two nodes may stand for each other: below 0 never (a parameter or constant
    and anything else), 0 only on the word of their metadata (different kinds of
    operation), 4 and up the same opcode or one family of the same shape, more for the
    same shape and kind."""
    if "parameter" in (x.op, y.op) or "constant" in (x.op, y.op):
        return 6 if x.op == y.op and x.dims == y.dims else -1
    if x.op == y.op:
        score = 4
    elif x.family is not None and x.family == y.family:
        score = 2
    else:
        return 0
    if x.dims == y.dims:
        score += 2
    if x.kind == y.kind:
        score += 1
    return score


def contradicts(x: Node, y: Node) -> bool:
    """Whether the metadata of two computing nodes says they come from different
    operations: both name one and neither the JAX operation nor the source line agree.
    (A bitcast, reshape, copy or tuple element often carries its neighbour's metadata, so
    theirs says nothing.)"""
    if x.family in LOOSE or y.family in LOOSE:
        return False
    named = bool(x.op_name and y.op_name)
    placed = bool(x.source and y.source)
    if not (named or placed):
        return False
    return not ((named and x.op_name == y.op_name) or (placed and x.source == y.source))


def _upstream(g: HloGraph, k: int, depth: int = 2) -> tuple[int, ...]:
    """The nodes `k` reads, and what they read, `depth` levels up."""
    found: dict[int, None] = {}
    frontier = [k]
    for _ in range(depth):
        frontier = [o for f in frontier for o in g.instrs[f].operands if o not in found]
        found.update(dict.fromkeys(frontier))
    return tuple(found)


def _by_fingerprint(m: Matching, step: str, fingerprint: Callable[[Node], int]) -> None:
    pending: dict[int, deque[int]] = defaultdict(deque)
    for i in m.a.units:
        if m.free_a(i):
            pending[fingerprint(m.a.instrs[i])].append(i)
    for j in m.b.units:
        queue = pending.get(fingerprint(m.b.instrs[j])) if m.free_b(j) else None
        if queue:
            m.pair(queue.popleft(), j, step)


def match_exact(m: Matching) -> None:
    """Nodes whose whole upstream graph is the same."""
    _by_fingerprint(m, "exact", lambda n: n.merkle)


def match_structure(m: Matching) -> None:
    """Nodes whose upstream graph has the same structure (opcodes, shapes, attributes,
    fusion bodies), laid out or configured differently."""
    _by_fingerprint(m, "structure", lambda n: n.structure)


def match_parameters(m: Matching) -> None:
    """The entry computations' parameters, by number (the same input whatever its shape
    or layout became; another size is a guess)."""
    found = {
        m.a.instrs[i].literal: i
        for i in m.a.units
        if m.a.instrs[i].op == "parameter" and m.a.instrs[i].entry and m.free_a(i)
    }
    for j in m.b.units:
        y = m.b.instrs[j]
        if y.op == "parameter" and y.entry and m.free_b(j) and y.literal in found:
            m.pair(found.pop(y.literal), j, "parameters", may_guess=True)


def _metadata_keys(node: Node) -> list[tuple[Hashable, ...]]:
    """Keys from the most telling to the least: operation and line, line, operation."""
    keys: list[tuple[Hashable, ...]] = []
    if node.op_name and node.source:
        keys.append(("both", node.op_name, node.source))
    if node.source:
        keys.append(("line", node.source))
    if node.op_name:
        keys.append(("op", node.op_name))
    return keys


def match_metadata(m: Matching) -> None:
    """The same JAX operation and source line, in A's program order (so that what a node
    reads is paired before it, and counts for the candidate reading it)."""
    keys_b = {j: tuple(_metadata_keys(m.b.instrs[j])) for j in m.b.units if m.free_b(j)}
    index = _index(keys_b)
    rank_a, rank_b = m.a.ranks(), m.b.ranks()
    upstream_b: dict[int, tuple[int, ...]] = {}
    placed = {key: tuple(rank_b[j] for j in group) for key, group in index.items()}
    for i in m.a.units:
        if not m.free_a(i):
            continue
        keys = [k for k in _metadata_keys(m.a.instrs[i]) if k in index]
        if not keys:
            continue
        partners = {m.a_to_b[o] for o in _upstream(m.a, i) if o in m.a_to_b}
        near = {
            u for p in partners if len(users := m.b.instrs[p].users) <= CANDIDATES for u in users
        }
        weigh = Candidates(m, i, partners, upstream_b, rank_a[i], rank_b)
        for key in keys:
            pool = [u for u in near if key in keys_b.get(u, ())]
            pool += _around(m, index[key], placed[key], rank_a[i])
            both = key[0] == "both"
            best = weigh.best(pool, 0 if both else 4, guess=False)
            if best is None and both:  # a kernel for a kernel, at least
                best = weigh.best(pool, 2, guess=True)
            if best is not None and m.pair(i, best, "metadata", may_guess=both):
                break


def _index(
    keys: dict[int, tuple[tuple[Hashable, ...], ...]],
) -> dict[tuple[Hashable, ...], tuple[int, ...]]:
    """B's free nodes (`keys`: each one's metadata keys) by each key, in program order."""
    index: dict[tuple[Hashable, ...], list[int]] = defaultdict(list)
    for j, found in keys.items():
        for key in found:
            index[key].append(j)
    return {key: tuple(group) for key, group in index.items()}


def _around(m: Matching, group: tuple[int, ...], ranks: tuple[float, ...], at: float) -> list[int]:
    """Up to CANDIDATES free nodes of `group` (in B's program order, at `ranks`) nearest
    to the place `at`, looking at most SCANNED nodes either way: a large group (one JAX
    operation everywhere) is never walked whole for one node."""
    middle = bisect.bisect_left(ranks, at)
    out: list[int] = []
    for step in (-1, 1):
        k = middle - 1 if step < 0 else middle
        found = scanned = 0
        while 0 <= k < len(group) and found < CANDIDATES // 2 and scanned < SCANNED:
            if m.free_b(group[k]):
                out.append(group[k])
                found += 1
            k += step
            scanned += 1
    return out


@dataclass
class Candidates:
    """Weighs candidates for one node `i` of A."""

    m: Matching
    i: int
    partners: set[int]
    """What `i` reads (two levels up), as paired in B."""
    upstream: dict[int, tuple[int, ...]]
    """What each node of B reads two levels up, worked out once."""
    at: float
    """Where `i` is in A's program order, from 0 to 1."""
    ranks: dict[int, float]
    """Where each node of B is in B's."""

    def best(self, pool: Iterable[int], wanted: int, *, guess: bool) -> int | None:
        """The candidate the rule allows (as a guess, with `guess`) that suits `i` best:
        affinity (at least `wanted`), what it reads paired with what `i` reads, the same
        kind of computation, then the nearest in program order."""
        x = self.m.a.instrs[self.i]
        best: tuple[int, float] | None = None
        found: int | None = None
        for j in pool:
            if not self.m.free_b(j) or not self.m.allows(self.i, j, guess=guess):
                continue
            y = self.m.b.instrs[j]
            score = affinity(x, y)
            if score < wanted:
                continue
            if self.partners:
                if j not in self.upstream:
                    self.upstream[j] = _upstream(self.m.b, j)
                score += 2 * len(self.partners.intersection(self.upstream[j]))
            score -= 2 * (x.entry != y.entry)
            rank = (score, -abs(self.at - self.ranks[j]))
            if best is None or rank > best:
                best, found = rank, j
        return found


def match_roots(m: Matching) -> None:
    """The entry computations' roots, when both are free and alike."""
    root_a = next((i for i in m.a.units if m.a.instrs[i].root and m.a.instrs[i].entry), None)
    root_b = next((j for j in m.b.units if m.b.instrs[j].root and m.b.instrs[j].entry), None)
    if root_a is None or root_b is None or not (m.free_a(root_a) and m.free_b(root_b)):
        return
    if affinity(m.a.instrs[root_a], m.b.instrs[root_b]) >= 4:
        m.pair(root_a, root_b, "roots")


def propagate(m: Matching) -> None:
    """From each pair, split and merge to its operands and its users, greedily, until
    nothing more is unambiguous."""
    pairs = sorted(m.a_to_b.items(), key=lambda p: m.made[p[0]][0] != "roots")  # roots first
    work: deque[tuple[list[int], list[int]]] = deque(([i], [j]) for i, j in pairs)
    work.extend((list(r.a), list(r.b)) for r in m.regroups)
    while work:
        xs, ys = work.popleft()
        for i, j in [*_downward(m, xs, ys), *_upward(m, xs, ys)]:
            free = m.free_a(i) and m.free_b(j)
            if (
                free
                and not contradicts(m.a.instrs[i], m.b.instrs[j])
                and m.pair(i, j, "propagation")
            ):
                work.append(([i], [j]))


def _downward(m: Matching, xs: list[int], ys: list[int]) -> list[tuple[int, int]]:
    ops_a = _outside((o for x in xs for o in m.a.instrs[x].operands), xs)
    ops_b = _outside((o for y in ys for o in m.b.instrs[y].operands), ys)
    if len(xs) == 1 == len(ys) and len(ops_a) == len(ops_b):
        return [
            (oa, ob)
            for oa, ob in zip(ops_a, ops_b, strict=True)
            if m.free_a(oa) and m.free_b(ob) and affinity(m.a.instrs[oa], m.b.instrs[ob]) >= 4
        ]
    free_a = [o for o in dict.fromkeys(ops_a) if m.free_a(o)]
    free_b = [o for o in dict.fromkeys(ops_b) if m.free_b(o)]
    return _narrowing(m, free_a, free_b, [])


def _upward(m: Matching, xs: list[int], ys: list[int]) -> list[tuple[int, int]]:
    users_a = [u for u in _outside((u for x in xs for u in m.a.instrs[x].users), xs) if m.free_a(u)]
    users_b = [u for u in _outside((u for y in ys for u in m.b.instrs[y].users), ys) if m.free_b(u)]
    if not users_a or not users_b:
        return []
    inside_a, inside_b = set(xs), set(ys)

    def reading(g: HloGraph, k: int) -> tuple[int, int]:
        node = g.instrs[k]
        inside = inside_a if g is m.a else inside_b
        at = next((n for n, o in enumerate(node.operands) if o in inside), -1)
        return node.coarse, at

    return _narrowing(m, users_a, users_b, _unique(users_a, users_b, m, reading, ordered=True))


def _narrowing(
    m: Matching, xs: list[int], ys: list[int], found: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """`found`, and more pairs of what it left of `xs` and `ys` by ever looser keys, each
    pair alone with its key on both sides: opcode and shape, opcode, family."""
    keys: list[Callable[[HloGraph, int], Hashable]] = [
        lambda g, k: (g.instrs[k].op, g.instrs[k].dims),
        lambda g, k: g.instrs[k].op,
        lambda g, k: g.instrs[k].family or g.instrs[k].op,
    ]
    for key in keys:
        done_a, done_b = {i for i, _ in found}, {j for _, j in found}
        rest_a = [x for x in xs if x not in done_a]
        rest_b = [y for y in ys if y not in done_b]
        if not rest_a or not rest_b:
            break
        found += [
            (x, y)
            for x, y in _unique(rest_a, rest_b, m, key)
            if affinity(m.a.instrs[x], m.b.instrs[y]) > 0
        ]
    return found


def _outside(ids: Iterable[int], group: list[int]) -> list[int]:
    inside = set(group)
    return [k for k in dict.fromkeys(ids) if k not in inside]


def _unique(
    xs: list[int],
    ys: list[int],
    m: Matching,
    key: Callable[[HloGraph, int], Hashable],
    *,
    ordered: bool = False,
) -> list[tuple[int, int]]:
    """Pairs of `xs` and `ys` whose key is theirs alone on both sides; with `ordered`, a
    key shared by as many on each side pairs them in program order."""
    by_a: dict[Hashable, list[int]] = defaultdict(list)
    by_b: dict[Hashable, list[int]] = defaultdict(list)
    for x in xs:
        by_a[key(m.a, x)].append(x)
    for y in ys:
        by_b[key(m.b, y)].append(y)
    found: list[tuple[int, int]] = []
    for k, left in by_a.items():
        right = by_b.get(k, [])
        if len(left) == len(right) and (len(left) == 1 or ordered):
            found += zip(left, right, strict=True)
    return found
