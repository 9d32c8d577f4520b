"""What an assistant can ask for: the targets and the workloads with their limits.

Targets are the API's listing (`GET /api/v1/targets`), grouped by device model so every
target fits one answer: each with what one device may hold (usable_bytes: libtpu's own
figure on a TPU, as a connected worker read it; JAX's share on a GPU) beside the
published HBM, and the connected workers that compile for it or have its chips.
Workloads are the API's listing, each parameter's JSON Schema read down to its type,
bounds, default and description.
"""

from __future__ import annotations

from typing import Any

NO_WORKER = (
    "no connected worker compiles for it: a compile for this target waits in the queue "
    "(with that reason) until one connects"
)


def targets_answer(listing: dict[str, Any]) -> dict[str, Any]:
    """Every target id by device model: the model's published figures once, then each
    target's devices, usable bytes and workers (named only where there are any)."""
    models = []
    for chip in listing.get("chips") or []:
        rows = [t for t in listing.get("data") or [] if t["model"] == chip["model"]]
        if not rows:
            continue
        models.append(
            {
                "model": chip["model"],
                "chip": chip["name"],
                "path": rows[0]["path"],
                "paths": chip["paths"],
                "hbm_bytes_per_device": rows[0]["hbm_bytes"],
                "hbm_label": rows[0]["hbm_label"],
                "usable_source": rows[0]["usable_source"],
                "targets": [_target(t) for t in rows],
            }
        )
    return {
        "models": models,
        "how": "usable_bytes is what one device may hold (null: not read yet); compile takes "
        "a target, on the path it names, and compiles without its hardware (no time, no "
        "speed); run needs a worker in executed_by, or waits with the reason. "
        "GET /api/v1/targets adds each chip's bandwidth, peak rates and clock.",
    }


def _target(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row["id"],
        "devices": row["devices"],
        "usable_bytes": row["usable_bytes"],
    }
    if row["compiled_by"]:
        out["compiled_by"] = row["compiled_by"]
    else:
        out["note"] = NO_WORKER
    if row["executed_by"]:
        out["executed_by"] = row["executed_by"]
    return out


def workloads_answer(listing: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    """The workloads in short, or one of them (`name`) with every parameter's limits."""
    if name is None:
        return {
            "workloads": [
                {
                    "name": w["id"],
                    "title": w.get("title"),
                    "paths": w.get("paths"),
                    "parameters": parameters(w.get("params_schema") or {}),
                }
                for w in listing
            ],
            "how": "give a workload's name for its summary too; parameters are bounded: a "
            "value outside a range is refused naming the field and its range.",
        }
    found = [w for w in listing if w["id"] == name]
    if not found:
        known = ", ".join(w["id"] for w in listing)
        raise LookupError(f"no workload {name[:64]!r} (workloads: {known})")
    (w,) = found
    return {
        "name": w["id"],
        "title": w.get("title"),
        "summary": w.get("summary"),
        "paths": w.get("paths"),
        "stages": w.get("stages"),
        "parameters": parameters(w.get("params_schema") or {}, detail=True),
    }


def parameters(schema: dict[str, Any], *, detail: bool = False) -> dict[str, Any]:
    """Each parameter as one line, e.g. 'integer 1..16384, default 1024'; with `detail`,
    a dict with its description too."""
    defs = schema.get("$defs") or {}
    found: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        line = _line(_resolved(prop, defs))
        found[key] = {"limits": line, "description": prop.get("description")} if detail else line
    return found


def _resolved(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref") or next(
        (a.get("$ref") for a in prop.get("anyOf") or prop.get("allOf") or [] if a.get("$ref")),
        None,
    )
    if isinstance(ref, str):
        return {**defs.get(ref.rsplit("/", 1)[-1], {}), **{k: v for k, v in prop.items()}}
    return prop


def _line(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        kind = "one of " + ", ".join(str(v) for v in prop["enum"])
    else:
        kind = str(prop.get("type") or "value")
        types = [a.get("type") for a in prop.get("anyOf") or [] if a.get("type")]
        if types:
            kind = " or ".join(str(t) for t in types)
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None or high is not None:
        kind += f" {'' if low is None else low}..{'' if high is None else high}"
    if "default" in prop:
        kind += f", default {prop['default']!r}"
    return kind
