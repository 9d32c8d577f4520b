"""A matrix as a table: one context for the page, its live fragment, .json and .csv.

Each cell is read from its job and run exactly as the run page reads them, and reports
one boundary (the matrix's mode's): compile time, median and spread, correctness and
achieved rates. A cell without a job, or whose job failed, expired or waits, says why.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from typing import Any

from app.dispatch import Dispatcher
from app.pages.runs.memory import run_peak
from app.pages.runs.memory_fit import needed_bytes
from app.pages.runs.plots import format_seconds
from app.queue.matrices import MatrixSpec, columns_of, row_label
from app.store.matrices import CellRow, MatrixRow
from workers.protocol import FINAL_STATUSES, NEVER_A_SPEED, BoundaryId, JobStatus, fit_limit, hlo
from workers.protocol.sizes import byte_text as gb

NEVER_A_SPEED_NOTE = (
    "host-dispatch times the call returning, not the work finishing: a teaching demo of "
    "asynchronous dispatch. These medians are never a speed, and no rate is computed from them."
)

CSV_COLUMNS = (
    "matrix",
    "row",
    "column",
    "path",
    "job",
    "status",
    "reason",
    "compile_s",
    "boundary",
    "rounds",
    "median_s",
    "q1_s",
    "q3_s",
    "iqr_s",
    "correctness",
    "error",
    "tolerance",
    "flops_per_s",
    "bytes_per_s",
    "target",
    "fusions",
    "library_calls",
    "collectives",
    "memory_needed_bytes",
    "usable_bytes",
    "hbm_bytes",
    "fits",
    "run",
)


def _verdict(run: dict[str, Any]) -> str | None:
    c = run.get("correctness")
    if not c:
        return None
    if c.get("checked", True) is False:
        return "unchecked"
    return "passed" if c.get("passed") else "failed"


def cell_public(cell: CellRow, dispatcher: Dispatcher, boundary: str) -> dict[str, Any]:
    """One cell's JSON: its job's state and, once run, what it measured under `boundary`."""
    out: dict[str, Any] = {"row": cell.row, "col": cell.col, "job": cell.job_id}
    job = dispatcher.store.get_job(cell.job_id) if cell.job_id else None
    if job is None:
        out.update(status="not run", reason=cell.reason or "the job is gone", final=True)
        return out
    out.update(
        status=job.status.value,
        reason=dispatcher.waiting_reason(job),
        final=job.status in FINAL_STATUSES,
        link=f"/runs/{job.id}",
    )
    stored = dispatcher.store.get_run(job.id) if job.status == JobStatus.DONE else None
    if stored is None:
        return out
    run: dict[str, Any] = json.loads(stored.result)
    correctness = run.get("correctness") or {}
    out.update(
        valid=run.get("valid"),
        compile_s=(run.get("stage_seconds") or {}).get("compile"),
        correctness=_verdict(run),
        error=correctness.get("error"),
        tolerance=correctness.get("tolerance"),
        correctness_detail=correctness.get("detail"),
    )
    measured = next((m for m in run.get("measurements", []) if m["boundary"] == boundary), None)
    stats = (measured or {}).get("stats")
    if measured is not None and measured["samples_s"]:  # none on a run whose times are withheld
        out["rounds"] = len(measured["samples_s"])
    if stats:
        out.update(median_s=stats["median"], q1_s=stats["q1"], q3_s=stats["q3"], iqr_s=stats["iqr"])
    out.update(compile_facts(run))
    rates = run.get("rates") or {}
    if rates.get("boundary") == boundary:
        out.update(flops_per_s=rates.get("flops_per_s"), bytes_per_s=rates.get("bytes_per_s"))
    return out


_IOTA = re.compile(r"^\[(\d+),(\d+)\]<=\[")


def group_size(collective: dict[str, Any]) -> str:
    """How many devices each replica group of a collective holds, in words: "groups of
    4", or "all devices" when the HLO names no groups."""
    parsed = collective.get("groups")
    if parsed:
        return f"groups of {len(parsed[0])}"
    groups = str(collective.get("replica_groups") or "").strip()
    if groups in ("", "{}", "{{}}"):
        return "all devices"
    iota = _IOTA.match(groups)  # [2,4]<=[8]: 2 groups of 4
    if iota is not None:
        return f"groups of {iota.group(2)}"
    mesh = hlo.MESH_GROUPS.match(groups)  # mesh['x'=2,'y'=4] {'y'}: groups of 4
    if mesh is not None:
        sizes = {}
        for part in mesh[1].split(","):
            axis = hlo.MESH_AXIS.match(part.strip())
            if axis is None:
                return "groups not stated"
            sizes[axis[1]] = int(axis[2])
        chosen = [name.strip().strip("'") for name in mesh[2].split(",") if name.strip()]
        if not chosen or any(name not in sizes for name in chosen):
            return "groups not stated"
        return f"groups of {math.prod(sizes[name] for name in chosen)}"
    first = groups.split("},{", maxsplit=1)[0].strip("{} ")
    return f"groups of {len(first.split(','))}" if first else "groups not stated"


def _fits(needed: int | None, limit: int | None, *, refused: bool) -> bool | None:
    """Whether a compile fits: never when the compiler refused it (the figure its refusal
    names is rounded), else its needs against the limit (None when either is unknown)."""
    if refused:
        return False
    return needed <= limit if needed is not None and limit else None


def compile_facts(run: dict[str, Any]) -> dict[str, Any]:
    """What the compiler produced, per cell: fusions, library calls, collectives (with the
    size of their replica groups) and memory per device against what the device may hold
    (its usable bytes; the published HBM for a run that reports none)."""
    summary = run.get("hlo_summary") or {}
    collectives = [f"{c['kind']} ({group_size(c)})" for c in summary.get("collectives") or []]
    target = run.get("target") or {}
    memory = target.get("memory") or {}
    needed = needed_bytes(memory) if memory else None
    if needed is None:
        needed = run_peak(run)
    hbm = memory.get("hbm_bytes")
    limit = fit_limit(memory)[0] if hbm else None
    return {
        "target": target.get("id"),
        "fusions": len(summary.get("fusions") or []) if summary else None,
        "library_calls": ", ".join(
            sorted(
                {
                    str(c.get("library") or c.get("target"))
                    for c in summary.get("custom_calls") or []
                }
            )
        ),
        "collectives": ", ".join(collectives),
        "memory_needed_bytes": needed,
        "usable_bytes": memory.get("usable_bytes"),
        "hbm_bytes": hbm,
        "fits": _fits(needed, limit, refused=bool(target.get("refused"))),
    }


def matrix_public(matrix: MatrixRow, dispatcher: Dispatcher) -> dict[str, Any]:
    """The matrix's JSON (also what the page and the CSV are built from)."""
    spec = MatrixSpec.model_validate(matrix.spec)
    boundary = spec.boundary().value
    columns = columns_of(spec)
    by_position = {(c.row, c.col): c for c in dispatcher.store.matrix_cells(matrix.id)}
    rows: list[dict[str, Any]] = []
    for i, value in enumerate(spec.axis.values):
        cells: list[dict[str, Any]] = []
        for j in range(len(columns)):
            stored = by_position.get((i, j), CellRow(i, j, None, "missing"))
            cells.append(cell_public(stored, dispatcher, boundary))
        rows.append(
            {"label": row_label(spec.axis, value, dispatcher.store), "value": value, "cells": cells}
        )
    flat: list[dict[str, Any]] = [c for r in rows for c in r["cells"]]
    counts: dict[str, int] = {}
    for c in flat:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    return {
        "id": matrix.id,
        "title": spec.title,
        "workload": spec.workload,
        "spec": matrix.spec,
        "boundary": boundary,
        "boundary_note": NEVER_A_SPEED_NOTE if BoundaryId(boundary) in NEVER_A_SPEED else None,
        "mode": spec.measure.mode.value,
        "axis": spec.axis.name,
        "columns": [
            {"label": c.label, "path": c.path.value, "value": c.value, "target": c.target}
            for c in columns
        ],
        "targets": bool(spec.targets),
        "rows": rows,
        "counts": counts,
        "complete": all(c["final"] for c in flat),
        "links": {
            "self": f"/api/v1/matrices/{matrix.id}",
            "page": f"/matrices/{matrix.id}",
            "json": f"/matrices/{matrix.id}.json",
            "csv": f"/matrices/{matrix.id}.csv",
        },
    }


def matrix_csv(public: dict[str, Any]) -> str:
    """One line per cell, with the same numbers the page and the JSON show (seconds)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for row in public["rows"]:
        for cell in row["cells"]:
            column = public["columns"][cell["col"]]
            values = {
                **{k: v for k, v in cell.items() if k in CSV_COLUMNS},
                "matrix": public["id"],
                "row": row["label"],
                "column": column["label"],
                "path": column["path"],
                "boundary": public["boundary"],
                "run": cell.get("link"),
            }
            writer.writerow(
                ["" if values.get(k) is None else _text(values[k]) for k in CSV_COLUMNS]
            )
    return out.getvalue()


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


EXAMPLE_ROWS: dict[str, tuple[str, str]] = {
    "matmul": ("shape", "m=256, n=256, k=256; m=512, n=512, k=512"),
    "elementwise": ("n", "65536, 262144"),
    "reduction": ("shape", "rows=512, cols=512; rows=1024, cols=1024"),
    "gather": ("count", "4096, 16384"),
    "attention": ("seq_len", "128, 256"),
    "ffi": ("n", "262144, 1048576"),
    "sharded-matmul": ("shape", "m=256, n=256, k=256; m=512, n=512, k=512"),
    "collective": ("bytes", "262144, 1048576"),
    "shape-sweep": ("count", "12, 24"),
    "exported": ("artifact", ""),
}
"""What the matrix form starts with for each workload: rows in its own parameters."""


def example_rows(workload: str) -> tuple[str, str]:
    """The row parameter and example values the matrix form offers for `workload`."""
    return EXAMPLE_ROWS.get(workload, ("shape", ""))


def cell_view(cell: dict[str, Any]) -> dict[str, Any]:
    """Human units for one cell of the table."""
    keys = ("link", "reason", "valid", "rounds", "correctness", "error", "tolerance")
    view = {**dict.fromkeys(keys), **cell}
    for key in ("compile_s", "median_s", "iqr_s"):
        value = cell.get(key)
        view[key.removesuffix("_s")] = format_seconds(value) if value is not None else None
    flops, moved = cell.get("flops_per_s"), cell.get("bytes_per_s")
    view["gflops"] = f"{flops / 1e9:.3g} GFLOP/s" if flops else None
    view["gbps"] = f"{moved / 1e9:.3g} GB/s" if moved else None
    needed, hbm = cell.get("memory_needed_bytes"), cell.get("hbm_bytes")
    view["memory"] = gb(needed) if needed is not None else None
    if needed is not None and hbm:
        limit, usable = fit_limit(cell)
        of = f"{gb(limit)} usable" if usable else f"{gb(limit)} HBM"
        view["memory"] += f" of {of} ({100 * needed / limit:.3g} %)"
        if needed > limit:
            view["memory"] += f": does not fit by {gb(needed - limit)}"
    return view
