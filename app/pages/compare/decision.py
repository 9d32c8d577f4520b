"""The decision record: what was measured, what changed, and what it costs, kept as
Markdown and JSON.

It holds what the guide asks a decision to state: the bottleneck observed; which layer
changed; whether correctness stayed within the declared tolerance; the scale it was
measured at and whether the result holds at the deployment scale; engineering and
operating cost (notes the user writes, and a cost per unit of work computed from the
prices per device-hour the user enters and the measured throughput); and a link to
every run with its environment. The JSON form reads back into the same record.
"""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workers.catalog import CatalogError, parse_params

NOTE_CHARS = 4000

LAYERS: dict[str, str] = {
    "path": "the programming model and compiler path (JAX/XLA or CUDA C++, and the hardware)",
    "device": "the hardware the same program ran on",
    "implementation": "the kernel or library that implements the operation",
    "version": "the software stack (JAX, jaxlib, the backend)",
}


class DecisionNotes(BaseModel):
    """What only the user can say, typed into the comparison page's record form."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(default="", max_length=200)
    bottleneck: str = Field(default="", max_length=NOTE_CHARS, description="What was observed.")
    layer: str = Field(default="", max_length=NOTE_CHARS, description="Which layer changed.")
    deployment_scale: str = Field(default="", max_length=NOTE_CHARS)
    holds: Literal["yes", "no", "unknown"] = "unknown"
    engineering_cost: str = Field(default="", max_length=NOTE_CHARS)
    operating_cost: str = Field(default="", max_length=NOTE_CHARS)
    price_a: float | None = Field(default=None, ge=0, le=1e6, description="Per device-hour.")
    price_b: float | None = Field(default=None, ge=0, le=1e6, description="Per device-hour.")


class SideRecord(BaseModel):
    """One side of the comparison as the record keeps it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    device: str
    implementation: str
    version: str
    runs: int
    boundary: str | None
    median_s: float | None = Field(description="Median of the runs' medians, seconds per call.")
    calls_per_hour: float | None = Field(description="3600 / median_s: one device set, serial.")
    devices: int = Field(description="Devices one call spans (what the price is paid for).")
    price_per_device_hour: float | None
    cost_per_call: float | None = Field(description="price × devices × median_s / 3600.")
    cost_per_million_calls: float | None
    correctness_passed: bool
    worst_error: float | None
    tolerance: float | None


class RunRecord(BaseModel):
    """A run the record rests on, with where it ran."""

    model_config = ConfigDict(extra="forbid")

    id: str
    side: str
    url: str
    status: str
    valid: bool | None
    median_s: float | None
    environment: dict[str, Any]


class DecisionRecord(BaseModel):
    """A comparison turned into a decision, with everything needed to check it later."""

    model_config = ConfigDict(extra="forbid")

    title: str
    created_at: str
    comparison: str = Field(description="URL of the comparison page.")
    workload: str
    unit_of_work: str
    controlled: dict[str, str]
    experimental: list[dict[str, str]]
    comparable: bool
    mismatches: list[dict[str, str]]
    verdict: str
    ratio: float | None
    interval: list[float] | None = Field(description="[low, high] of the B/A time ratio.")
    level: float | None
    noise_floor_pct: dict[str, float] = Field(description="A/A half-width per side, in %.")
    bottleneck: str
    layer_changed: str
    correctness_within_tolerance: bool
    measured_scale: str
    deployment_scale: str
    holds_at_deployment: Literal["yes", "no", "unknown"]
    engineering_cost: str
    operating_cost: str
    currency_note: str
    sides: list[SideRecord]
    runs: list[RunRecord]


def _devices(workload: str, params: dict[str, Any]) -> int:
    try:
        return parse_params(workload, params, max_bytes=2**62).devices()
    except CatalogError:
        return 1


def _side_record(side: dict[str, Any], price: float | None) -> SideRecord:
    median = statistics.median(side["medians"]) if side["medians"] else None
    runs = [r for r in side["runs"] if r["status"] == "done"]
    verdicts = [r["correctness"] or {} for r in runs]
    errors = [v["error"] for v in verdicts if v.get("error") is not None]
    passed = bool(verdicts) and all(v.get("passed") for v in verdicts)
    devices = _devices(side["workload"], side["params"])
    per_call = price * devices * median / 3600.0 if price is not None and median else None
    experimental = side["experimental"]
    return SideRecord(
        name=side["name"],
        path=side["path"],
        device=experimental.get("device", "—"),
        implementation=experimental.get("implementation", "—"),
        version=experimental.get("version", "—"),
        runs=len(side["medians"]),
        boundary=side["boundary"],
        median_s=median,
        calls_per_hour=3600.0 / median if median else None,
        devices=devices,
        price_per_device_hour=price,
        cost_per_call=per_call,
        cost_per_million_calls=per_call * 1e6 if per_call is not None else None,
        correctness_passed=passed,
        worst_error=max(errors) if errors else None,
        tolerance=next((v.get("tolerance") for v in verdicts if v.get("tolerance")), None),
    )


def build_record(ctx: dict[str, Any], notes: DecisionNotes, base_url: str) -> DecisionRecord:
    """The record of a two-sided comparison context (`app.pages.compare.view`), with `notes`."""
    g, result = ctx["guard"], ctx["result"]
    side_a, side_b = ctx["sides"]["a"], ctx["sides"]["b"]
    sides = [_side_record(side_a, notes.price_a), _side_record(side_b, notes.price_b)]
    changed = [e["variable"] for e in g["experimental"]]
    layer = notes.layer or (
        "; ".join(LAYERS[v] for v in changed) if changed else "nothing: an A/A comparison"
    )
    workload = side_a["workload"]
    flops = next((r["flops"] for r in side_a["runs"] if r.get("flops")), None)
    work = f"one call of {workload}" + (f" ({flops:,.0f} FLOPs)" if flops else "")
    controlled = g["controlled"]
    scale = ", ".join(
        f"{k.removeprefix('params.')}={v}" for k, v in controlled.items() if k.startswith("params.")
    )
    where = "; ".join(
        f"side {s.name} on {s.device} ({s.devices} device{'s' if s.devices != 1 else ''} per call)"
        for s in sides
    )
    measured = f"{scale or 'default parameters'}, dtype {controlled.get('dtype', '—')}; {where}"
    runs = [
        RunRecord(
            id=r["id"],
            side=side["name"],
            url=f"{base_url}{r['link']}",
            status=r["status"],
            valid=r["valid"],
            median_s=r["median_s"],
            environment=r["environment"],
        )
        for side in (side_a, side_b)
        for r in side["runs"]
    ]
    floor = result.get("noise_floor") or {}
    return DecisionRecord(
        title=notes.title or f"{workload}: {' / '.join(changed) or 'A/A'} comparison",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        comparison=f"{base_url}{ctx['links']['self']}",
        workload=workload,
        unit_of_work=work,
        controlled=controlled,
        experimental=g["experimental"],
        comparable=g["comparable"],
        mismatches=[{k: str(v) for k, v in m.items()} for m in g["mismatches"]],
        verdict=result.get("verdict") or f"No ratio. {result.get('reason', '')}",
        ratio=result.get("ratio"),
        interval=[result["low"], result["high"]] if result.get("ratio") is not None else None,
        level=result.get("level"),
        noise_floor_pct={k: v["half_width_pct"] for k, v in floor.items()},
        bottleneck=notes.bottleneck,
        layer_changed=layer,
        correctness_within_tolerance=all(s.correctness_passed for s in sides),
        measured_scale=measured,
        deployment_scale=notes.deployment_scale,
        holds_at_deployment=notes.holds,
        engineering_cost=notes.engineering_cost,
        operating_cost=notes.operating_cost,
        currency_note=(
            "Costs are in the currency of the prices entered, per device-hour; a call's cost "
            "is price × devices × median seconds per call / 3600, at one call at a time."
        ),
        sides=sides,
        runs=runs,
    )


def _number(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.6g}{unit}"


def _count(value: float | None) -> str:
    """A rate in whole calls with thousands separators ("1,241,830"), never 1.24e+06."""
    return "—" if value is None else f"{value:,.0f}"


def to_markdown(record: DecisionRecord) -> str:
    """The record as Markdown: every field, under headings a reviewer can scan."""
    out = [f"# {record.title}", "", f"Recorded {record.created_at} from {record.comparison}.", ""]
    out += ["## Result", "", record.verdict, ""]
    if record.interval is not None and record.level is not None:
        out.append(
            f"- Ratio of medians (B/A time): {_number(record.ratio)}, {record.level:.0%} "
            f"interval {_number(record.interval[0])}–{_number(record.interval[1])}"
        )
    for side, pct in record.noise_floor_pct.items():
        out.append(f"- A/A noise floor of side {side}: ±{pct:.2f} %")
    out += [f"- Comparable: {'yes' if record.comparable else 'no'}", ""]
    for m in record.mismatches:
        out.append(
            f"- Differs: {m.get('variable')}: A {m.get('a')}, B {m.get('b')} — {m.get('why')}"
        )
    out += ["## What was observed and changed", ""]
    out += [f"- Bottleneck observed: {record.bottleneck or '(not stated)'}"]
    out += [f"- Layer changed: {record.layer_changed}"]
    for e in record.experimental:
        out.append(f"- Experimental variable {e['variable']}: A {e['a']} → B {e['b']}")
    out += ["", "## Held fixed", ""]
    out += [f"- {k}: {v}" for k, v in record.controlled.items()]
    out += ["", "## Correctness", ""]
    out.append(
        f"- Within the declared tolerance on every run: "
        f"{'yes' if record.correctness_within_tolerance else 'no'}"
    )
    for s in record.sides:
        out.append(
            f"- Side {s.name}: worst relative error {_number(s.worst_error)} against a "
            f"tolerance of {_number(s.tolerance)}"
        )
    out += ["", "## Scale", "", f"- Unit of work: {record.unit_of_work}"]
    out += [f"- Measured at: {record.measured_scale}"]
    out += [f"- Deployment scale: {record.deployment_scale or '(not stated)'}"]
    out += [f"- Holds at the deployment scale: {record.holds_at_deployment}", ""]
    out += ["## Cost", "", f"- Engineering cost: {record.engineering_cost or '(not stated)'}"]
    out += [f"- Operating cost: {record.operating_cost or '(not stated)'}", ""]
    out += [
        "| side | path | device | runs | boundary | median s/call | calls/hour | devices "
        "| price/device-hour | cost/call | cost per 1M calls |",
        "|" + "---|" * 11,
    ]
    for s in record.sides:
        out.append(
            f"| {s.name} | {s.path} | {s.device} | {s.runs} | {s.boundary or '—'} | "
            f"{_number(s.median_s)} | {_count(s.calls_per_hour)} | {s.devices} | "
            f"{_number(s.price_per_device_hour)} | {_number(s.cost_per_call)} | "
            f"{_number(s.cost_per_million_calls)} |"
        )
    out += ["", record.currency_note, "", "## Runs", ""]
    for r in record.runs:
        env = json.dumps(r.environment, sort_keys=True)
        out.append(
            f"- Side {r.side}: [{r.id}]({r.url}) — {r.status}, valid {r.valid}, median "
            f"{_number(r.median_s, ' s')}; environment `{env}`"
        )
    out += ["", "## Sides in full", ""]
    for s in record.sides:
        out.append(f"- Side {s.name}: implementation {s.implementation}; versions {s.version}")
    return "\n".join(out) + "\n"
