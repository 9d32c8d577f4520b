"""The HLO diff report in words and rows: the sentences at the top of "What changed", and
the table's groups (collectives first), each row linked to both instructions in their
runs' HLO views, with what each side's HLO says it costs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from app.ir.hlo_graph import KERNELS
from app.ir.view import PAGE_LINES
from workers.protocol.hlo_summary import library_of

KERNEL_CHANGES = ("opcode", "custom-call target", "fusion kind")
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kernel", "A different kind of operation", KERNEL_CHANGES),
    ("body", "A different fusion body", ("fusion body",)),
    ("shape", "A different shape", ("shape",)),
    ("layout", "A different layout", ("layout",)),
    ("groups", "Different replica groups", ("replica groups",)),
    ("backend", "A different backend config", ("backend config",)),
    ("inputs", "Different attributes or inputs", ("attributes", "operands")),
)
"""Groups of changed pairs (id, title, the differences that put a pair there), in the
order a pair is placed: by its most telling difference."""
_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
_FUSIONS = {"kLoop": "a loop fusion", "kInput": "an input fusion", "kOutput": "an output fusion"}


def size(n: int | None) -> str:
    """Bytes in decimal units (MB = 10^6 bytes), three figures."""
    if n is None:
        return "unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def described(ins: dict[str, Any]) -> str:
    """An instruction as a person names it: "a Triton fusion", "a cuBLASLt custom call"."""
    kind = ins.get("kind") or ""
    if ins["opcode"] == "fusion":
        backend = kind.split("/", 1)[1] if "/" in kind else ""
        if backend:
            return f"a {library_of(backend) or backend} fusion"
        return _FUSIONS.get(kind, "a fusion")
    if ins["opcode"] == "custom-call":
        library = library_of(kind)
        return f"a {library} custom call" if library else f"a custom call to {kind}"
    article = "an" if ins["opcode"][:1] in "aeiou" else "a"
    return f"{article} {ins['opcode']}"


def _plural(word: str, n: int) -> str:
    return word if n == 1 else f"{word}s"


def _counts(report: dict[str, Any]) -> str:
    s = report["summary"]
    n = report["instructions"]
    if not (s["changed"] or s["only_a"] or s["only_b"] or s["splits"] or s["merges"]):
        return (
            f"Both modules compute the same way: all {s['identical']:,} instructions pair "
            "with an identical one (names aside)."
        )
    parts = [
        f"{s['identical']:,} {_plural('pair', s['identical'])} identical",
        f"{s['changed']:,} changed",
        f"{s['only_a']:,} only in A",
        f"{s['only_b']:,} only in B",
    ]
    regrouped = [f"{s['splits']:,} split" if s["splits"] else ""]
    regrouped.append(f"{s['merges']:,} merged" if s["merges"] else "")
    fusions = " and ".join(p for p in regrouped if p)
    tail = f"; fusions: {fusions}" if fusions else ""
    return f"Of A's {n['a']:,} instructions and B's {n['b']:,}: {', '.join(parts)}{tail}."


def _collective_words(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for side, verb in (("b", "B adds"), ("a", "B lacks")):
        other = "a" if side == "b" else "b"
        alone: dict[str, list[int | None]] = defaultdict(list)
        for c in report["collectives"]:
            if c[side] is not None and c[other] is None:
                alone[c["kind"]].append(c[f"bytes_{side}"])
        for kind, sizes in alone.items():
            known = [s for s in sizes if s is not None]
            moving = f" moving {size(sum(known))} per device" if known else ""
            whose = "" if side == "b" else " of A's"
            out.append(f"{verb}{whose} {len(sizes)} {_plural(kind, len(sizes))}{moving}")
    for c in report["collectives"]:
        if c["a"] is None or c["b"] is None:
            continue
        if c["bytes_a"] == c["bytes_b"]:
            out.append(f"the {c['kind']} is on both sides, moving {size(c['bytes_a'])} per device")
        else:
            out.append(
                f"the {c['kind']} moves {size(c['bytes_a'])} per device in A and "
                f"{size(c['bytes_b'])} in B"
            )
    return out


def _regroup_words(report: dict[str, Any], most: int = 3) -> list[str]:
    found = [
        f"{s['a']} is split in {_NUMBERS.get(len(s['b']), len(s['b']))} ({', '.join(s['b'])})"
        for s in report["splits"]
    ]
    found += [f"{', '.join(m['a'])} are merged into {m['b']}" for m in report["merges"]]
    if len(found) > most:
        found = [*found[:most], f"{len(found) - most} more fusions are split or merged"]
    return found


def _kernel_words(report: dict[str, Any], most: int = 3) -> list[str]:
    found = [
        f"{p['a']['name']} ({described(p['a'])}) became {described(p['b'])} ({p['b']['name']})"
        for p in report["changed"]
        if set(p["what"]) & set(KERNEL_CHANGES)
        and KERNELS & {p["a"]["opcode"], p["b"]["opcode"]}
        and described(p["a"]) != described(p["b"])
    ]
    if len(found) > most:
        found = [*found[:most], f"{len(found) - most} more kernels changed kind"]
    return found


def sentences(report: dict[str, Any]) -> list[str]:
    """What changed, in a few sentences: the counts, then collectives, splits and merges,
    kernels that changed kind, layouts, and which side was cut."""
    out = [_counts(report)]
    clauses = _collective_words(report) + _regroup_words(report) + _kernel_words(report)
    if clauses:
        first = clauses[0]
        clauses[0] = "The" + first[3:] if first.startswith("the ") else first
        out.append("; ".join(clauses) + ".")
    layout = sum(1 for p in report["changed"] if p["what"] == ["layout"])
    if layout:
        verb = "differs" if layout == 1 else "differ"
        out.append(f"{layout:,} {_plural('pair', layout)} {verb} only in layout.")
    for side in ("a", "b"):
        if report["truncated"][side]:
            out.append(
                f"{side.upper()}'s HLO was cut at the server's storage cap: it is compared as "
                "far as it goes, and what comes after the cut is missing from this diff."
            )
    return out


def hlo_href(job_id: str, ins: dict[str, Any] | None, name: str | None = None) -> str | None:
    """The link to an instruction in its run's HLO view: the page holding its line, at the
    line; a search for its name when the line is unknown."""
    if ins is None and name is None:
        return None
    line = (ins or {}).get("line") or 0
    base = f"/runs/{job_id}/ir/hlo"
    if line > 0:
        return f"{base}?{urlencode({'start': (line - 1) // PAGE_LINES * PAGE_LINES + 1})}#L{line}"
    return f"{base}?{urlencode({'q': (ins or {}).get('name') or name})}"


def _cost(ins: dict[str, Any], compiler: str) -> str:
    cost = ins["cost"]
    if cost["cycles"] is not None:
        return f"{cost['cycles']:,} cycles (compiler's estimate)"
    if cost["bytes"] is not None:
        return f"{size(cost['bytes'])} in and out (from shapes)"
    return f"not reported by {compiler}"


def _cell(report: dict[str, Any], side: str, ins: dict[str, Any]) -> dict[str, Any]:
    return {
        **ins,
        "href": hlo_href(report[side], ins),
        "cost_text": _cost(ins, report["compilers"][side]),
    }


def groups(report: dict[str, Any], top: int | None) -> list[dict[str, Any]]:
    """The table's groups in order, each with its rows (the first `top` of them, or all),
    its count, and whether rows were left out."""
    placed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in report["changed"]:
        gid = next((g for g, _, whats in GROUPS if set(p["what"]) & set(whats)), "inputs")
        placed[gid].append(
            {"a": _cell(report, "a", p["a"]), "b": _cell(report, "b", p["b"]), "what": p["what"]}
        )
    out: list[dict[str, Any]] = []

    def add(gid: str, title: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            shown = rows if top is None else rows[:top]
            out.append({"id": gid, "title": title, "count": len(rows), "rows": shown,
                        "more": len(rows) - len(shown)})  # fmt: skip

    add("collectives", "Collectives", [_collective_row(report, c) for c in report["collectives"]])
    add("regroups", "Fusions split or merged", _regroup_rows(report))
    for gid, title, _ in GROUPS:
        add(gid, title, placed[gid])
    add("only-a", "Only in A", [{"a": _cell(report, "a", i), "b": None} for i in report["only_a"]])
    add("only-b", "Only in B", [{"a": None, "b": _cell(report, "b", i)} for i in report["only_b"]])
    return out


def _collective_row(report: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    lines = c["lines"]
    return {
        **c,
        "href_a": hlo_href(report["a"], {"line": lines["a"]}, c["a"]) if c["a"] else None,
        "href_b": hlo_href(report["b"], {"line": lines["b"]}, c["b"]) if c["b"] else None,
        "size_a": size(c["bytes_a"]) if c["a"] else None,
        "size_b": size(c["bytes_b"]) if c["b"] else None,
    }


def _regroup_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for word, items in (("split", report["splits"]), ("merge", report["merges"])):
        for r in items:
            names_a = [r["a"]] if isinstance(r["a"], str) else r["a"]
            names_b = [r["b"]] if isinstance(r["b"], str) else r["b"]
            rows.append(
                {
                    "kind": word,
                    "a": [
                        {"name": n, "href": hlo_href(report["a"], {"line": ln}, n)}
                        for n, ln in zip(names_a, r["lines"]["a"], strict=True)
                    ],
                    "b": [
                        {"name": n, "href": hlo_href(report["b"], {"line": ln}, n)}
                        for n, ln in zip(names_b, r["lines"]["b"], strict=True)
                    ],
                }
            )
    return rows
