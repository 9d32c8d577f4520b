"""What each tool answers, built from the API's own JSON: only what the API published.

Pure functions of API answers. The memory fit is the run page's own (`memory_fit`), so an
assistant and a person read the same verdict.
"""

from __future__ import annotations

from typing import Any

from app.pages.fits import falls_text
from app.pages.runs.memory_fit import memory_fit

TOP_BUFFERS = 10
"""Buffers live at the peak a memory answer lists by default (largest first)."""


def run_answer(job: dict[str, Any], address: str) -> dict[str, Any]:
    """A compile's answer: the run's id and address, what it compiled (the parameters, an
    upload's symbolic dimensions, the compiler options), its HLO summary and memory fit."""
    run = job.get("run") or {}
    target = run.get("target") or {}
    params = job.get("params") or {}
    answer: dict[str, Any] = {
        "run_id": job["id"],
        "status": job["status"],
        "address": address,
        "workload": job.get("workload"),
        "path": job.get("path"),
        "target": job.get("target"),
        "params": {k: v for k, v in params.items() if k != "dims"},
        "dims": params.get("dims"),
        "compiler_options": job.get("compiler_options") or {},
        "compiler": _compiler(target),
        "valid": run.get("valid"),
        "hlo_summary": hlo_summary(run.get("hlo_summary")),
        "memory_fit": fit_of(target),
        "stage_seconds": run.get("stage_seconds"),
        "warnings": run.get("warnings") or [],
        "artifacts": sorted(k for k, v in (run.get("artifacts") or {}).items() if v),
        "dumps": job.get("dumps"),
    }
    if job["status"] != "done":
        answer["reason"] = job.get("reason")
    return answer


def _compiler(target: dict[str, Any]) -> str | None:
    if not target:
        return None
    return f"{target.get('compiler')} {target.get('compiler_version') or ''}".strip()


def hlo_summary(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """The optimized HLO in figures: fusions (name, kind, what they call), collectives
    with their bytes per device and groups, library calls, op counts."""
    if not summary:
        return None
    fusions = summary.get("fusions") or []
    return {
        "fusion_count": len(fusions),
        "fusions": [
            {k: f.get(k) for k in ("name", "kind", "backend_kind", "library") if f.get(k)}
            for f in fusions
        ],
        "collectives": [
            {
                "kind": c.get("kind"),
                "name": c.get("name"),
                "bytes": c.get("bytes"),
                "shape": c.get("shape"),
                "groups": c.get("groups"),
                "asynchronous": c.get("asynchronous"),
                "jax_op": c.get("jax_op"),
            }
            for c in summary.get("collectives") or []
        ],
        "custom_calls": summary.get("custom_calls") or [],
        "libraries": summary.get("libraries") or [],
        "instructions": summary.get("instructions"),
        "op_counts": summary.get("op_counts"),
    }


def fit_of(target: dict[str, Any]) -> dict[str, Any] | None:
    """Does it fit? One device's needs against its usable bytes (libtpu's own on a TPU,
    JAX's share on a GPU), the chip's published HBM beside them, with the verdict
    sentence and by how much it is over; None without memory figures."""
    memory = target.get("memory")
    if not memory:
        return None
    fit = memory_fit(memory, target.get("model", ""), int(target.get("count") or 1),
                     refused=target.get("refused"))  # fmt: skip
    if fit is None:
        return None
    return {
        "peak_bytes": fit["peak_bytes"],
        "needed_bytes": fit["needed_bytes"],
        "usable_bytes": fit["usable_bytes"],
        "usable_source": fit["usable_source"],
        "hbm_bytes": fit["hbm_bytes"],
        "hbm_label": fit["hbm_label"],
        "fits": fit["fits"],
        "over_bytes": fit["over_bytes"],
        "verdict": fit["verdict"],
        "notes": [n for n in (fit["code_note"], fit["temp_note"]) if n],
        "refused": fit["refused"],
    }


def memory_answer(report: dict[str, Any], top: int, address: str) -> dict[str, Any]:
    """The memory report in short: the peak and what makes it up, then the `top` largest
    buffers live at the peak (what the peak is made of) with the line of the user's code
    that made each (the library's beside it) or, for a parameter, its argument's path. A
    run without a report says why, with the compiler's peak where it gave one."""
    buffers = report.get("buffers") or []
    at_peak = sorted(
        (b for b in buffers if b.get("live_at_peak") is True),
        key=lambda b: -int(b.get("bytes") or 0),
    )
    fields = ("bytes", "held_bytes", "kind", "shape", "op_name", "source", "library")
    return {
        "run_id": report.get("id"),
        "address": address,
        "reason": report.get("reason"),
        "peak_bytes": report.get("peak_bytes"),
        "usable_bytes": report.get("usable_bytes"),
        "hbm_bytes": report.get("hbm_bytes"),
        "peak_make_up": report.get("by_kind"),
        "blocks": [
            {k: block.get(k) for k in ("name", "bytes", "live_bytes", "counted_bytes", "why")}
            for block in report.get("blocks") or []
        ],
        "padding_bytes": report.get("padding_bytes"),
        "unattributed_bytes": report.get("unattributed_bytes"),
        "memory_analysis": report.get("memory_analysis"),
        "not_counted": report.get("not_counted"),
        "buffers_listed": min(top, len(at_peak)),
        "buffers_live_at_peak": len(at_peak),
        "buffers_in_report": len(buffers),
        "top_buffers": [
            {
                **{k: b.get(k) for k in fields},
                "argument": b.get("parameter_path"),
                "live": b.get("live"),
            }
            for b in at_peak[:top]
        ],
        "other": report.get("other"),
        "scope": report.get("scope"),
        "source": report.get("source"),
    }


def compare_answer(page: dict[str, Any], diff: dict[str, Any] | None) -> dict[str, Any]:
    """Two runs side by side: the guard's verdict (what is controlled, what varies, what
    forbids a ratio), the result, each side's compile, and the HLO diff's sentences."""
    guard = page.get("guard") or {}
    return {
        "verdict": page.get("verdict"),
        "guard": {
            k: guard.get(k)
            for k in ("comparable", "experimental", "mismatches", "problems", "warnings")
        },
        "result": page.get("result"),
        "sides": [
            {
                "name": side.get("name"),
                "run_id": side.get("id"),
                "target": side.get("target"),
                "compiler": side.get("compiler"),
                "fusion_kinds": side.get("fusion_kinds"),
                "collectives": side.get("collective_summary"),
                "memory": (side.get("memory_fit") or {}).get("verdict"),
            }
            for side in page.get("compiled") or []
        ],
        "hlo_diff": None
        if diff is None
        else {
            "summary": diff.get("summary"),
            "sentences": diff.get("sentences"),
            "collectives": diff.get("collectives"),
            "compilers": diff.get("compilers"),
        },
    }


def fit_answer(search: dict[str, Any], address: str) -> dict[str, Any]:
    """A fit search: per target the largest value that fits, proved by the value above,
    and whether the probes showed a peak that falls as the value grows (then a sentence
    says what that means for the answer)."""
    rows = []
    for t in search.get("targets") or []:
        row = {
            k: t.get(k)
            for k in (
                "target",
                "status",
                "largest_fitting",
                "peak_bytes_at_largest",
                "value_above",
                "peak_bytes_above",
                "refused_above",
                "largest_is_hi",
                "usable_bytes",
                "criterion",
                "non_monotone",
                "non_monotone_probes",
                "probes_done",
                "checks_done",
                "probes_pending",
                "reason",
            )
            if k in t
        }
        if t.get("non_monotone"):
            row["warning"] = falls_text(str(search.get("dimension")), t)
        rows.append(row)
    return {
        "fit_id": search.get("id"),
        "status": search.get("status"),
        "address": address,
        "dimension": search.get("dimension"),
        "range": search.get("range"),
        "table": rows,
    }


def published_run(job: dict[str, Any], address: str) -> dict[str, Any]:
    """A timed run as the result gate published it: its validity, correctness, and each
    measurement's statistics on its boundary (no raw samples: the page has them)."""
    run = job.get("run") or {}
    return {
        "run_id": job["id"],
        "status": job["status"],
        "reason": job.get("reason"),
        "address": address,
        "valid": run.get("valid"),
        "correctness": run.get("correctness"),
        "measurements": [
            {
                "boundary": m.get("boundary"),
                "rounds": len(m.get("samples_s") or []),
                "stats": m.get("stats"),
            }
            for m in run.get("measurements") or []
        ],
        "rates": run.get("rates"),
        "environment": run.get("environment"),
        "warnings": run.get("warnings") or [],
    }
