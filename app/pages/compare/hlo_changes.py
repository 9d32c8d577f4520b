"""The HLO diff of two runs as one JSON-ready report: the API's answer, the compare page's
"What changed" section and its full listing all render it.

Each run's optimized HLO is the stored artifact (`store.get_artifact(id, "hlo")`), cut at
the store's cap when it was larger (then diffed as far as it goes). Diffs are kept in a
small LRU keyed by both runs' ids and texts' digests: a run repeated on the same id
cannot answer from a stale entry, and a second request for a large pair is a lookup.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from app.ir.hlo_diff import HloDiff, Pair, diff_read
from app.ir.hlo_graph import HloGraph, Node
from app.ir.hlo_match import Regroup
from app.pages.compare.hlo_words import sentences
from app.store import Store
from workers.protocol.compiler_options import PATH_COMPILER
from workers.protocol.hlo import Frame, HloModule, HloSyntaxError, read_hlo

CACHED = 8
"""Reports kept in memory (one of two 10,000-instruction programs with every pair changed
holds some tens of MB)."""


class HloDiffMissing(LookupError):
    """A side has no run with optimized HLO (or no such job); the message names the id."""


class HloDiffUnreadable(ValueError):
    """A side's stored HLO does not parse; the message names the job and the line."""


class DiffCache:
    """A thread-safe LRU of reports (computed in worker threads)."""

    def __init__(self, size: int = CACHED) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, ...], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, ...], report: dict[str, Any]) -> None:
        with self._lock:
            self._items[key] = report
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


CACHE = DiffCache()


def _side(store: Store, job_id: str) -> tuple[str, bool, str]:
    """(HLO text, whether it was cut, compiler name) of the job's run; HloDiffMissing."""
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
    return found[0], found[1], compiler.value if compiler else job.path


def hlo_report(store: Store, a: str, b: str, cache: DiffCache = CACHE) -> dict[str, Any]:
    """The HLO diff of job `a`'s run against job `b`'s, as JSON; HloDiffMissing when a
    side has none. Slow for large programs on a first request: call it off the event loop."""
    text_a, cut_a, compiler_a = _side(store, a)
    text_b, cut_b, compiler_b = _side(store, b)
    key = (a, b, _digest(text_a), _digest(text_b))
    found = cache.get(key)
    if found is None:
        diff = _diff(text_a, text_b, cut_a, cut_b, (a, b))
        found = report_of(diff, a, b, {"a": compiler_a, "b": compiler_b})
        cache.put(key, found)
    return found


def _read(text: str, cut: bool, job_id: str) -> HloModule:
    try:
        return read_hlo(text, cut=cut)
    except HloSyntaxError as exc:
        raise HloDiffUnreadable(f"job {job_id!r}'s optimized HLO does not parse: {exc}") from None


def _diff(text_a: str, text_b: str, cut_a: bool, cut_b: bool, ids: tuple[str, str]) -> HloDiff:
    return diff_read(_read(text_a, cut_a, ids[0]), _read(text_b, cut_b, ids[1]))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


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
