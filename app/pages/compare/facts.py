"""One run reduced to what the comparison guard compares: its controlled variables (the
problem and how it was measured), its experimental ones (path, device, implementation,
versions), its boundaries and whether it only compiled. `app.pages.compare.guard` judges
two sides of these."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from workers.catalog import WORKLOADS
from workers.protocol import MAIN_BOUNDARY, Mode, PathId
from workers.protocol.compiler_options import NONE, as_text

IMPLEMENTATION_KEYS: tuple[str, ...] = ("kernel", "implementation", "variant")
"""Parameters that choose an implementation rather than the problem: experimental."""
UNCONTROLLED_MEASURE: frozenset[str] = frozenset(
    {"samples", "max_seconds", "auto_max_samples", "auto_rel_iqr", "warmup"}
)
"""How long sampling goes on changes the precision of a median, not what it measures."""
OPTIONS = "compiler options"
"""The controlled variable that may also be the experiment: XLA options of the compile."""


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


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def label(boundary: str, subject: str | None) -> str:
    """A measurement as a side names it: "host-sync" or "host-sync [kernel]"."""
    return f"{boundary} [{subject}]" if subject else boundary


def run_facts(job: dict[str, Any], subject: str | None = None) -> RunFacts:
    """The facts of one job as `job_public` returns it; `subject` picks a measurement set."""
    run = job.get("run") or {}
    params = dict(run.get("params") or _with_defaults(job))
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
    # Runs from before compiler options existed have none: they read as "none".
    options = (run.get("job") or {}).get("compiler_options") or job.get("compiler_options")
    controlled[OPTIONS] = as_text(options) if isinstance(options, dict) else NONE
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
        label(m["boundary"], m.get("subject")) for m in measurements if "boundary" in m
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


def _with_defaults(job: dict[str, Any]) -> dict[str, Any]:
    """A job's parameters with its workload's defaults filled in, as a finished run records
    them: a queued repeat then reads the same as the run it repeats."""
    params: dict[str, Any] = dict(job.get("params") or {})
    cls = WORKLOADS.get(str(job.get("workload")))
    if cls is None:
        return params
    try:
        filled: dict[str, Any] = cls.model_validate(params).model_dump(mode="json", by_alias=True)
    except ValidationError:
        return params
    return filled


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
