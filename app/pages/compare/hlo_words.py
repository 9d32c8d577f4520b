"""The HLO diff report in words and rows: the sentences at the top of "What changed", and
the table's groups (collectives first), each row linked to both instructions in their
runs' HLO views, with what each side's HLO says it costs.

The words are a JAX user's first: a sentence about a kernel starts with the source line
and says what the program does there ("mlp.py:20: the matmul (dot_general) became a
cuBLASLt call..."), and names the compiler's instructions after it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from app.ir.hlo_graph import KERNELS
from app.ir.view import PAGE_LINES
from workers.protocol.hlo_summary import library_of
from workers.protocol.sizes import byte_text

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
    return byte_text(n, unknown="unknown")


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
        return f"a {library} call" if library else f"a custom call to {kind}"
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


def _operation(ins: dict[str, Any], other: dict[str, Any]) -> str:
    """What an instruction computes, as its user wrote it: "the matmul (dot_general)"."""
    op = ins.get("jax_op")
    if not op:
        return "the operation"
    gemm = "gemm" in (ins.get("work"), other.get("work"))
    named = f"the matmul ({op})" if gemm else f"the {op}"
    return (
        named.replace("the ", "the gradient's ", 1)
        if "transpose(" in (ins.get("op_name") or "")
        else named
    )


def _place(*instrs: dict[str, Any]) -> str | None:
    """The user's source line of the first of `instrs` that names one (`mlp.py:21`)."""
    return next((i["source"]["place"] for i in instrs if i.get("source")), None)


def _also(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What one side's kernel computes beside the operation and the other's does not."""
    own = {a.get("jax_op"), b.get("jax_op")}
    extra_a = [op for op in a["computes"] if op not in b["computes"] and op not in own]
    extra_b = [op for op in b["computes"] if op not in a["computes"] and op not in own]
    words = [f"A's kernel also computes {_listed(extra_a)}" if extra_a else ""]
    words.append(f"B's kernel also computes {_listed(extra_b)}" if extra_b else "")
    return "".join(f"; {w}" for w in words if w)


def _listed(items: list[str], most: int = 4) -> str:
    if len(items) > most:
        items = [*items[: most - 1], f"{len(items) - most + 1} more"]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _part(ins: dict[str, Any], *, article: bool = True) -> str:
    computes = f" computing {_listed(ins['computes'])}" if ins["computes"] else ""
    kind = described(ins) if article else described(ins).split(" ", 1)[1]
    return f"{kind} ({ins['name']}){computes}"


def _regroup_words(report: dict[str, Any], most: int = 3) -> list[str]:
    """Each split and merge, led by the whole kernel's source line and JAX operation."""
    found: list[str] = []
    for r in report["splits"]:
        whole, parts = r["parts"]["a"][0], r["parts"]["b"]
        count = _NUMBERS.get(len(parts), str(len(parts)))
        found.append(
            f"{_lead(r)}A's {_part(whole, article=False)} is split in {count} in B: "
            + _listed([_part(p) for p in parts])
        )
    for r in report["merges"]:
        whole, parts = r["parts"]["b"][0], r["parts"]["a"]
        count = _NUMBERS.get(len(parts), str(len(parts)))
        found.append(
            f"{_lead(r)}{count} kernels of A are merged into B's {_part(whole, article=False)}: "
            + _listed([_part(p) for p in parts])
        )
    if len(found) > most:
        found = [*found[:most], f"{len(found) - most} more kernels are split or merged"]
    return found


def _lead(row: dict[str, Any]) -> str:
    return f"{row['label']}: " if row.get("label") else ""


def _kernel_words(report: dict[str, Any], most: int = 3) -> list[str]:
    found: list[str] = []
    for p in report["changed"]:
        a, b = p["a"], p["b"]
        if not (set(p["what"]) & set(KERNEL_CHANGES) and KERNELS & {a["opcode"], b["opcode"]}):
            continue
        if described(a) == described(b):
            continue
        guess = " (a guess)" if p.get("guess") else ""
        place = _place(a, b)
        if place is None:
            found.append(f"{a['name']} ({described(a)}) became {described(b)} ({b['name']}){guess}")
            continue
        found.append(
            f"{place}: {_operation(a, b)} ran as {described(a)} ({a['name']}) in A and as "
            f"{described(b)} ({b['name']}) in B{_also(a, b)}{guess}"
        )
    if len(found) > most:
        found = [*found[:most], f"{len(found) - most} more kernels changed kind"]
    return found


def sentences(report: dict[str, Any]) -> list[str]:
    """What changed, in a few sentences: the counts, then collectives, splits and merges,
    kernels that changed kind, layouts, and which side was cut."""
    out = [_counts(report)]
    collectives = _collective_words(report)
    if collectives:
        first = collectives[0]
        collectives[0] = "The" + first[3:] if first.startswith("the ") else first
        out.append("; ".join(collectives) + ".")
    out += [f"{s}." for s in _kernel_words(report) + _regroup_words(report)]
    layout = sum(1 for p in report["changed"] if p["what"] == ["layout"])
    if layout:
        verb = "differs" if layout == 1 else "differ"
        out.append(f"{layout:,} {_plural('pair', layout)} {verb} only in layout.")
    guesses = report["summary"].get("guesses", 0)
    if guesses:
        verb = "is a guess" if guesses == 1 else "are guesses"
        out.append(
            f"{guesses:,} changed {_plural('pair', guesses)} {verb}: the same JAX operation on "
            "the same line, but arrays of another size or kernels doing different work."
        )
    for side in ("a", "b"):
        if report["truncated"][side]:
            out.append(
                f"{side.upper()}'s HLO was cut at the storage cap: it is compared up to its "
                "last whole instruction, and what came after the cut is missing from this diff."
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
            {"label": p["label"], "a": _cell(report, "a", p["a"]), "b": _cell(report, "b", p["b"]),
             "what": p["what"], "step": p["step"], "guess": p["guess"]}
        )  # fmt: skip
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
    add("only-a", "Only in A", [
        {"label": i["label"], "a": _cell(report, "a", i), "b": None} for i in report["only_a"]
    ])  # fmt: skip
    add("only-b", "Only in B", [
        {"label": i["label"], "a": None, "b": _cell(report, "b", i)} for i in report["only_b"]
    ])  # fmt: skip
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
                    "label": r.get("label"),
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
