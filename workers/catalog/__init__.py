"""The workload catalog: each workload's typed, bounded parameters. No jax here.

The server imports this to validate jobs and build forms; workers import it to parse
parameters before handing them to the JAX code in `workers.workloads`.
"""

from __future__ import annotations

from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError

from workers.catalog.attention import AttentionParams
from workers.catalog.base import WorkloadParams
from workers.catalog.collective import CollectiveParams
from workers.catalog.elementwise import ElementwiseParams
from workers.catalog.exported import ExportedParams
from workers.catalog.ffi import FfiParams
from workers.catalog.gather import GatherParams
from workers.catalog.job_limit import host_job_bytes
from workers.catalog.kernels import PALLAS_FIELDS, pallas_refusal
from workers.catalog.matmul import MatmulParams
from workers.catalog.mesh import MESH_ERROR
from workers.catalog.peak import limit_text, refusal
from workers.catalog.reduction import ReductionParams
from workers.catalog.shape_sweep import ShapeSweepParams
from workers.catalog.sharded_matmul import ShardedMatmulParams

# How a client names a server and reaches it, for `boundary mcp --server` (in app/, which
# reaches the worker's side only through this package and workers.protocol): every
# `--server` option reads it the same way, and every client says a refusal and waits for
# a job the same way.
from workers.export.api_client import LIVE as LIVE
from workers.export.api_client import Refused as Refused
from workers.export.api_client import ServerLost as ServerLost
from workers.export.api_client import refusal_text as refusal_text
from workers.export.api_client import wait_ended as wait_ended
from workers.export.server_address import ServerAddress as ServerAddress
from workers.export.server_address import server_option as server_option
from workers.protocol import JobSpec, MeasureOptions, Mode, StageId
from workers.protocol.sizes import byte_text

CATALOG_VERSION = 1
"""Bumped whenever a workload's parameters change meaning."""

WORKLOADS: dict[str, type[WorkloadParams]] = {
    cls.workload: cls
    for cls in (MatmulParams, ElementwiseParams, ReductionParams, GatherParams, AttentionParams)
}
WORKLOADS[FfiParams.workload] = FfiParams  # JAX calling a compiled handler through XLA's FFI
# The scale stage's workloads: meshes, shardings and collectives (workers.catalog.mesh).
WORKLOADS.update({cls.workload: cls for cls in (ShardedMatmulParams, CollectiveParams)})
# A user's own function, brought as a jax.export artifact (workers.catalog.exported).
WORKLOADS[ExportedParams.workload] = ExportedParams
# Many shapes through one jitted function, without and with bucketing (workers.run.sweep).
WORKLOADS[ShapeSweepParams.workload] = ShapeSweepParams


class CatalogError(ValueError):
    """A job names an unknown workload or gives parameters outside their bounds.

    `field` names the offending parameter; the message never echoes large input.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def allowed_range(model: type[BaseModel], name: str) -> str | None:
    """A field's numeric bounds as text, e.g. '1 ≤ m ≤ 16384'; None if it has none."""
    info = model.model_fields.get(name)
    if info is None:  # a field known on the wire by its alias
        info = next((f for f in model.model_fields.values() if f.alias == name), None)
    if info is None:
        return None
    low = high = ""
    for bound in info.metadata:
        if isinstance(bound, annotated_types.Ge):
            low = f"{bound.ge} ≤ "
        elif isinstance(bound, annotated_types.Gt):
            low = f"{bound.gt} < "
        elif isinstance(bound, annotated_types.Le):
            high = f" ≤ {bound.le}"
        elif isinstance(bound, annotated_types.Lt):
            high = f" < {bound.lt}"
    return f"{low}{name}{high}" if low or high else None


def describe_validation_error(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> tuple[str, str | None]:
    """A short message naming the first bad field and its allowed range.

    With `model`, the range is the field's whole declared range, and an unknown field's
    message lists the known ones.
    """
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = ".".join(str(part) for part in err["loc"])
    field = f"{prefix}{loc}" if loc else prefix.rstrip(".") or None
    ctx = err.get("ctx") or {}
    msg = err["msg"]
    name = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
        if model is not None:
            # The problem's own fields first, then a Pallas kernel's settings.
            names = [f.alias or n for n, f in model.model_fields.items()]
            known = sorted(names, key=lambda n: n in PALLAS_FIELDS)
            msg = f"{msg} (known: {', '.join(known)})"
    bounds = ", ".join(f"{k}={v}" for k, v in ctx.items() if k in {"ge", "gt", "le", "lt"})
    declared = allowed_range(model, name) if model is not None and name else None
    if declared and err["type"] not in {"extra_forbidden", MESH_ERROR}:
        msg = f"{msg} (allowed: {declared})"
    elif bounds:
        msg = f"{msg} (allowed: {bounds})"
    return (f"{field}: {msg}" if field else msg), field


def parse_params(
    workload: str, params: dict[str, Any], max_bytes: int | None = None
) -> WorkloadParams:
    """Validate `params` for `workload`, or raise CatalogError naming the field; their
    input and output bytes may not pass `max_bytes` (None: this host's default job limit,
    workers.catalog.job_limit)."""
    cls = WORKLOADS.get(workload)
    if cls is None:
        known = ", ".join(sorted(WORKLOADS))
        raise CatalogError(f"workload: unknown workload (known: {known})", "workload")
    refused = pallas_refusal(workload, params)
    if refused is not None:
        raise CatalogError(f"{refused[0]}: {refused[1]}", refused[0])
    try:
        parsed = cls.model_validate(params)
    except ValidationError as exc:
        message, field = describe_validation_error(exc, "params.", cls)
        raise CatalogError(message, field) from None
    size, cap = parsed.input_bytes(), _cap(max_bytes)
    if size > cap:
        raise CatalogError(f"params: {over_limit(size, cap)}", "params")
    return parsed


def check_peak(params: WorkloadParams, job: JobSpec, max_bytes: int | None = None) -> None:
    """Refuse, naming params, a job whose estimated peak memory (WorkloadParams.peak: its
    inputs, outputs, float64 references and, for a sweep, every size's buffers) passes
    `max_bytes` (None: this host's default job limit). A job that only compiles makes no
    arrays: it is not counted."""
    if StageId.EXECUTE not in job.stages:
        return
    alive = job.measure.calls_per_sample if job.measure.mode is Mode.THROUGHPUT else 1
    cap = _cap(max_bytes)
    problem = refusal(params.peak(alive), cap)
    if problem is not None:
        raise CatalogError(problem, "params")


def _cap(max_bytes: int | None) -> int:
    """The job limit a check applies: `max_bytes`, or this host's default when None."""
    return host_job_bytes() if max_bytes is None else max_bytes


def over_limit(size: int, max_bytes: int) -> str:
    """Why a job's arrays are refused, in GB as well as bytes, and what would take them."""
    return f"inputs and outputs take {byte_text(size, exact=True)}, {limit_text(max_bytes)}"


def may_go_unchecked(workload: str, params: dict[str, Any]) -> bool:
    """Whether a job of `workload` with `params` may come back unchecked (see
    `WorkloadParams.may_go_unchecked`); False for parameters that do not parse."""
    cls = WORKLOADS.get(workload)
    if cls is None:
        return False
    try:
        return cls.model_validate(params).may_go_unchecked()
    except ValidationError:
        return False


def check_live_outputs(
    params: WorkloadParams,
    measure: MeasureOptions,
    max_bytes: int | None = None,
    output_bytes: int | None = None,
) -> None:
    """Refuse, naming measure.calls_per_sample, a throughput job whose K outputs alive at
    once would pass the byte cap (freeing them inside the timed loop would add work to
    the interval, so the cap must hold for all K). `output_bytes` overrides the
    parameters' own figure (a worker knows it once an artifact or program is read)."""
    if measure.mode is not Mode.THROUGHPUT:
        return
    out = output_bytes if output_bytes is not None else params.output_bytes()
    if out is None:
        return  # unknown here; the worker checks again once the program is compiled
    k, cap = measure.calls_per_sample, _cap(max_bytes)
    total = params.input_bytes() + k * out
    if total > cap:
        raise CatalogError(
            f"measure.calls_per_sample: {k} calls keep {k} outputs of {out:,} bytes alive at "
            f"once; with the inputs that is {total:,} bytes, over the limit of {cap:,}",
            "measure.calls_per_sample",
        )


def catalog_listing() -> list[dict[str, Any]]:
    """Every workload with its parameters' JSON Schema, for the API and the run form."""
    return [
        {
            "id": cls.workload,
            "title": cls.title,
            "summary": cls.summary,
            "paths": [p.value for p in cls.paths],
            "stages": [s.value for s in cls.stages],
            "params_schema": cls.model_json_schema(),
        }
        for cls in WORKLOADS.values()
    ]
