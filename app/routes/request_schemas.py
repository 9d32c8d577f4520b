"""The document's schemas of the bodies that queue work, as precise as a JSON Schema can
say what the server accepts. A job (POST /api/v1/jobs) is `JobSpec`:

- one branch per catalog workload: its parameters' own schema (required when it has
  required ones), the paths and stages it offers, the targets it takes (none, one device's,
  or any for the workloads that span a target's devices);
- by path (the job's, or its target's when it names none, else jax-cpu): the targets that
  go with it, and the compiler options its compiler takes, each of its type and bounds;
- the dumps a client may ask for (`only` is the server's own follow-up).

A fit search and a matrix name a workload of the catalog and targets this build knows,
each once. What no JSON Schema states (a Pallas kernel's block sizes against the problem's, a scale
workload's `devices` against its target's count, the files a job names being stored, its
estimated peak under the server's byte cap) is refused with 422 naming the field, as the
operation's document says.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.routes.schemas import inline_schema, inline_schema_of
from workers.catalog import WORKLOADS
from workers.catalog.mesh import MeshParams
from workers.protocol import TARGET_IDS, JobSpec, PathId, Platform, parse_target
from workers.protocol.compiler_options import MAX_OPTIONS, PATH_COMPILER
from workers.protocol.option_lists import ALLOWED, OptionSpec

NULL = {"type": "null"}


def _value(spec: OptionSpec) -> dict[str, Any]:
    """The JSON values an option takes (`workers.protocol.compiler_options.parse_value`)."""
    if spec.kind == "bool":
        return {"type": "boolean"}
    if spec.kind == "switch":
        return {"anyOf": [{"type": "boolean"}, {"enum": ["auto", "true", "false"]}]}
    if spec.kind == "enum":
        numbers = [int(c) for c in spec.choices if c.isdigit()]
        return {"anyOf": [{"enum": list(spec.choices)}, *([{"enum": numbers}] if numbers else [])]}
    return {"type": "integer", "minimum": spec.minimum, "maximum": spec.maximum}


def options_of(path: PathId) -> dict[str, Any]:
    """The compiler options a job on `path` may set: its compiler's, none on cuda."""
    compiler = PATH_COMPILER.get(path.value)
    allowed = ALLOWED[compiler] if compiler is not None else {}
    return {
        "type": "object",
        "properties": {name: _value(spec) for name, spec in allowed.items()},
        "additionalProperties": False,
        "maxProperties": MAX_OPTIONS if allowed else 0,
    }


def _targets(ids: list[str]) -> dict[str, Any]:
    return {"anyOf": [{"enum": ids}, NULL]} if ids else NULL


def _by_path() -> list[dict[str, Any]]:
    """Targets and compiler options by the path a job runs on."""
    rules: list[dict[str, Any]] = []
    for path in PathId:
        fits = [t for t in TARGET_IDS if path in parse_target(t).chip.paths]
        on_path = {"target": _targets(fits), "compiler_options": options_of(path)}
        rules.append(
            {
                "if": {"required": ["path"], "properties": {"path": {"const": path.value}}},
                "then": {"properties": on_path},
            }
        )
        # No path: a target's own names it (its first), none is jax-cpu.
        named = [t for t in TARGET_IDS if parse_target(t).chip.paths[0] is path]
        unnamed = {"not": {"required": ["path"]}}
        if path is PathId.JAX_CPU:
            when: dict[str, Any] = {**unnamed, "properties": {"target": NULL}}
        elif named:
            when = {**unnamed, "required": ["target"], "properties": {"target": {"enum": named}}}
        else:
            continue
        rules.append({"if": when, "then": {"properties": {"compiler_options": options_of(path)}}})
    # A share of the HBM is a GPU target's alone.
    gpus = [t for t in TARGET_IDS if parse_target(t).platform is Platform.GPU]
    asked = {"required": ["usable_fraction"], "properties": {"usable_fraction": {"not": NULL}}}
    rules.append(
        {"if": asked, "then": {"required": ["target"], "properties": {"target": {"enum": gpus}}}}
    )
    return rules


def _branch(name: str) -> dict[str, Any]:
    """One workload's part: its parameters, paths, stages and targets."""
    cls = WORKLOADS[name]
    params = inline_schema_of(cls.model_json_schema())
    if cls.no_target is not None:
        targets: dict[str, Any] = NULL
    elif cls.spans_artifact_devices or issubclass(cls, MeshParams):
        targets = _targets(list(TARGET_IDS))
    else:
        targets = _targets([t for t in TARGET_IDS if parse_target(t).count == 1])
    paths = [p.value for p in cls.paths]
    required = ["workload"]
    required += [] if PathId.JAX_CPU in cls.paths else ["path"]  # the default, or one named
    required += ["params"] if params.get("required") else []  # {} by default
    return {
        "required": required,
        "properties": {
            "workload": {"const": name},
            "path": {"enum": paths},
            "params": params,
            "stages": {"items": {"enum": [s.value for s in cls.stages]}, "uniqueItems": True},
            "target": targets,
        },
    }


def job_request_schema() -> dict[str, Any]:
    """The body of POST /api/v1/jobs (the module's docstring)."""
    base = inline_schema(JobSpec)
    dumps = base["properties"]["dumps"]
    base["properties"]["dumps"] = {**dumps, "enum": [d for d in dumps["enum"] if d != "only"]}
    return {**base, "oneOf": [_branch(name) for name in WORKLOADS], "allOf": _by_path()}


def _named_once(ids: list[str]) -> dict[str, Any]:
    return {"items": {"enum": ids}, "uniqueItems": True}


def fit_request_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The body of POST /api/v1/fits (`FitSpec`): one program, a catalog workload or an
    uploaded function; targets this build knows, each once; a path XLA compiles on."""
    base = inline_schema(model)
    props = base["properties"]
    props["workload"] = {"anyOf": [{"enum": list(WORKLOADS)}, NULL]}
    props["targets"] = {**props["targets"], **_named_once(list(TARGET_IDS))}
    props["path"] = {"anyOf": [{"enum": [PathId.JAX_GPU.value, PathId.JAX_TPU.value]}, NULL]}
    one_program = [
        {"required": [name], "properties": {name: {"not": NULL}, other: NULL}}
        for name, other in (("workload", "artifact"), ("artifact", "workload"))
    ]
    return {**base, "oneOf": one_program}


def matrix_request_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The body of POST /api/v1/matrices (`MatrixSpec`): a catalog workload, paths and
    targets (or `cpu`, the host reference) each named once."""
    base = inline_schema(model)
    props = base["properties"]
    props["workload"] = {**props["workload"], "enum": list(WORKLOADS)}
    props["paths"] = {**props["paths"], "uniqueItems": True}
    targets = next(t for t in props["targets"]["anyOf"] if t.get("type") == "array")
    named = {**targets, **_named_once(["cpu", *TARGET_IDS])}
    props["targets"] = {**props["targets"], "anyOf": [named, NULL]}
    return base
