"""An uploaded function's "Does it fit?" table: its compiles for targets, compared like
with like.

Every row shows a compile at the same values of the function's symbolic dimensions and
with the same compiler options (the compared set, named in the caption and on each row):
those of the artifact's newest compile with the compiler's default options (else of its
newest compile). A target's compiles at other values or options are linked from its row;
a target compiled only at other values is listed under the table, not compared. The
probes of fit searches are compiles at many values of one dimension, each judged by its
search: they are kept apart, counted and linked to their search, and never take a row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.dispatch import Dispatcher
from app.pages.matrices import compile_facts
from app.pages.runs.plots import format_seconds
from workers.catalog.target_rules import placement_on
from workers.protocol import (
    FINAL_STATUSES,
    TARGET_IDS,
    JobStatus,
    Target,
    fit_limit,
    parse_target,
)
from workers.protocol.compiler_options import as_text
from workers.protocol.sizes import byte_text as gb


def target_label(target: Target) -> str:
    """A TPU slice by Google's name for it (`v6e-8`, `v5p-8`: chips, or TensorCores on v4,
    v5p and TPU7x), `H100 ×8` for GPUs."""
    if target.grid is not None:
        return f"{target.model.value}-{target.chips * target.chip.cores_per_chip}"
    return f"{target.model.value.upper()} ×{target.count}"


def options_of(spec: dict[str, Any]) -> str | None:
    """What sets a job's compile apart from the artifact's other compiles for its target,
    as text: the values of its symbolic dimensions ("b=64") and its compiler options
    ("xla_gpu_enable_triton_gemm=false"); None for no dimension and default options."""
    dims = (spec.get("params") or {}).get("dims") or {}
    options = spec.get("compiler_options") or {}
    words = [f"{k}={v}" for k, v in sorted(dims.items())] + ([as_text(options)] if options else [])
    return " ".join(words) or None


def _collectives(run: dict[str, Any]) -> list[str]:
    """Each collective the partitioner chose: kind, payload and bytes."""
    found = []
    for c in (run.get("hlo_summary") or {}).get("collectives") or []:
        # Layouts ({1,0:T(8,128)}) and index notes say nothing about what is moved.
        shape = re.sub(r"/\*[^*]*\*/|\{[^{}]*\}", "", str(c.get("shape", "")))
        shape = shape if len(shape) <= 48 else shape[:45].rsplit(",", 1)[0] + ", …)"
        size = f", {gb(int(c['bytes']))}" if c.get("bytes") else ""
        found.append(f"{c['kind']} {shape}{size}")
    return found


def fit_row(job: Any, dispatcher: Dispatcher, devices: int) -> dict[str, Any]:
    """One target's row: its compile's state, memory per device against what one device may
    hold (its usable bytes), and the collectives its partitioner chose."""
    target = parse_target(str(job.spec["target"]))
    row: dict[str, Any] = {
        "target": target.id,
        "label": target_label(target),
        "job": job.id,
        "link": f"/runs/{job.id}",
        "status": job.status.value,
        "final": job.status in FINAL_STATUSES,
        "reason": dispatcher.waiting_reason(job) or job.reason,
        "placement": placement_on(target, devices),
        "hbm": target.chip.device_hbm_label,
        "compiled": False,
        "peak_bytes": None,
        "peak": None,
        "verdict": None,
        "fits": None,
        "collectives": [],
        "compile": None,
        "compare": None,
        "compare_with": None,
    }
    stored = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    if stored is None:
        return row
    run: dict[str, Any] = json.loads(stored.result)
    facts = compile_facts(run)
    compile_s = (run.get("stage_seconds") or {}).get("compile")
    report = run.get("target") or {}
    memory = report.get("memory") or {}
    needed, hbm = facts.get("memory_needed_bytes"), facts.get("hbm_bytes")
    limit, usable = fit_limit(memory) if hbm else (None, False)
    if usable and limit is not None:
        row["hbm"] = f"{gb(limit)} usable ({limit:,} bytes); published {row['hbm']}"
    row.update(
        compiled=True,
        placement=report.get("mesh") or row["placement"],
        peak_bytes=memory.get("peak_bytes"),
        peak=gb(int(memory["peak_bytes"])) if memory.get("peak_bytes") is not None else None,
        needed_bytes=needed,
        fits=facts.get("fits"),
        fusions=facts.get("fusions"),
        collectives=_collectives(run),
        compile=format_seconds(float(compile_s)) if compile_s is not None else None,
    )
    row["verdict"] = _verdict(needed, limit, facts.get("fits"), refused=report.get("refused"))
    return row


def _verdict(needed: int | None, limit: int | None, fits: bool | None, *, refused: Any) -> str:
    """The row's verdict in words: the compiler's refusal, or the needs against the limit."""
    if refused:
        return "Does not fit: the compiler refused it"
    if needed is None or not limit:
        return "unknown"
    if fits:
        return f"Fits: {gb(needed)} of {gb(limit)} ({100 * needed / limit:.3g} %)"
    return f"Does not fit by {gb(needed - limit)}"


@dataclass(frozen=True)
class FitTable:
    """The table's rows, the set of values and options they were compiled at, and what
    is not compared: the artifact's compiles at other values, and fit searches' probes."""

    rows: list[dict[str, Any]]
    compared: str | None
    """The values and options of every row ("b=512"); None: no symbolic dimension and
    the compiler's default options."""
    elsewhere: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return any(not r["final"] for r in self.rows)


def _compared(jobs: list[Any]) -> str | None:
    """The set the table compares: that of the newest compile with the compiler's default
    options, else of the newest compile."""
    default = next((j for j in jobs if not j.spec.get("compiler_options")), None)
    return options_of((default or jobs[0]).spec) if jobs else None


def fit_table(jobs: list[Any], dispatcher: Dispatcher, devices: int) -> FitTable:
    """The table of an artifact's compile-only jobs for targets (newest first)."""
    probe_of = dispatcher.store.probe_jobs([j.id for j in jobs])
    compiles = [j for j in jobs if j.id not in probe_of]
    compared = _compared(compiles)
    by_target: dict[str, list[Any]] = {}
    for job in compiles:
        by_target.setdefault(str(job.spec["target"]), []).append(job)
    order = {t: i for i, t in enumerate(TARGET_IDS)}
    rows, elsewhere = [], []
    for target in sorted(by_target, key=lambda t: order.get(t, len(order))):
        newest: dict[str | None, Any] = {}
        for job in by_target[target]:
            newest.setdefault(options_of(job.spec), job)
        others = [
            {"options": o or "default options", "link": f"/runs/{j.id}", "target": target}
            for o, j in newest.items()
            if o != compared
        ]
        if compared not in newest:
            elsewhere += others
            continue
        row = fit_row(newest[compared], dispatcher, devices)
        rows.append({**row, "options": compared, "variants": others})
    _link_comparisons(rows)
    return FitTable(rows, compared, elsewhere, _probes(jobs, probe_of, dispatcher))


def _link_comparisons(rows: list[dict[str, Any]]) -> None:
    """Link each done row after the first to the comparison of its HLO with the first's
    (every row was compiled at the same values and options)."""
    done = [r for r in rows if r["compiled"]]
    for row in done[1:]:
        row["compare"] = f"/compare?a={done[0]['job']}&b={row['job']}&ir=hlo"
        row["compare_with"] = done[0]["label"]


def _probes(
    jobs: list[Any], probe_of: dict[str, str], dispatcher: Dispatcher
) -> list[dict[str, Any]]:
    """The fit searches whose probes are among `jobs`: each search, its dimension, how many
    of its probes there are and the values they span."""
    searches: dict[str, dict[str, Any]] = {}
    for job in jobs:
        fit_id = probe_of.get(job.id)
        if fit_id is None:
            continue
        if fit_id not in searches:
            fit = dispatcher.store.get_fit(fit_id)
            dimension = fit.spec.get("dimension") if fit is not None else None
            searches[fit_id] = {"fit": fit_id, "link": f"/fits/{fit_id}", "dimension": dimension}
            searches[fit_id]["values"] = []
        found = searches[fit_id]
        value = ((job.spec.get("params") or {}).get("dims") or {}).get(found["dimension"])
        found["values"].append(int(value) if value is not None else None)
    for found in searches.values():
        known = sorted(v for v in found["values"] if v is not None)
        found["probes"] = len(found.pop("values"))
        found["span"] = f"{known[0]:,} to {known[-1]:,}" if known else None
    return list(searches.values())
