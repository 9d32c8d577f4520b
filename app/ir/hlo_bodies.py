"""What the computations inside an HLO module's kernels compute: for each fusion body (or
other called computation) a fingerprint and a set of keys.

The fingerprint is equal for two bodies that do the same work, whatever their names: each
instruction is hashed with its opcode, shape, attributes, backend config and the hashes
of its operands, and the body's is its root's. The keys say what the body computes in
terms that survive another target's compiler: each computing instruction as its JAX
operation and source line (`jit(f)/dot_general@model.py:74`), or as its opcode and shape
where the metadata is silent.

Bodies are many (a large program has tens of thousands of their instructions), so they are
read here straight from the parsed text, without building the diff's `Instr` for each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from app.ir.sources import source_map
from workers.protocol import hlo
from workers.protocol.hlo_summary import Computation

PLUMBING = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
"""Opcodes that compute nothing of their own."""
MAX_DEPTH = 32
"""Bodies nested deeper than this are not looked into."""

METADATA = re.compile(r'\bmetadata=\{(?:"(?:[^"\\]|\\.)*"|[^{}"])*\}')
"""An instruction's metadata attribute (quoted strings may hold braces)."""
LAYOUT = re.compile(r"(?<=\])\{[^{}]*\}")
"""The layout after an array shape: `{1,0}`, `{0,1:T(8,128)S(1)}`."""
REFERENCE = re.compile(r"%[\w.\-]+")
"""A name in an attribute (a computation, an instruction)."""
_CALLED = re.compile(r"\bcalled_computations=\{([^}]*)\}")


class Sources:
    """Source positions of the module's lines, looked up only for the lines asked about
    (`app.ir.sources.source_map` over the module's source tables and those lines)."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines
        first = next(
            (n for n, line in enumerate(lines) if line.startswith(("%", "ENTRY"))), len(lines)
        )
        self._tables = lines[:first]
        self._found: dict[int, tuple[str, int] | None] = {}
        self._files: dict[str, str] = {}

    def load(self, numbers: Iterable[int]) -> None:
        """Look up the 1-based lines `numbers` at once."""
        wanted = [n for n in dict.fromkeys(numbers) if n not in self._found and n > 0]
        if not wanted:
            return
        picked = [self._lines[n - 1] if n <= len(self._lines) else "" for n in wanted]
        positions = source_map("hlo", self._tables + picked).positions
        offset = len(self._tables)
        for k, n in enumerate(wanted):
            chain = positions.get(offset + k)
            if chain:
                file, line = chain[0]
                self._found[n] = (self._files.setdefault(file, file.rsplit("/", 1)[-1]), line)
            else:
                self._found[n] = None

    def at(self, number: int) -> tuple[str, int] | None:
        """The innermost user source position (file name, line) of the 1-based line."""
        if number not in self._found:
            self.load([number])
        return self._found.get(number)


def split_operands(rest: str) -> tuple[str, str]:
    """(operands, attributes) of an instruction's text after `opcode(`."""
    close = rest.find(")")
    if close >= 0 and "(" not in rest[:close]:
        return rest[:close], rest[close + 1 :].lstrip(", ")
    depth = 0
    for i, char in enumerate(rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return rest[:i], rest[i + 1 :].lstrip(", ")
            depth -= 1
    return rest, ""  # a line cut short


def split_backend(attrs: str) -> tuple[str, str]:
    """(the attributes before the backend config, the backend config), which XLA prints
    last."""
    at = attrs.find("backend_config=")
    return (attrs[:at], attrs[at + 15 :]) if at >= 0 else (attrs, "")


def cut_metadata(head: str) -> tuple[str, str]:
    """(attributes without the metadata, the metadata)."""
    at = head.find("metadata={")
    if at < 0:
        return head, ""
    found = METADATA.match(head, at)
    if found is None:
        return head, ""
    return head[:at] + head[found.end() :], found[0]


def called(head: str) -> list[str]:
    """The computations an instruction's attributes name as called (`calls=`,
    `called_computations=`)."""
    found = hlo.called(head) if "calls=" in head else []
    if "called_computations=" in head and (more := _CALLED.search(head)) is not None:
        found += [p.strip().lstrip("%") for p in more[1].split(",") if p.strip()]
    return found


def inner_computations(computations: list[Computation]) -> set[str]:
    """Computations some instruction calls as a body, or applies as a reducer (a `call`'s
    computation is a part of the program of its own)."""
    inner: set[str] = set()
    for computation in computations:
        for ins in computation.instructions:
            rest = ins.rest
            if "calls=" in rest or "called_computations=" in rest:
                inner.update(called(split_backend(split_operands(rest)[1])[0]))
            if "to_apply=" in rest and ins.op != "call":
                applied = hlo.TO_APPLY.search(rest)
                if applied is not None:
                    inner.add(applied[1])
    return inner


def op_key(op: str, shape: str, op_name: str | None, source: tuple[str, int] | None) -> str | None:
    """One computing instruction as a key (None for plumbing and fusions, whose bodies
    speak for them)."""
    if op in PLUMBING or op == "fusion":
        return None
    if op_name:
        return f"{op_name}@{source[0]}:{source[1]}" if source else f"{op_name}@"
    return f"{op}:{LAYOUT.sub('', shape)}"


class Bodies:
    """Fingerprints (all, at once) and keys (on demand) of a module's called computations."""

    def __init__(
        self,
        computations: list[Computation],
        lines: dict[str, int],
        roots: set[str],
        sources: Sources,
    ) -> None:
        self._by_name = {c.name: c for c in computations}
        self._lines = lines
        self._roots = roots
        self._sources = sources
        self._prints: dict[str, int] = {}
        self._keys: dict[str, frozenset[str]] = {}

    def fingerprint(self, names: list[str], depth: int = 0) -> int:
        """The fingerprint of the computations `names` together."""
        return hash(tuple(self._print(n, depth) for n in names))

    def _print(self, name: str, depth: int) -> int:
        if name in self._prints:
            return self._prints[name]
        computation = self._by_name.get(name)
        if computation is None or depth > MAX_DEPTH:
            return 0
        self._prints[name] = 0  # a computation that calls itself stops here
        hashes: dict[str, int] = {}
        last = root = 0
        for ins in computation.instructions:
            operands, attrs = split_operands(ins.rest)
            refs = hlo.VALUE.findall(operands) if "%" in operands else []
            head, backend = split_backend(attrs)
            head = cut_metadata(head)[0]
            inner = called(head) if "call" in head else []
            nested = self.fingerprint(inner, depth + 1) if inner else 0
            if "%" in head:
                head = REFERENCE.sub("%", head)
            last = hash(
                (ins.op, ins.shape, head, backend, "" if refs else operands, nested,
                 tuple(hashes.get(r, 0) for r in refs))
            )  # fmt: skip
            hashes[ins.name] = last
            if ins.name in self._roots:
                root = last
        self._prints[name] = root or last
        return self._prints[name]

    def prepare(self, names: Iterable[str]) -> None:
        """Look up the source lines of the computations `names` at once, before their keys
        are asked for one by one."""
        self._sources.load(
            self._lines.get(i.name, 0)
            for n in names
            if n in self._by_name and n not in self._keys
            for i in self._by_name[n].instructions
        )

    def keys(self, names: list[str], depth: int = 0) -> frozenset[str]:
        """What the computations `names` compute, as keys."""
        return frozenset().union(*(self._keys_of(n, depth) for n in names))

    def _keys_of(self, name: str, depth: int) -> frozenset[str]:
        if name in self._keys:
            return self._keys[name]
        computation = self._by_name.get(name)
        if computation is None or depth > MAX_DEPTH:
            return frozenset()
        self._keys[name] = frozenset()
        self._sources.load(self._lines.get(i.name, 0) for i in computation.instructions)
        found: set[str] = set()
        for ins in computation.instructions:
            head = split_backend(split_operands(ins.rest)[1])[0]
            head, meta = cut_metadata(head)
            if ins.op == "fusion" or "called_computations=" in head:
                found |= self.keys(called(head), depth + 1)
            named = hlo.OP_NAME.search(meta) if meta else None
            where = self._sources.at(self._lines.get(ins.name, 0))
            key = op_key(ins.op, ins.shape, named[1] if named else None, where)
            if key is not None:
                found.add(key)
        self._keys[name] = frozenset(found)
        return self._keys[name]
