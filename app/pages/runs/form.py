"""The run form: its fields built from the catalog's JSON Schemas, the path and stages it
starts on for the connected workers, and the targets it offers. What the form sends is
read back into a job by app.routes.run_form.read_form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.dispatch.requirements import Requirements, has_real, unmet
from workers.catalog import WORKLOADS, CatalogError
from workers.catalog.mesh import MeshParams
from workers.catalog.target_rules import apply_target
from workers.protocol import (
    MAX_SAMPLES,
    PATH_PLATFORM,
    TARGET_IDS,
    CachePolicy,
    Capabilities,
    JobSpec,
    Mode,
    PathId,
    StageId,
    parse_target,
)

PATH_ONLY_PARAMS: dict[str, str] = {"kernel": PathId.CUDA.value}
"""Parameters that mean something on one path only (the hand-written CUDA kernel): the form
shows and sends them only for that path, so JAX runs carry no warning about them."""
DEFAULT_STAGES: tuple[str, ...] = (StageId.COMPILE.value, StageId.EXECUTE.value)


@dataclass(frozen=True)
class Field:
    """One input of the form."""

    name: str
    label: str
    kind: str  # "integer" | "number" | "select" | "checkbox" | "text"
    default: Any
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    options: tuple[str, ...] = ()


@dataclass
class FormState:
    """What the user chose and what was wrong with it, so nothing typed is lost."""

    workload: str
    path: str
    target: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    stages: list[str] = field(default_factory=lambda: list(DEFAULT_STAGES))
    errors: dict[str, str] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)


def _resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref") or next(
        (item.get("$ref") for item in prop.get("allOf", []) if "$ref" in item), None
    )
    if ref:
        return {**defs[ref.rsplit("/", 1)[-1]], **{k: v for k, v in prop.items() if k != "$ref"}}
    return prop


def param_fields(workload: str) -> list[Field]:
    """The inputs for a workload's parameters, with their limits."""
    schema = WORKLOADS[workload].model_json_schema()
    defs = schema.get("$defs", {})
    fields = []
    for name, raw in schema.get("properties", {}).items():
        prop = _resolve(raw, defs)
        label = name.replace("_", " ")
        help_text = prop.get("description", "")
        if "enum" in prop:
            fields.append(
                Field(
                    name,
                    label,
                    "select",
                    prop.get("default"),
                    help_text,
                    options=tuple(str(v) for v in prop["enum"]),
                )
            )
        elif prop.get("type") == "boolean":
            fields.append(Field(name, label, "checkbox", prop.get("default", False), help_text))
        elif prop.get("type") in ("integer", "number"):
            fields.append(
                Field(
                    name,
                    label,
                    prop["type"],
                    prop.get("default"),
                    help_text,
                    minimum=prop.get("minimum", prop.get("exclusiveMinimum")),
                    maximum=prop.get("maximum", prop.get("exclusiveMaximum")),
                )
            )
        else:
            fields.append(Field(name, label, "text", prop.get("default"), help_text))
    return fields


def measure_fields() -> list[Field]:
    return [
        Field(
            "mode",
            "mode",
            "select",
            Mode.LATENCY.value,
            "latency: host-sync per call; throughput: K calls per sync; application: "
            "with transfers; dispatch: a teaching demo, not a speed",
            options=tuple(m.value for m in Mode),
        ),
        Field(
            "samples",
            "samples",
            "text",
            "20",
            f"a count from 1 to {MAX_SAMPLES}, or auto to stop when the spread settles",
        ),
        Field(
            "cache",
            "cache",
            "select",
            CachePolicy.COLD.value,
            "cold: caches cleared; persistent: the on-disk cache; warm: keep everything",
            options=tuple(c.value for c in CachePolicy),
        ),
    ]


def _can(path: str, executes: bool, workers: list[Capabilities]) -> bool:
    """Whether a connected worker can take a one-device job on `path` (the dispatch rule)."""
    cuda = path == PathId.CUDA.value
    req = Requirements(
        path=path,
        platform=PATH_PLATFORM[PathId(path)].value,
        devices=1,
        cuda_compile=cuda,
        cuda_run=cuda and executes,
    )
    return any(unmet(req, caps) is None for caps in workers)


@dataclass(frozen=True)
class PathChoice:
    """The path and stages the form starts on, and why."""

    path: str
    stages: list[str]
    note: str | None
    target: str | None = None
    """A target to compile for without the hardware, when that is what a worker can do."""


def choose_path(
    workload: str,
    requested: str | None,
    workers: list[Capabilities],
    queue_timeout_s: float,
    *,
    insist: bool = False,
) -> PathChoice:
    """Start on `requested` when a connected worker can run it, else on a path one can run
    (unless the user `insist`s, having picked it in the form).

    Only the stages a connected worker can do are ticked: a CUDA compiler without a GPU
    gets compile alone, so one click never queues a job that can only wait.
    """
    offered = [p.value for p in WORKLOADS[workload].paths]
    stages = [s.value for s in WORKLOADS[workload].stages]
    wanted = [s for s in DEFAULT_STAGES if s in stages] or stages[:1]

    def runnable(path: str) -> list[str]:
        if _can(path, True, workers):
            return wanted
        if _can(path, False, workers) and StageId.COMPILE.value in stages:
            return [StageId.COMPILE.value]
        return []

    wait = (
        "A job for it waits, visibly, until such a worker connects "
        f"(at most {queue_timeout_s:g} s)."
    )
    if requested in offered:
        ticked = runnable(requested)
        if ticked == wanted:
            return PathChoice(requested, ticked, None)
        if ticked:
            return PathChoice(
                requested,
                ticked,
                f"The connected workers can compile for {requested} but not execute it "
                "(no GPU that runs CUDA), so only compile is ticked. "
                "Tick execute to queue a job that waits for one.",
            )
    compiles = _compilable(workload, requested, workers) if requested in offered else []
    if requested in offered and not insist and compiles and StageId.COMPILE.value in stages:
        # Nothing here runs the path, but a worker compiles for its targets: show what the
        # real compiler does, at once, rather than start on another path or queue a wait.
        return PathChoice(
            requested,
            [StageId.COMPILE.value],
            f"No connected worker runs {requested} on real devices, but one compiles for its "
            f"targets without the hardware, so the form starts on {compiles[0]}, compile "
            "only. Choose no target to queue a job that waits for real devices.",
            target=compiles[0],
        )
    if insist and requested in offered:
        also = (
            f" Or choose a target below ({', '.join(compiles[:3])}, …): a connected worker "
            "compiles for it without the hardware, at once."
            if compiles
            else ""
        )
        return PathChoice(requested, wanted, f"No connected worker runs {requested}. {wait}{also}")
    fallback = next((p for p in offered if runnable(p) == wanted), None) or next(
        (p for p in offered if runnable(p)), None
    )
    if fallback is None:
        start = requested if requested in offered else offered[0]
        return PathChoice(
            start, wanted, f"No connected worker can run {workload} on any path. {wait}"
        )
    if requested in offered:
        compiles = _compilable(workload, requested, workers)
        also = (
            f" A connected worker compiles for {requested}'s targets without the hardware "
            f"(e.g. {compiles[0]}): choose {requested} to compile for one."
            if compiles
            else ""
        )
        note = (
            f"No connected worker runs {requested}, so the form starts on {fallback}, "
            f"which one does. Choose {requested} to queue it anyway. {wait}{also}"
        )
    else:
        note = None
    return PathChoice(fallback, runnable(fallback), note)


def _compilable(workload: str, path: str, workers: list[Capabilities]) -> list[str]:
    """Targets of `path` that a connected worker compiles for (JAX paths only)."""
    if path not in (PathId.JAX_GPU.value, PathId.JAX_TPU.value):
        return []
    return [o.id for o in target_options(workload, path, workers) if o.offered]


@dataclass(frozen=True)
class TargetOption:
    """A target the run form offers for a path, and how a connected worker would take it."""

    id: str
    label: str
    real: bool
    """A connected worker has real devices of this model, enough of them."""
    offered: bool
    """Some connected worker can take a compile-only job for it."""


def target_options(workload: str, path: str, workers: list[Capabilities]) -> list[TargetOption]:
    """The targets that combine with `workload` on `path` (the catalog's rules), each marked
    "compiled without the hardware" unless a connected worker has such devices."""
    options = []
    for target_id in TARGET_IDS:
        target = parse_target(target_id)
        if PathId(path) not in target.chip.paths:
            continue
        try:
            apply_target(
                JobSpec.model_validate({"workload": workload, "path": path, "target": target_id})
            )
        except (CatalogError, ValueError):
            continue  # e.g. b200:8 for a one-device workload
        real = any(has_real(caps, target) for caps in workers)
        offered = real or any(target_id in caps.targets for caps in workers)
        unit = "chip" if target.grid else "GPU"
        size = f"{target.count} {unit}{'s' if target.count > 1 else ''}"
        how = "on real devices" if real else "compiled without the hardware"
        if not offered:
            how += "; no connected worker compiles for it"
        label = f"{target_id} — {target.chip.name}, {size} ({how})"
        options.append(TargetOption(target_id, label, real, offered))
    return options


def wider_targets_note(workload: str, path: str, offered: list[TargetOption]) -> str | None:
    """What a one-device workload's target list leaves out, and which workloads take it:
    a slice or several GPUs need a workload that spans devices."""
    wider = [
        t
        for t in TARGET_IDS
        if PathId(path) in parse_target(t).chip.paths and parse_target(t).count > 1
    ]
    if not wider or any(o.id in wider for o in offered):
        return None
    spanning = ", ".join(
        name for name, cls in WORKLOADS.items() if issubclass(cls, MeshParams) and name != workload
    )
    many = "slices of several chips" if path == PathId.JAX_TPU.value else "several GPUs"
    return (
        f"{workload} runs on one device, so only one-device targets are offered; "
        f"{many} ({wider[0]} … {wider[-1]}) take a workload that spans devices: {spanning}."
    )


def target_note(target: str, real: bool) -> str:
    """Why a target makes the form compile only."""
    phrase = parse_target(target).hardware_phrase()
    if real:
        return (
            f"Target {target}: a connected worker has the hardware, so execute may be ticked "
            "too; compile alone shows what the compiler produced."
        )
    return (
        f"Target {target} implies compile only: no connected worker has the hardware "
        f"({phrase} would be needed to run it), so the compiler builds the program without "
        "it. The run shows the IR, what XLA chose and memory per device; there is no time, "
        "no speed and no correctness check. Ticking execute queues a job that waits for "
        "such a worker."
    )
