"""The HLO diff of two runs as one JSON-ready report: the API's answer, the compare page's
"What changed" section and its full listing all render it.

Each run's optimized HLO is the stored artifact (`store.get_artifact(id, "hlo")`), cut at
the storage cap when it was larger, by the server or by the worker (the store's flag says
so either way): a cut text is read to its last whole instruction and diffed as far as it
goes, and the report says which side was cut (`truncated`). A report is identified by
both runs' ids and a digest of both texts (`Key`), so a run repeated on the same id is
another report; `app.pages.compare.hlo_diffs` keeps reports by it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from app.ir.hlo_diff import HloDiff, Pair, diff_read
from app.ir.hlo_graph import HloGraph, Node
from app.ir.hlo_match import Regroup
from app.pages.compare.hlo_words import sentences
from app.store import Store
from workers.protocol.compiler_options import PATH_COMPILER
from workers.protocol.hlo import Frame, HloModule, HloSyntaxError, read_hlo

DIGEST_CHUNK = 1 << 20
Key = tuple[str, str, str, str]
"""A report's identity: job `a`, job `b`, and a digest of each one's HLO text."""


class HloDiffMissing(LookupError):
    """A side has no run with optimized HLO (or no such job); the message names the id."""


class HloDiffUnreadable(ValueError):
    """A side's stored HLO does not parse; the message names the job and the line."""


class Side(NamedTuple):
    """One side of a diff as stored: its job, HLO text, whether the text was cut, and the
    compiler that wrote it."""

    job_id: str
    text: str
    cut: bool
    compiler: str


def side_of(store: Store, job_id: str) -> Side:
    """The job's run's optimized HLO as stored; HloDiffMissing."""
    job = store.get_job(job_id) if len(job_id) <= 64 else None
    if job is None:
        raise HloDiffMissing(f"no job {job_id[:64]!r}")
    found = store.get_artifact(job_id, "hlo")
    if found is None:
        raise HloDiffMissing(
            f"job {job_id!r} has no optimized HLO (a run has it once XLA compiled it; "
            f"this job is {job.status.value})"
        )
    compiler = PATH_COMPILER.get(job.path)
    return Side(job_id, found[0], found[1], compiler.value if compiler else job.path)


def key_of(a: Side, b: Side) -> Key:
    return (a.job_id, b.job_id, _digest(a.text), _digest(b.text))


def stored_key(store: Store, a: str, b: str) -> Key:
    """The key of the report of job `a` against job `b` as they are stored now (both texts
    read, digested and let go); HloDiffMissing."""
    return key_of(side_of(store, a), side_of(store, b))


def report_json(a: Side, b: Side) -> bytes:
    """The report of side `a` against side `b`, as the API sends it (compact UTF-8 JSON,
    as FastAPI's JSONResponse writes it); HloDiffUnreadable. The diff and the report's
    objects are let go before it returns: only the bytes stay."""
    report = report_of(
        diff_read(_read(a), _read(b)), a.job_id, b.job_id, {"a": a.compiler, "b": b.compiler}
    )
    text = json.dumps(report, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode()


def _read(side: Side) -> HloModule:
    try:
        return read_hlo(side.text, cut=side.cut)
    except HloSyntaxError as exc:
        raise HloDiffUnreadable(
            f"job {side.job_id!r}'s optimized HLO does not parse: {exc}"
        ) from None


def _digest(text: str) -> str:
    """A digest of `text`, encoded a MiB at a time (not one more copy of a 4 MiB text)."""
    found = hashlib.blake2b(digest_size=16)
    for start in range(0, len(text), DIGEST_CHUNK):
        found.update(text[start : start + DIGEST_CHUNK].encode())
    return found.hexdigest()


def _frame(frame: Frame | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    return {"file": frame.file, "line": frame.line, "place": frame.place}


def label(node: Node) -> str | None:
    """A node as a JAX user names it: the source line and the JAX operation,
    `mlp.py:21 dot_general` (`(gradient)` for a backward pass's); None when its metadata
    names neither."""
    user = node.ins.user_frame
    op = node.jax_op
    if op and node.ins.metadata and node.ins.metadata.backward:
        op += " (gradient)"
    found = " ".join(p for p in (user.place if user else None, op) if p)
    return found or None


def instr_json(g: HloGraph, node: Node) -> dict[str, Any]:
    """One instruction as the report gives it: how its user names it (source line, JAX
    operation), then the compiler's names (name, opcode, kind, shape, its line in the HLO
    text), what it does, and what it costs as the module states it."""
    result = node.result_bytes
    operands = g.operand_bytes(node)
    source = node.ins.source
    return {
        "label": label(node),
        "jax_op": node.jax_op,
        "op_name": node.op_name,
        "source": _frame(source.user if source else None),
        "library": _frame(source.library if source else None),
        "name": node.name,
        "opcode": node.op,
        "kind": node.kind,
        "library_kind": node.library,
        "work": node.work,
        "computes": list(g.computes(node.index)),
        "shape": node.shape,
        "line": node.line,
        "cost": {
            "cycles": node.cycles,
            "bytes": result + operands if result is not None and operands is not None else None,
        },
    }


def _pair(d: HloDiff, p: Pair) -> dict[str, Any]:
    a, b = instr_json(d.a, d.a.instrs[p.a]), instr_json(d.b, d.b.instrs[p.b])
    return {
        "label": a["label"] or b["label"],
        "a": a,
        "b": b,
        "what": list(p.what),
        "step": p.step,
        "guess": p.guess,
    }


def _regroup(d: HloDiff, r: Regroup) -> dict[str, Any]:
    names_a = [d.a.instrs[i].name for i in r.a]
    names_b = [d.b.instrs[j].name for j in r.b]
    whole = d.a.instrs[r.a[0]] if r.split else d.b.instrs[r.b[0]]
    return {
        "label": label(whole),
        "a": names_a[0] if r.split else names_a,
        "b": names_b if r.split else names_b[0],
        "parts": {
            "a": [instr_json(d.a, d.a.instrs[i]) for i in r.a],
            "b": [instr_json(d.b, d.b.instrs[j]) for j in r.b],
        },
        "lines": {"a": [d.a.instrs[i].line for i in r.a], "b": [d.b.instrs[j].line for j in r.b]},
    }


def _collectives(d: HloDiff) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in d.collectives:
        x = d.a.instrs[c.a] if c.a is not None else None
        y = d.b.instrs[c.b] if c.b is not None else None
        out.append(
            {
                "label": label(x) if x else label(y) if y else None,
                "a": x.name if x else None,
                "b": y.name if y else None,
                "kind": c.kind,
                "bytes_a": x.result_bytes if x else None,
                "bytes_b": y.result_bytes if y else None,
                "groups_a": x.groups_text if x else None,
                "groups_b": y.groups_text if y else None,
                "lines": {"a": x.line if x else None, "b": y.line if y else None},
            }
        )
    return out


def report_of(d: HloDiff, a: str, b: str, compilers: dict[str, str]) -> dict[str, Any]:
    """The report of the diff `d` of job `a`'s HLO against job `b`'s."""
    report: dict[str, Any] = {
        "a": a,
        "b": b,
        "compilers": compilers,
        "instructions": {"a": len(d.a.units), "b": len(d.b.units)},
        "summary": {
            "identical": len(d.same),
            "changed": len(d.changed),
            "only_a": len(d.only_a),
            "only_b": len(d.only_b),
            "splits": len(d.splits),
            "merges": len(d.merges),
            "guesses": sum(1 for p in d.changed if p.guess),
        },
        "changed": [_pair(d, p) for p in d.changed],
        "only_a": [instr_json(d.a, d.a.instrs[i]) for i in d.only_a],
        "only_b": [instr_json(d.b, d.b.instrs[j]) for j in d.only_b],
        "splits": [_regroup(d, r) for r in d.splits],
        "merges": [_regroup(d, r) for r in d.merges],
        "collectives": _collectives(d),
        "truncated": {"a": d.a.truncated, "b": d.b.truncated},
    }
    report["sentences"] = sentences(report)
    return report
