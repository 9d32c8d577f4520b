"""The run form: its fields built from the catalog's JSON Schemas, the path and stages it
starts on for the connected workers, and the targets it offers. What the form sends is
read back into a job by app.routes.run_form.read_form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.dispatch.requirements import Requirements, unmet
from app.pages.runs.target_options import target_options
from workers.catalog import WORKLOADS
from workers.catalog.kernels import JAX_PATHS, PALLAS, PALLAS_FIELDS, PALLAS_WORKLOADS, XLA
from workers.protocol import (
    MAX_SAMPLES,
    PATH_PLATFORM,
    CachePolicy,
    Capabilities,
    Mode,
    PathId,
    StageId,
)

JAX_PATH_IDS = tuple(p.value for p in JAX_PATHS)


def shown_on(workload: str, name: str, path: str) -> bool:
    """Whether the form shows (and sends) parameter `name` on `path`: a Pallas kernel's
    block sizes on the JAX paths, its compiler choice on jax-gpu only, and `kernel` where
    the path offers more than one."""
    if name in PALLAS_FIELDS:
        if workload not in PALLAS_WORKLOADS or path not in JAX_PATH_IDS:
            return False
        return name != "pallas_backend" or path == PathId.JAX_GPU.value
    if name == "kernel":
        return len(kernel_options(workload, path)) > 1
    return True


def kernel_options(workload: str, path: str) -> tuple[str, ...]:
    """The `kernel` values `path` takes for `workload`, its default first."""
    if path in JAX_PATH_IDS:
        return (XLA, PALLAS) if workload in PALLAS_WORKLOADS else (XLA,)
    schema = WORKLOADS[workload].model_json_schema()
    ref = schema["properties"].get("kernel", {}).get("$ref", "")
    values = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {}).get("enum", [])
    return tuple(str(v) for v in values if v not in (XLA, PALLAS))


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


def param_fields(workload: str, path: str | None = None) -> list[Field]:
    """The inputs for a workload's parameters, with their limits; with `path`, only those
    the path reads, `kernel` offering the path's own implementations."""
    schema = WORKLOADS[workload].model_json_schema()
    defs = schema.get("$defs", {})
    fields = []
    # The problem's own parameters first, then a Pallas kernel's settings.
    properties = sorted(schema.get("properties", {}).items(), key=lambda p: p[0] in PALLAS_FIELDS)
    for name, raw in properties:
        prop = _resolve(raw, defs)
        label = name.replace("_", " ")
        help_text = prop.get("description", "")
        if path is not None and not shown_on(workload, name, path):
            continue
        if name == "kernel" and path is not None:
            options = kernel_options(workload, path)
            fields.append(Field(name, label, "select", options[0], help_text, options=options))
        elif "enum" in prop:
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


@dataclass(frozen=True)
class _Offer:
    """What a workload offers (its paths and stages, and the stages ticked by default) and
    the connected workers that would run it."""

    workload: str
    paths: list[str]
    stages: list[str]
    wanted: list[str]
    workers: list[Capabilities]

    @classmethod
    def of(cls, workload: str, workers: list[Capabilities]) -> _Offer:
        """The offer of `workload` to `workers`."""
        stages = [s.value for s in WORKLOADS[workload].stages]
        wanted = [s for s in DEFAULT_STAGES if s in stages] or stages[:1]
        return cls(workload, [p.value for p in WORKLOADS[workload].paths], stages, wanted, workers)

    def runnable(self, path: str) -> list[str]:
        """The stages a connected worker can do on `path`: all those wanted, compile
        alone (a CUDA compiler without a GPU), or none."""
        if _can(path, True, self.workers):
            return self.wanted
        if _can(path, False, self.workers) and StageId.COMPILE.value in self.stages:
            return [StageId.COMPILE.value]
        return []


def _start_on(offer: _Offer, path: str, insist: bool, wait: str) -> PathChoice | None:
    """The start on `path`, an offered path, when a connected worker runs it, compiles for
    it, or the user insists on it; None when the form should start elsewhere."""
    ticked = offer.runnable(path)
    if ticked == offer.wanted:
        return PathChoice(path, ticked, None)
    if ticked:
        return PathChoice(
            path,
            ticked,
            f"The connected workers can compile for {path} but not execute it "
            "(no GPU that runs CUDA), so only compile is ticked. "
            "Tick execute to queue a job that waits for one.",
        )
    compiles = _compilable(offer.workload, path, offer.workers)
    if not insist and compiles and StageId.COMPILE.value in offer.stages:
        # Nothing here runs the path, but a worker compiles for its targets: show what the
        # real compiler does, at once, rather than start on another path or queue a wait.
        return PathChoice(
            path,
            [StageId.COMPILE.value],
            f"No connected worker runs {path} on real devices, but one compiles for its "
            f"targets without the hardware, so the form starts on {compiles[0]}, compile "
            "only. Choose no target to queue a job that waits for real devices.",
            target=compiles[0],
        )
    if not insist:
        return None
    also = (
        f" Or choose a target below ({', '.join(compiles[:3])}, …): a connected worker "
        "compiles for it without the hardware, at once."
        if compiles
        else ""
    )
    return PathChoice(path, offer.wanted, f"No connected worker runs {path}. {wait}{also}")


def _moved_note(offer: _Offer, requested: str, start: str, wait: str) -> str:
    """Why the form starts on `start` rather than on `requested`, which nothing runs."""
    compiles = _compilable(offer.workload, requested, offer.workers)
    also = (
        f" A connected worker compiles for {requested}'s targets without the hardware "
        f"(e.g. {compiles[0]}): choose {requested} to compile for one."
        if compiles
        else ""
    )
    return (
        f"No connected worker runs {requested}, so the form starts on {start}, "
        f"which one does. Choose {requested} to queue it anyway. {wait}{also}"
    )


def _start_elsewhere(offer: _Offer, requested: str | None, wait: str) -> PathChoice:
    """The start on the first path a connected worker runs whole (else in part), saying
    why when the user `requested` an offered path; on that path or the first when none
    runs any."""
    start = next((p for p in offer.paths if offer.runnable(p) == offer.wanted), None) or next(
        (p for p in offer.paths if offer.runnable(p)), None
    )
    if start is None:
        return PathChoice(
            requested or offer.paths[0],
            offer.wanted,
            f"No connected worker can run {offer.workload} on any path. {wait}",
        )
    note = _moved_note(offer, requested, start, wait) if requested is not None else None
    return PathChoice(start, offer.runnable(start), note)


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
    offer = _Offer.of(workload, workers)
    wait = (
        "A job for it waits, visibly, until such a worker connects "
        f"(at most {queue_timeout_s:g} s)."
    )
    offered = requested if requested in offer.paths else None
    chosen = _start_on(offer, offered, insist, wait) if offered is not None else None
    return chosen or _start_elsewhere(offer, offered, wait)


def _compilable(workload: str, path: str, workers: list[Capabilities]) -> list[str]:
    """Targets of `path` that a connected worker compiles for (JAX paths only)."""
    if path not in (PathId.JAX_GPU.value, PathId.JAX_TPU.value):
        return []
    return [o.id for o in target_options(workload, path, workers) if o.offered]
