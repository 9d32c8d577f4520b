"""Two compiled runs' peaks, side by side: what each holds at its peak, by kind, by the
source line its buffers came from and by HLO instruction, the biggest differences first,
and the one that matters most said in a sentence ("At the peak, v6e:1x1 holds 1.2 GB of
padded fusion.48 (model.py:102) that h100:1 does not.").

Instruction names are the compiler's own, so two targets' rarely match: the source line
(or, without one, the JAX operation) is what lines them up across targets; the
instruction table serves two compiles for one target (two option sets, two sizes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.ir.sent import short_file
from workers.protocol import MemoryBuffer, MemoryReport, RunResult
from workers.protocol.memory import KINDS
from workers.protocol.sizes import byte_text as gb

ROWS = 15
"""Rows of each alignment table; the rest are counted."""


@dataclass(frozen=True)
class Side:
    """One run's report, as the comparison names it."""

    name: str
    label: str
    """What the sentence calls it: its target, or its side's name when both share one."""
    job_id: str
    report: MemoryReport


def report_of(job: dict[str, Any]) -> tuple[MemoryReport | None, str | None]:
    """A job's published report, or why it has none to compare."""
    found = job.get("run")
    run = RunResult.model_validate(found) if found else None
    report = run.memory_report if run is not None else None
    if report is None:
        return None, f"run {job['id']} has no memory report"
    if report.withheld:
        return None, f"run {job['id']}'s memory report was withheld: {report.withheld}"
    return report, None


def _place(b: MemoryBuffer) -> str:
    """Where a buffer came from, as both sides can name it: its source line, a parameter's
    argument by its path, else its JAX operation, else its kind."""
    if b.parameter_path and b.kind == "parameter":
        return f"argument {b.parameter_path}"
    if b.source:
        file, _, line = b.source.rpartition(":")
        return f"{short_file(file)}:{line}"
    if b.op_name:
        return f"op {b.op_name}"
    return b.kind


def _held(
    report: MemoryReport, key: Callable[[MemoryBuffer], str]
) -> dict[str, list[MemoryBuffer]]:
    found: dict[str, list[MemoryBuffer]] = {}
    for b in report.buffers:
        if b.live_at_peak:
            found.setdefault(key(b), []).append(b)
    return found


def _padding(buffers: list[MemoryBuffer]) -> int:
    return sum(max(b.bytes - b.logical_bytes, 0) for b in buffers if b.logical_bytes is not None)


def aligned(a: Side, b: Side, key: Callable[[MemoryBuffer], str]) -> list[dict[str, Any]]:
    """Each key's bytes live at the peak on both sides, the biggest difference first."""
    held_a, held_b = _held(a.report, key), _held(b.report, key)
    rows: list[dict[str, Any]] = []
    for k in dict.fromkeys([*held_a, *held_b]):
        xs, ys = held_a.get(k, []), held_b.get(k, [])
        x, y = sum(v.held for v in xs), sum(v.held for v in ys)
        rows.append(
            {
                "key": k,
                "a": x,
                "b": y,
                "a_text": gb(x) if xs else "—",
                "b_text": gb(y) if ys else "—",
                "difference": x - y,
                "difference_text": f"{'+' if x >= y else '−'}{gb(abs(x - y))}",
                "a_padding": _padding(xs),
                "b_padding": _padding(ys),
                "a_padding_text": gb(_padding(xs)),
                "b_padding_text": gb(_padding(ys)),
                "a_instructions": [n for v in xs for n in v.instructions][:4],
                "b_instructions": [n for v in ys for n in v.instructions][:4],
            }
        )
    rows.sort(key=lambda r: (-abs(int(r["difference"])), str(r["key"])))
    return rows


def headline(a: Side, b: Side, rows: list[dict[str, Any]]) -> str | None:
    """The biggest difference at the peak, in a sentence."""
    if not rows or rows[0]["difference"] == 0:
        return None
    row = rows[0]
    more, less = (a, b) if row["difference"] > 0 else (b, a)
    mine, theirs = (row["a"], row["b"]) if more is a else (row["b"], row["a"])
    names = row["a_instructions"] if more is a else row["b_instructions"]
    padded = (row["a_padding"] if more is a else row["b_padding"]) > 0
    what = names[0] if names else row["key"]
    where = f" ({row['key']})" if names and row["key"] != names[0] else ""
    if theirs == 0:
        return (
            f"At the peak, {more.label} holds {gb(mine)} of {'padded ' if padded else ''}"
            f"{what}{where} that {less.label} does not."
        )
    return (
        f"At the peak, {more.label} holds {gb(mine)} for {row['key']} ({what}"
        f"{', padded' if padded else ''}) where {less.label} holds {gb(theirs)}."
    )


def _kinds(a: Side, b: Side) -> list[dict[str, Any]]:
    rows = []
    for k in (*KINDS, "unattributed"):
        x = a.report.unattributed_bytes if k == "unattributed" else a.report.by_kind.get(k, 0)
        y = b.report.unattributed_bytes if k == "unattributed" else b.report.by_kind.get(k, 0)
        if x or y:
            rows.append({"kind": k, "a": gb(x), "b": gb(y), "a_bytes": x, "b_bytes": y})
    return rows


def peaks_compared(
    job_a: dict[str, Any], job_b: dict[str, Any], names: tuple[str, str] = ("A", "B")
) -> dict[str, Any] | None:
    """The section's content (module docstring), or None when neither run has a report;
    a side without one is said."""
    (ra, why_a), (rb, why_b) = report_of(job_a), report_of(job_b)
    if ra is None and rb is None and why_a and why_b and "withheld" not in why_a + why_b:
        return None
    if ra is None or rb is None:
        return {"missing": [w for w in (why_a, why_b) if w]}
    ta, tb = job_a.get("target"), job_b.get("target")
    same = ta == tb
    a = Side(names[0], f"side {names[0]}" if same else (ta or "the host"), job_a["id"], ra)
    b = Side(names[1], f"side {names[1]}" if same else (tb or "the host"), job_b["id"], rb)
    by_source = aligned(a, b, _place)
    by_instruction = aligned(a, b, lambda v: v.instructions[0] if v.instructions else v.kind)
    return {
        "missing": [],
        "sides": [
            {
                "name": s.name,
                "label": s.label,
                "id": s.job_id,
                "peak": gb(s.report.peak_bytes),
                "peak_bytes": s.report.peak_bytes,
                "padding": gb(s.report.padding_bytes),
            }
            for s in (a, b)
        ],
        "headline": headline(a, b, by_source),
        "kinds": _kinds(a, b),
        "by_source": by_source[:ROWS],
        "by_source_more": max(len(by_source) - ROWS, 0),
        "by_instruction": by_instruction[:ROWS],
        "by_instruction_more": max(len(by_instruction) - ROWS, 0),
    }
