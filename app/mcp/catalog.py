"""What an assistant can ask for: the targets and the workloads with their limits.

Targets are the build's own list (workers.protocol, shared with the workers), each with
the connected workers (from the API) that compile for it or have its chips. Workloads
are the API's listing, each parameter's JSON Schema read down to its type, bounds,
default and description.
"""

from __future__ import annotations

from typing import Any

from workers.protocol import TARGET_IDS, Platform, parse_target

NO_WORKER = (
    "no connected worker compiles for it: a compile for this target waits in the queue "
    "(with that reason) until one connects"
)


def targets_answer(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """Every target id, what it is, and which connected workers compile for it (without the
    hardware) or could run it (with the chips)."""
    rows = []
    for target_id in TARGET_IDS:
        target = parse_target(target_id)
        chip = target.chip
        compilers = [w["name"] for w in workers if target_id in (w.get("targets") or [])]
        runners = [w["name"] for w in workers if _has_chips(w, target.count, chip.kind_markers)]
        rows.append(
            {
                "id": target_id,
                "chip": chip.name,
                "count": target.count,
                "paths": [p.value for p in chip.paths],
                "hbm_bytes_per_device": chip.hbm_bytes,
                "hbm_label": chip.hbm_label,
                "compiled_by": compilers,
                "executed_by": runners,
                **({} if compilers else {"note": NO_WORKER}),
            }
        )
    return {
        "targets": rows,
        "how": "compile takes a target and compiles without its hardware (no time, no speed); "
        "run needs a worker in executed_by, or waits with the reason.",
        "workers": [
            {k: w.get(k) for k in ("name", "platform", "device_kind", "device_count", "paths")}
            for w in workers
        ],
    }


def _has_chips(worker: dict[str, Any], count: int, markers: tuple[str, ...]) -> bool:
    platform = worker.get("platform")
    if platform not in (Platform.TPU.value, Platform.GPU.value):
        return False
    kind = str(worker.get("device_kind") or "").lower()
    enough = int(worker.get("device_count") or 0) >= count
    return enough and any(m.lower() in kind for m in markers)


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
