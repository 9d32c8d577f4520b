"""The one reader of HLO text: a module as computations of frozen instructions.

`read_hlo(text)` reads a module printed by XLA (`Compiled.as_text()`, a pass dump) and
returns an `HloModule`. Each `Instruction` is built once, with every part of its line
read: name, opcode, shape, operands, attributes, metadata, backend config, and its
Python `Source` (the whole stack, the user's innermost frame, the library frame beside
it). Nothing is changed after it is built.

Text that does not parse raises `HloSyntaxError`, which names the line. Text marked as
cut (`cut=True`: an artifact stopped at the storage cap) is read to its last whole
instruction, and the module says `cut`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from workers.protocol.hlo.frames import (
    SOURCE_TABLES,
    Frame,
    Source,
    SourceTables,
    read_table_row,
    source_of,
)
from workers.protocol.hlo.instruction import Computation, Instruction, Read, jax_op_of
from workers.protocol.hlo.syntax import (
    ATTRIBUTE,
    ATTRIBUTES,
    COMPUTATION,
    FIELD,
    INSTRUCTION,
    VALUE,
    split_operands,
    unquoted,
)

CALLING = frozenset(
    {"calls", "to_apply", "called_computations", "branch_computations", "condition", "body"}
)
"""Attributes that name computations an instruction runs."""


class HloSyntaxError(ValueError):
    """HLO text that does not parse; `line` is its 1-based number."""

    def __init__(self, line: int, text: str, reason: str) -> None:
        shown = text if len(text) <= 120 else text[:119] + "…"
        super().__init__(f"line {line}: {reason}: {shown!r}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class HloModule:
    """A module read from text: its computations in printed order (the entry last, as XLA
    prints it), its source tables, and whether the text was cut."""

    name: str
    attributes: tuple[tuple[str, str], ...]
    computations: tuple[Computation, ...]
    tables: SourceTables
    cut: bool
    lines: int
    """Lines of text read."""
    by_name: dict[str, Instruction] = field(repr=False)
    computations_by_name: dict[str, Computation] = field(repr=False)

    @property
    def entry(self) -> Computation | None:
        return next((c for c in self.computations if c.entry), None)

    def instructions(self) -> Iterator[Instruction]:
        """Every instruction, in printed order."""
        for computation in self.computations:
            yield from computation.instructions

    def attribute(self, key: str) -> str | None:
        return next((v for k, v in self.attributes if k == key), None)

    @property
    def partitions(self) -> int:
        value = self.attribute("num_partitions")
        return int(value) if value and value.isdigit() else 1

    def parameters(self) -> list[Instruction]:
        """The entry computation's parameters, by number: the program's inputs."""
        entry = self.entry
        found = [i for i in entry.instructions if i.opcode == "parameter"] if entry else []
        return sorted(found, key=lambda i: i.parameter_number or 0)

    def bodies(self) -> set[str]:
        """Computations run as part of an instruction (a fusion's body, a reducer), as
        against the program's own computations (the entry, a called one, a loop body)."""
        inner: set[str] = set()
        for ins in self.instructions():
            if ins.opcode in ("call", "while", "conditional"):
                continue
            inner.update(ins.called)
        return inner


def _number(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) <= 12 else None


def _metadata(value: str) -> Read:
    fields = dict(FIELD.findall(value, 1, len(value) - 1))
    quoted_name, file = fields.get("op_name"), fields.get("source_file")
    op_name = unquoted(quoted_name) if quoted_name is not None else None
    return (
        op_name,
        unquoted(file) if file is not None else None,
        _number(fields.get("source_line")),
        _number(fields.get("stack_frame_id")),
        jax_op_of(op_name),
    )


class _Reader:
    """The state of one reading: where it is, and what it has built."""

    def __init__(self, cut: bool) -> None:
        self.cut = cut
        self.name = ""
        self.attributes: tuple[tuple[str, str], ...] = ()
        self.rows: dict[str, dict[int, str]] = {}
        self.table: dict[int, str] | None = None
        self.tables = SourceTables({})
        self.computations: list[Computation] = []
        self.open: tuple[str, bool, int] | None = None
        self.body: list[Instruction] = []
        self.placed: dict[tuple[str, int], Source | None] = {}
        self.read: dict[str, Read] = {}
        """Each metadata text read so far (tuples the cycle collector stops tracking), and
        the Python source it names (below): a module prints many alike."""
        self.sources: dict[str, Source | None] = {}
        self.words: dict[str, str] = {}

    def outside(self, n: int, line: str) -> None:
        """A line outside any computation: the header, a source table, a computation's
        header."""
        stripped = line.strip()
        if self.table is not None and stripped and read_table_row(self.table, line):
            return
        self.table = None
        if not stripped:
            return
        if stripped in SOURCE_TABLES:
            self.table = self.rows.setdefault(stripped, {})
        elif line.startswith("HloModule "):
            self.header(line)
        elif stripped.endswith("{") and (header := COMPUTATION.match(stripped)) is not None:
            if self.rows and not self.tables:  # the tables come before the computations
                self.tables = SourceTables(self.rows)
            self.open = (header["name"], bool(header["entry"]), n)
            self.body = []
        else:
            raise HloSyntaxError(
                n, line, "neither a module header, a source table nor a computation"
            )

    def header(self, line: str) -> None:
        """A module's header. A text may print several modules (an executable of more
        than one): each has its own source tables, so a later header starts afresh."""
        if self.name:
            self.rows, self.tables, self.read, self.sources = {}, SourceTables({}), {}, {}
            return
        name, _, rest = line[10:].partition(",")
        self.name = name.strip()
        self.attributes = tuple((m["key"], m["value"]) for m in ATTRIBUTE.finditer("," + rest))

    def close(self, cut: bool = False) -> None:
        assert self.open is not None
        name, entry, at = self.open
        self.computations.append(Computation(name, entry, at, tuple(self.body), cut))
        self.open = None

    def source(self, meta: Read) -> Source | None:
        _, file, line, frame, _ = meta
        if frame is not None and self.tables:
            found = self.tables.source(frame)
            if found is not None:
                return found
        if file is not None and line is not None:
            key = (file, line)
            if key not in self.placed:
                self.placed[key] = source_of((Frame(*key),))
            return self.placed[key]
        return None

    def instruction(self, n: int, line: str) -> Instruction:
        found = INSTRUCTION.match(line)
        if found is None:
            raise HloSyntaxError(n, line, "not an instruction")
        root, name, shape, opcode, rest = found.groups()
        # A module repeats few opcodes and shapes: one string each, not one per line.
        words = self.words
        opcode = words.setdefault(opcode, opcode)
        shape = words.setdefault(shape, shape)
        parts = split_operands(rest)
        if parts is None:
            raise HloSyntaxError(n, line, "its operand list never closes")
        operands, attributes = parts
        pairs = ATTRIBUTE.findall(attributes)
        # XLA prints ", key=value" each time: when the parts add up, all were read.
        read_all = sum(len(k) + len(v) + 3 for k, v in pairs) == len(attributes)
        if not read_all and ATTRIBUTES.fullmatch(attributes) is None:
            raise HloSyntaxError(n, line, "its attributes do not parse")
        meta: tuple[str, Read] | None = None
        backend = ""
        kept: list[tuple[str, str]] = []
        called: list[str] = []
        source: Source | None = None
        for key, value in pairs:
            if key == "metadata":
                if value not in self.read:  # one op's metadata is often printed many times
                    self.read[value] = read = _metadata(value)
                    self.sources[value] = self.source(read)
                meta, source = (value, self.read[value]), self.sources[value]
                continue
            if key == "backend_config":
                backend = value
                continue
            if key in CALLING:
                called += [p.strip().lstrip("%") for p in value.strip("{}").split(",") if p.strip()]
            kept.append((key, value))
        assert self.open is not None
        named = "%" in operands
        head = (
            name,
            opcode,
            shape,
            tuple(VALUE.findall(operands)) if named else (),
            "" if named else operands.strip(),
        )
        place = (self.open[0], self.open[1], root is not None, n)
        return Instruction(head, tuple(kept), meta, backend, tuple(called), place, source)


def read_hlo(text: str, *, cut: bool = False) -> HloModule:
    """The module printed in `text`; HloSyntaxError names the first line that does not
    parse. `cut`: the text was stopped at a size cap, so it is read to its last whole
    instruction (a partial last line is left out, an open computation closed)."""
    reader = _Reader(cut)
    lines = text.split("\n")
    if cut and not text.endswith("\n"):
        lines.pop()  # the line the cap went through
    for n, line in enumerate(lines, start=1):
        if line.lstrip().startswith("//"):  # a comment, which HLO's own parser skips too
            continue
        if reader.open is None:
            reader.outside(n, line)
        elif line.strip() == "}" or line.startswith("}, "):  # `}, execution_thread="…"`
            reader.close()
        elif line.strip():
            reader.body.append(reader.instruction(n, line))
    if reader.open is not None:
        if not cut:
            raise HloSyntaxError(
                len(lines), lines[-1] if lines else "", "the text ends inside a computation"
            )
        reader.close(cut=True)
    computations = tuple(reader.computations)
    return HloModule(
        name=reader.name,
        attributes=reader.attributes,
        computations=computations,
        tables=reader.tables,
        cut=cut,
        lines=len(lines),
        by_name={i.name: i for c in computations for i in c.instructions},
        computations_by_name={c.name: c for c in computations},
    )
