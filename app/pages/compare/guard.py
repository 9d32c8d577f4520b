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

import json
from dataclasses import dataclass, field
from typing import Any

from workers.protocol import MAIN_BOUNDARY, BoundaryId, Mode, PathId

IMPLEMENTATION_KEYS: tuple[str, ...] = ("kernel", "implementation", "variant")
"""Parameters that choose an implementation rather than the problem: experimental."""
UNCONTROLLED_MEASURE: frozenset[str] = frozenset(
    {"samples", "max_seconds", "auto_max_samples", "auto_rel_iqr", "warmup"}
)
"""How long sampling goes on changes the precision of a median, not what it measures."""
DISPATCH = BoundaryId.HOST_DISPATCH.value
EVENTS = BoundaryId.DEVICE_EVENTS.value


@dataclass(frozen=True)
class RunFacts:
    """One run, reduced to what the guard compares."""

    id: str
    status: str
    valid: bool | None
    controlled: dict[str, str]
    experimental: dict[str, str]
    boundaries: tuple[str, ...]
    """Every (boundary, subject) the run measured, as 'boundary' or 'boundary [subject]'."""
    default_boundary: str | None
    subject: str | None
    compile_only: bool = False
    """The job stopped after compile: it has compiler output and no time."""
    target: str | None = None
    """What it was compiled for: a target id, or the host's device and path."""


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


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _label(boundary: str, subject: str | None) -> str:
    return f"{boundary} [{subject}]" if subject else boundary


def run_facts(job: dict[str, Any], subject: str | None = None) -> RunFacts:
    """The facts of one job as `job_public` returns it; `subject` picks a measurement set."""
    run = job.get("run") or {}
    params = dict(run.get("params") or job.get("params") or {})
    measure = dict((run.get("job") or {}).get("measure") or job.get("measure") or {})
    env = run.get("environment") or {}
    mode = str(measure.get("mode", Mode.LATENCY.value))
    controlled = {"workload": str(job.get("workload"))}
    for key in sorted(params):
        if key not in IMPLEMENTATION_KEYS and key not in ("dtype", "precision"):
            controlled[f"params.{key}"] = _text(params[key])
    controlled["dtype"] = _text(params.get("dtype"))
    controlled["precision"] = _text(params.get("precision"))
    controlled["mode"] = mode
    controlled["cache policy"] = _text(measure.get("cache", "cold"))
    for key in sorted(measure):
        if key in UNCONTROLLED_MEASURE or key in ("mode", "cache"):
            continue
        if key == "calls_per_sample" and mode != Mode.THROUGHPUT.value:
            continue  # K only shapes throughput samples
        controlled[f"measure.{key}"] = _text(measure[key])
    measurements = run.get("measurements") or []
    subjects = [m.get("subject") for m in measurements]
    chosen = subject if subject is not None else (subjects[0] if subjects else None)
    boundaries = tuple(
        _label(m["boundary"], m.get("subject")) for m in measurements if "boundary" in m
    )
    rates = run.get("rates") or {}
    main = MAIN_BOUNDARY.get(Mode(mode)) if mode in set(Mode) else None
    default = rates.get("boundary") or (main.value if main is not None else None)
    path = str(job.get("path"))
    # `kernel` picks a hand-written CUDA kernel; on a JAX path it means nothing: XLA chose.
    implementation = [
        f"{k}={_text(params[k])}"
        for k in IMPLEMENTATION_KEYS
        if k in params and (k != "kernel" or path == PathId.CUDA.value)
    ]
    if not implementation and path != PathId.CUDA.value:
        implementation.append("XLA")
    if chosen:
        implementation.append(f"measurement {chosen}")
    experimental = {
        "path": path,
        "device": _device(env),
        "implementation": ", ".join(implementation) or "—",
        "version": _versions(env),
    }
    stages = job.get("stages") or []
    compile_only = bool(stages) and all(s == "compile" for s in stages)
    target = job.get("target") or f"{experimental['device']} ({path})"
    return RunFacts(
        compile_only=compile_only,
        target=target,
        id=str(job.get("id")),
        status=str(job.get("status")),
        valid=run.get("valid") if run else None,
        controlled=controlled,
        experimental=experimental,
        boundaries=boundaries,
        default_boundary=default,
        subject=chosen,
    )


def _device(env: dict[str, Any]) -> str:
    """The devices a run used, as a reader names them: "1 × CPU", "8 × NVIDIA H200"."""
    if not env:
        return "—"
    platform = str(env.get("platform") or "?")
    kind = str(env.get("device_kind") or "").strip()
    count = env.get("device_count")
    if not count:
        # Compiled without executing (e.g. CUDA C++ with no GPU): the kind says for what.
        kind = kind.removeprefix("no GPU used: ")
        return f"no device ({kind})" if kind else "no device"
    if not kind or kind.lower() == platform.lower():
        kind = platform.upper()
    elif platform.lower() not in kind.lower() and platform not in ("?", "none"):
        kind = f"{kind} ({platform.upper()})"
    return f"{count} × {kind}"


def _versions(env: dict[str, Any]) -> str:
    """The software that compiled and ran it: jax, jaxlib and the backend's own version."""
    if not env:
        return "—"
    text = f"jax {env.get('jax_version', '?')}, jaxlib {env.get('jaxlib_version', '?')}"
    backend = env.get("backend_platform_version")
    return f"{text}, backend {backend}" if backend else text


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
        for kind, mine, theirs in (
            ("controlled", first.controlled, other.controlled),
            ("experimental", first.experimental, other.experimental),
        ):
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
    if len(out.experimental) > 1:
        out.warnings.append(
            "more than one experimental variable differs (target, implementation): a "
            "difference in the output cannot be pinned on one"
        )
    return out


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
                and _label(wanted, subject) not in r.boundaries
            ):
                out.problems.append(
                    f"side {name}: run {r.id} has no {_label(wanted, subject)} measurement "
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
