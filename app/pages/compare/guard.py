"""The comparison guard: like with like, or no ratio.

A comparison has two sides, each a set of runs of one configuration. Before any ratio,
every CONTROLLED variable (workload, parameters, dtype, precision, mode, cache policy,
boundary and the other measurement options) must be the same on both sides, and every
run on a side must share its side's whole configuration. The EXPERIMENTAL variable is
what the sides are allowed to differ in: path, device, implementation or version. The
guard says which ones differ and, when a controlled one does, explains why that makes
the ratio meaningless — the page then prints none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.pages.compare.facts import OPTIONS, RunFacts, label, run_facts
from workers.catalog.exported import VALUE_PARAMS
from workers.protocol import BoundaryId

__all__ = ["OPTIONS", "Guarded", "Mismatch", "RunFacts", "guard", "run_facts"]

DISPATCH = BoundaryId.HOST_DISPATCH.value
EVENTS = BoundaryId.DEVICE_EVENTS.value


@dataclass
class Mismatch:
    """A controlled variable that differs between the sides, and why that matters."""

    variable: str
    a: str
    b: str
    why: str


@dataclass
class Guarded:
    """The guard's verdict on a pair of sides."""

    boundary_a: str | None
    boundary_b: str | None
    subject_a: str | None
    subject_b: str | None
    controlled: dict[str, str] = field(default_factory=dict)
    experimental: list[tuple[str, str, str]] = field(default_factory=list)
    compile_only: bool = False
    """Both sides only compiled: their compiler output is compared, and no time exists."""
    mismatches: list[Mismatch] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    suggest_boundary: str | None = None

    @property
    def comparable(self) -> bool:
        """True when a ratio may be printed (given enough runs)."""
        return not self.mismatches and not self.problems


def _boundary_why(a: str, b: str, a_all: tuple[str, ...], b_all: tuple[str, ...]) -> str:
    """Why two different boundaries cannot be compared, in the guide's terms."""
    events_a = any(x.startswith(EVENTS) for x in a_all)
    events_b = any(x.startswith(EVENTS) for x in b_all)
    if (a == DISPATCH and (b == EVENTS or events_b)) or (
        b == DISPATCH and (a == EVENTS or events_a)
    ):
        return (
            "a dispatch-only timing (call → return; the device may still be working) against "
            "an event-delimited device interval: they enclose different work, so their ratio "
            "is no implementation speedup"
        )
    if DISPATCH in (a, b):
        return (
            "host-dispatch times only the call returning, not the work finishing: a teaching "
            "demo of asynchronous dispatch, never a speed"
        )
    return (
        f"the intervals enclose different work ({a} against {b}); compare one boundary both report"
    )


def _side_consistency(name: str, side: list[RunFacts], problems: list[str]) -> None:
    first = side[0]
    for other in side[1:]:
        checks = [("controlled", first.controlled, other.controlled)]
        if first.status == "done" and other.status == "done":
            # A queued repeat has not run anywhere yet: its device and versions are not
            # known, which is waiting, not a mixed side.
            checks.append(("experimental", first.experimental, other.experimental))
        for kind, mine, theirs in checks:
            for key in sorted(set(mine) | set(theirs)):
                if mine.get(key) != theirs.get(key):
                    problems.append(
                        f"side {name} mixes configurations: run {other.id} has {key} = "
                        f"{theirs.get(key, '—')}, run {first.id} has {mine.get(key, '—')} "
                        f"({kind} variable); a side's runs must be repeats of one job"
                    )
                    break


def _run_problems(name: str, side: list[RunFacts], problems: list[str]) -> None:
    for r in side:
        if r.status != "done":
            continue  # pending or failed runs are counted, not compared (see view)
        if r.valid is False:
            problems.append(
                f"side {name}: run {r.id} failed its correctness check: its timings are no "
                "result, so it cannot be compared"
            )


def guard(a: list[RunFacts], b: list[RunFacts], boundary: str | None = None) -> Guarded:
    """Check two sides (each at least one run; only finished runs are judged on timings)."""
    if not a or not b:
        raise ValueError("each side needs at least one run")
    first_a, first_b = a[0], b[0]
    if first_a.compile_only or first_b.compile_only:
        return _guard_compiled(a, b)
    boundary_a = boundary or first_a.default_boundary
    boundary_b = boundary or first_b.default_boundary
    out = Guarded(boundary_a, boundary_b, first_a.subject, first_b.subject)
    for name, side in (("A", a), ("B", b)):
        _side_consistency(name, side, out.problems)
        _run_problems(name, side, out.problems)
    for key in sorted(set(first_a.controlled) | set(first_b.controlled)):
        va, vb = first_a.controlled.get(key, "—"), first_b.controlled.get(key, "—")
        if va == vb:
            out.controlled[key] = va
            continue
        why = {
            "workload": "different workloads are different problems",
            "dtype": "storage type changes the bytes moved and the units that run",
            "precision": "contraction precision changes the arithmetic done",
            "mode": "each mode samples a different call pattern under a different boundary",
            "cache policy": "what compilation may reuse changes what the compile stage times",
        }.get(key, "a different problem or measurement, not the experiment")
        out.mismatches.append(Mismatch(key, va, vb, why))
    _check_boundaries(out, first_a, first_b, a, b)
    for key in ("path", "device", "implementation", "version"):
        va, vb = first_a.experimental[key], first_b.experimental[key]
        if va != vb:
            out.experimental.append((key, va, vb))
    _options_as_experiment(out)
    names = [e[0] for e in out.experimental]
    extra = [n for n in names if n == "version"] if "path" in names else names[1:]
    if extra and len(names) > 1:
        out.warnings.append(
            f"more than one experimental variable differs ({', '.join(names)}): the ratio "
            "cannot be attributed to one of them alone"
        )
    return out


COMPILE_CONTROLLED_SKIP = ("mode", "cache policy")
"""Measurement options that shape only timings: a compile-only comparison has none."""


def _guard_compiled(a: list[RunFacts], b: list[RunFacts]) -> Guarded:
    """Two sides that only compiled: the target is the one experimental variable.

    A target stands for path, device and compiler version at once (a v6e slice is
    compiled by libtpu for jax-tpu, a B200 by the CUDA plugin for jax-gpu), so those are
    not counted as separate variables. No boundary is compared: nothing was timed.
    """
    first_a, first_b = a[0], b[0]
    out = Guarded(None, None, None, None, compile_only=True)
    for name, side in (("A", a), ("B", b)):
        _side_consistency(name, side, out.problems)
    if first_a.compile_only != first_b.compile_only:
        timed = "B" if first_a.compile_only else "A"
        out.problems.append(
            f"side {timed} was timed and the other side only compiled: a compile-only run "
            "has no time to set against it; compare it with another compile-only run"
        )
    for key in sorted(set(first_a.controlled) | set(first_b.controlled)):
        if key in COMPILE_CONTROLLED_SKIP or key.startswith("measure."):
            continue
        if _values_only(key, first_a, first_b):
            continue  # input values and checks: they change no compile
        va, vb = first_a.controlled.get(key, "—"), first_b.controlled.get(key, "—")
        if va == vb:
            out.controlled[key] = va
        else:
            why = "a different problem, not the same program for another target"
            out.mismatches.append(Mismatch(key, va, vb, why))
    if first_a.target != first_b.target:
        out.experimental.append(("target", first_a.target or "—", first_b.target or "—"))
    impl_a, impl_b = first_a.experimental["implementation"], first_b.experimental["implementation"]
    if impl_a != impl_b:
        out.experimental.append(("implementation", impl_a, impl_b))
    _options_as_experiment(out)
    if len(out.experimental) > 1:
        out.warnings.append(
            "more than one experimental variable differs (target, implementation): a "
            "difference in the output cannot be pinned on one"
        )
    return out


def _values_only(key: str, a: RunFacts, b: RunFacts) -> bool:
    """Whether `key` only picks an uploaded program's input values or its check (its seed,
    input rules, reference): two compiles cannot differ by it."""
    exported = a.controlled.get("workload") == b.controlled.get("workload") == "exported"
    return exported and key.removeprefix("params.") in VALUE_PARAMS


def _options_as_experiment(out: Guarded) -> None:
    """Different compiler options are the experiment when nothing else differs ("what
    does XLA do if …"): they move from the mismatches to the experimental variables.
    Beside another difference they stay a mismatch, since neither could take the blame."""
    found = next((m for m in out.mismatches if m.variable == OPTIONS), None)
    if found is None:
        return
    others = [m for m in out.mismatches if m is not found]
    if others or out.experimental:
        besides = ", ".join([m.variable for m in others] + [e[0] for e in out.experimental])
        found.why = (
            f"compiler options are the experiment only when nothing else differs; here "
            f"{besides} differ{'s' if ',' not in besides else ''} too"
        )
        return
    out.mismatches.remove(found)
    out.experimental.append((OPTIONS, found.a, found.b))


def _check_boundaries(
    out: Guarded, first_a: RunFacts, first_b: RunFacts, a: list[RunFacts], b: list[RunFacts]
) -> None:
    ba, bb = out.boundary_a, out.boundary_b
    for name, side, wanted, subject in (("A", a, ba, out.subject_a), ("B", b, bb, out.subject_b)):
        for r in side:
            if (
                r.status == "done"
                and r.valid
                and wanted
                and label(wanted, subject) not in r.boundaries
            ):
                out.problems.append(
                    f"side {name}: run {r.id} has no {label(wanted, subject)} measurement "
                    f"(it has: {', '.join(r.boundaries) or 'none'})"
                )
    if ba != bb:
        out.mismatches.append(
            Mismatch(
                "boundary",
                ba or "—",
                bb or "—",
                _boundary_why(ba or "", bb or "", first_a.boundaries, first_b.boundaries),
            )
        )
        common = [
            x.split(" [")[0]
            for x in first_a.boundaries
            if x.split(" [")[0] in {y.split(" [")[0] for y in first_b.boundaries}
            and not x.startswith(DISPATCH)
        ]
        out.suggest_boundary = common[0] if common else None
    elif ba == DISPATCH:
        out.mismatches.append(
            Mismatch("boundary", ba, bb or "—", _boundary_why(DISPATCH, DISPATCH, (), ()))
        )
