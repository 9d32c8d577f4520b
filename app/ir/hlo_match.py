"""The HLO diff's matching: the pairs found so far, the rule every pair must keep, and the
matcher steps as data.

The steps (`STEPS`, in `app.ir.hlo_matchers` and `app.ir.hlo_regroup`) run in order from
`run_steps`, each a function with one job that looks only at what earlier steps left
unpaired, as in XLA's own hlo_diff: identical subgraphs first, then the same structure,
the program's inputs, splits and merges, the same JAX operation and source line, the
roots, and last propagation bottom-up and top-down from every pair. Every pair remembers
the step that made it, and whether it is only a guess; a test can stop after any step.

The rule (`Matching.pair` refuses what breaks it, whichever step asks): two nodes pair only
if they do the same work (a GEMM with a GEMM, a reduction with a reduction, a collective
with a collective...) and deliver arrays of the same element count (for tuples, some array
in common). A step may ask for a pair that only its own evidence supports (the same JAX
operation on the same line): such a pair, of other sizes or of two kernels doing
different work, carries `guess`. A reduction never pairs with a GEMM, nor a collective,
a tuple, a parameter or a constant with anything else, not even as a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.ir.hlo_graph import KERNEL_WORKS, HloGraph, Node


@dataclass(frozen=True)
class Regroup:
    """A split (one in A, several in B) or a merge (several in A, one in B)."""

    a: tuple[int, ...]
    b: tuple[int, ...]

    @property
    def split(self) -> bool:
        return len(self.a) == 1


def compatible(x: Node, y: Node) -> str:
    """Whether two nodes' work lets them pair: "yes" (the same work), "guess" (only as a
    guess: two kernels doing different work, or an elementwise operation or a copy
    against a kernel) or "no" (a reduction and a GEMM; anything else of different work)."""
    works = {x.work, y.work}
    if x.work == y.work:
        return "yes"
    if works == {"gemm", "reduction"}:
        return "no"
    if works <= KERNEL_WORKS | {"op"} or works <= KERNEL_WORKS | {"layout"}:
        return "guess"
    return "no"


def same_size(x: Node, y: Node) -> bool:
    """Whether the two deliver arrays of one element count (a tuple: some array in common)."""
    a, b = x.counts, y.counts
    return a == b or any(c in b for c in a) or not (a or b)


@dataclass
class Matching:
    """The pairs found so far, and the nodes a split or merge has taken."""

    a: HloGraph
    b: HloGraph
    a_to_b: dict[int, int] = field(default_factory=dict)
    b_to_a: dict[int, int] = field(default_factory=dict)
    made: dict[int, tuple[str, bool]] = field(default_factory=dict)
    """How each pair was made, by its node in A: the step, and whether it is a guess."""
    regroups: list[Regroup] = field(default_factory=list)
    taken_a: set[int] = field(default_factory=set)
    taken_b: set[int] = field(default_factory=set)

    def allows(self, i: int, j: int, *, guess: bool = False) -> bool:
        """Whether the rule lets `i` and `j` pair (as a guess, with `guess`)."""
        x, y = self.a.instrs[i], self.b.instrs[j]
        verdict = compatible(x, y)
        if verdict == "no":
            return False
        return guess or (verdict == "yes" and same_size(x, y))

    def pair(self, i: int, j: int, step: str, *, may_guess: bool = False) -> bool:
        """Pair `i` and `j` if the rule allows it (as a guess only when `may_guess` and
        nothing better allows it); whether they were paired."""
        if self.allows(i, j):
            guess = False
        elif may_guess and self.allows(i, j, guess=True):
            guess = True
        else:
            return False
        self.a_to_b[i] = j
        self.b_to_a[j] = i
        self.made[i] = (step, guess)
        return True

    def free_a(self, i: int) -> bool:
        return self.a.instrs[i].unit and i not in self.a_to_b and i not in self.taken_a

    def free_b(self, j: int) -> bool:
        return self.b.instrs[j].unit and j not in self.b_to_a and j not in self.taken_b


@dataclass(frozen=True)
class Step:
    """One matcher: its name (what each pair it makes says as `step`), what it does, and
    the function that does it."""

    name: str
    does: str
    run: Callable[[Matching], None]


def run_steps(a: HloGraph, b: HloGraph, steps: tuple[Step, ...]) -> Matching:
    """Every step in order over the graphs `a` and `b`."""
    m = Matching(a, b)
    for step in steps:
        step.run(m)
    return m
