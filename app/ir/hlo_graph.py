"""An optimized HLO module read as a graph, ready for the HLO diff.

Each instruction the diff pairs carries what the matcher compares (opcode, shape and
layout, fusion or backend kind, custom-call target, a fusion's body, replica groups,
backend config, the remaining attributes), its operands and users, the line it is printed
on, its JAX operation and source position (from `metadata`), and what the module says it
costs. Those are the instructions of the program's own computations (the entry, loop
bodies, called computations); what a fusion's body or a reducer holds is summed up in its
caller's fingerprint and keys (`app.ir.hlo_bodies`).

The text is read by the shared reader (`workers.protocol.hlo_summary.parse_computations`
and the expressions of `workers.protocol.hlo`). An asynchronous pair (`all-reduce-start`
… `all-reduce-done`, `copy-start` … `copy-done`) is one instruction here, named after its
start, with the shape its done delivers: the two halves are one operation scheduled in
two places.
"""

from __future__ import annotations

import re

from app.ir.hlo_bodies import (
    LAYOUT,
    REFERENCE,
    Bodies,
    Sources,
    called,
    cut_metadata,
    inner_computations,
    op_key,
    split_backend,
    split_operands,
)
from workers.protocol import hlo
from workers.protocol.hlo_summary import (
    COLLECTIVES,
    Computation,
    Instruction,
    parse_computations,
    parse_replica_groups,
    payload_shape,
)

KERNELS = frozenset({"fusion", "custom-call", "dot", "convolution"})
"""Opcodes that are a kernel of their own on a device."""
FAMILIES: dict[str, str] = {
    **dict.fromkeys(KERNELS, "kernel"),
    **dict.fromkeys(COLLECTIVES, "collective"),
    **dict.fromkeys(("bitcast", "reshape", "copy", "transpose"), "layout"),
    **dict.fromkeys(("tuple", "get-tuple-element"), "tuple"),
}
"""Opcodes that may stand in for one another across two compiles."""

_FRONTEND = re.compile(r'\bfrontend_attributes=\{(?:"(?:[^"\\]|\\.)*"|\{[^{}]*\}|[^{}"])*\}')
_CONTROL = re.compile(r"\bcontrol-predecessors=\{[^{}]*\}")
_DROPPED = re.compile(
    r'\b(?:channel_id=\d+|kind=\w+|custom_call_target="[^"]*"|to_apply=%?[^\s,{}]+'
    r"|calls=(?:\{[^}]*\}|%?[^\s,{}]+)|called_computations=\{[^}]*\}|use_global_device_ids=\w+)"
)
_STRIPPED = (
    ("frontend_attributes=", _FRONTEND),
    ("sharding=", hlo.SHARDING),
    ("control-predecessors=", _CONTROL),
    ("=", _DROPPED),
)
"""Attributes left out of the comparison, each after a marker that it may be present:
annotations, names of channels and computations, and what is compared on its own."""
_COMMAS = re.compile(r"(?:\s*,\s*)+")
_CYCLES = re.compile(r'"estimated_cycles":"?(\d+)')


class Instr:
    """One instruction the diff pairs."""

    literal: str = ""
    """The operand text when it names no instruction: a parameter's index, a constant."""
    fusion_kind: str | None = None
    backend_kind: str | None = None
    target: str | None = None
    body: int = 0
    """The fingerprint of what it calls (0 when it calls nothing)."""
    keys: frozenset[str] | None = None
    """What a kernel computes (`HloGraph.keys`), once asked."""
    backend: str = ""
    groups: str | None = None
    """Replica groups, spelled one way whatever spelling the module used."""
    groups_text: str | None = None
    attrs: str = ""
    op_name: str | None = None
    source: tuple[str, int] | None = None
    cycles: int | None = None
    """The compiler's own estimate (a TPU's `estimated_cycles`), when it states one."""
    result_bytes: int | None = None
    root: bool = False
    done: str | None = None
    """The name of the done that completes an asynchronous start."""
    applies: str | None = None
    """The computation it applies (a reduction's or a collective's `to_apply`)."""
    local: int = 0
    merkle: int = 0
    coarse: int = 0
    structure: int = 0

    def __init__(  # noqa: PLR0917 - one instruction's place in the module
        self, index: int, name: str, raw_op: str, shape: str, computation: Computation, line: int
    ) -> None:
        self.index = index
        self.name = name
        self.raw_op = raw_op
        self.op = raw_op.removesuffix("-start")
        """The opcode, an asynchronous start's without its `-start`."""
        self.shape = shape
        self.dims = LAYOUT.sub("", shape) if "{" in shape else shape
        """The shape without its layouts: `f32[512,64]`."""
        self.layout = " ".join(LAYOUT.findall(shape)) if "{" in shape else ""
        self.computation = computation.name
        self.entry = computation.entry
        self.line = line
        """1-based line of the module's text (0 when not found)."""
        self.unit = True
        """Paired by the diff: not the done of an asynchronous pair."""
        self.operand_names: list[str] = []
        self.operands: list[int] = []
        self.users: list[int] = []
        self.calls: list[str] = []

    @property
    def kind(self) -> str | None:
        """The fusion kind (with a custom fusion's backend kind) or custom-call target."""
        if self.fusion_kind:
            if self.backend_kind:
                return f"{self.fusion_kind}/{self.backend_kind}"
            return self.fusion_kind
        return self.target

    @property
    def family(self) -> str | None:
        return FAMILIES.get(self.op)


class HloGraph:
    """A module's paired instructions (`units`, in program order) and their neighbours."""

    def __init__(self, instrs: list[Instr], bodies: Bodies, truncated: bool) -> None:
        self.instrs = instrs
        self.units = [i.index for i in instrs if i.unit]
        self.by_name = {i.name: i.index for i in instrs}
        self.truncated = truncated
        self._bodies = bodies

    def prepare_keys(self, ks: list[int]) -> None:
        """Ready the keys of the kernels `ks` in one pass over their bodies' source lines."""
        self._bodies.prepare(
            c for k in ks if self.instrs[k].keys is None for c in self.instrs[k].calls
        )

    def keys(self, k: int) -> frozenset[str]:
        """What the kernel `k` computes (empty for anything that is no kernel): a fusion's
        body's keys, or its own (`app.ir.hlo_bodies`), for telling splits and merges."""
        ins = self.instrs[k]
        if ins.keys is None:
            if ins.op == "fusion":
                ins.keys = self._bodies.keys(ins.calls)
            elif ins.op in KERNELS:
                own = op_key(ins.op, ins.shape, ins.op_name, ins.source)
                ins.keys = frozenset({own}) if own else frozenset()
            else:
                ins.keys = frozenset()
        return ins.keys

    def operand_bytes(self, ins: Instr) -> int | None:
        """Bytes of an instruction's operands, from their shapes (None if one is unknown)."""
        total = 0
        for o in ins.operands:
            size = self.instrs[o].result_bytes
            if size is None:
                return None
            total += size
        return total


def _prepared(text: str, truncated: bool) -> str:
    """The text to parse: a cut module loses its partial last line and has its open
    computation closed, so what was stored is read as far as it goes."""
    if not truncated:
        return text
    kept = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    return kept + "}\n"


def _lines(lines: list[str]) -> tuple[dict[str, int], set[str]]:
    """Each instruction name's 1-based line, and the names printed as ROOT (string
    operations only: this runs on every line of a large module)."""
    at: dict[str, int] = {}
    roots: set[str] = set()
    for n, line in enumerate(lines, start=1):
        equals = line.find(" = ")
        if equals < 0 or not line.startswith((" ", "\t", "ROOT", "%")):
            continue
        head = line[:equals].strip()
        root = head.startswith("ROOT ")
        name = (head[5:].lstrip() if root else head).lstrip("%")
        if not name or " " in name or "(" in name:
            continue  # not `[ROOT] %name = ...`
        at.setdefault(name, n)
        if root:
            roots.add(name)
    return at, roots


def _attributes(ins: Instr, attrs: str) -> None:
    """Fill what the attributes say: metadata, backend config, kinds, groups, the rest.
    Each expression runs only where its attribute is present."""
    head, ins.backend = split_backend(attrs)
    head, meta = cut_metadata(head)
    if meta and (op_name := hlo.OP_NAME.search(meta)) is not None:
        ins.op_name = op_name[1]
    if ins.op == "fusion" and (kind := hlo.KIND.search(head)) is not None:
        ins.fusion_kind = kind[1]
        backend_kind = hlo.BACKEND_KIND.search(ins.backend) if kind[1] == "kCustom" else None
        ins.backend_kind = backend_kind[1] if backend_kind else None
    if ins.op == "custom-call" and (target := hlo.CUSTOM_CALL_TARGET.search(head)) is not None:
        ins.target = target[1]
    if "replica_groups=" in head and (groups := hlo.REPLICA_GROUPS.search(head)) is not None:
        ins.groups_text = groups[1]
        parsed = parse_replica_groups(groups[1])
        ins.groups = str(parsed) if parsed is not None else groups[1]
        head = head[: groups.start()] + head[groups.end() :]
    if "estimated_cycles" in ins.backend and (cycles := _CYCLES.search(ins.backend)):
        ins.cycles = int(cycles[1])
    ins.calls = called(head)
    if "to_apply=" in head and (applied := hlo.TO_APPLY.search(head)) is not None:
        ins.applies = applied[1]
    for marker, pattern in _STRIPPED:
        if marker in head:
            head = pattern.sub("", head)
    if "%" in head:
        head = REFERENCE.sub("%", head)
    ins.attrs = _COMMAS.sub(", ", head).strip(", ")


def _instr(index: int, parsed: Instruction, computation: Computation, line: int) -> Instr:
    ins = Instr(index, parsed.name, parsed.op, parsed.shape, computation, line)
    operands, attrs = split_operands(parsed.rest)
    if "%" in operands:
        ins.operand_names = hlo.VALUE.findall(operands)
    else:
        ins.literal = operands.strip()
    _attributes(ins, attrs)
    return ins


def _fold_async(instrs: list[Instr], names: dict[str, int]) -> None:
    """An asynchronous done (or update) joins its start: users of the done read the start,
    which takes the done's shape (what the pair delivers)."""
    for ins in instrs:
        if not ins.raw_op.endswith(("-done", "-update")) or len(ins.operand_names) != 1:
            continue
        start = instrs[names.get(ins.operand_names[0], ins.index)]  # an update already joined
        stem = ins.raw_op.rsplit("-", 1)[0]
        if start.raw_op not in (f"{stem}-start", stem, "async-start"):
            continue
        ins.unit = False
        names[ins.name] = start.index
        if ins.raw_op.endswith("-done"):
            start.shape, start.dims, start.layout = ins.shape, ins.dims, ins.layout
            start.done = ins.name


def read_module(text: str, *, truncated: bool = False) -> HloGraph:
    """The module in `text` as a graph; a `truncated` text is read as far as it goes."""
    text = _prepared(text, truncated)
    computations = parse_computations(text)
    lines = text.split("\n")
    at, roots = _lines(lines)
    sources = Sources(lines)
    inner = inner_computations(computations)
    instrs: list[Instr] = []
    names: dict[str, int] = {}
    for computation in computations:
        if computation.name in inner:
            continue
        for parsed in computation.instructions:
            ins = _instr(len(instrs), parsed, computation, at.get(parsed.name, 0))
            ins.root = parsed.name in roots
            names[ins.name] = ins.index
            instrs.append(ins)
    sources.load(i.line for i in instrs)
    for ins in instrs:
        ins.source = sources.at(ins.line)
    _fold_async(instrs, names)
    for ins in instrs:
        ins.operands = [names[n] for n in ins.operand_names if n in names]
        for o in ins.operands:
            instrs[o].users.append(ins.index)
    bodies = Bodies(computations, at, roots, sources)
    _fingerprint(instrs, bodies)
    return HloGraph(instrs, bodies, truncated)


def _fingerprint(instrs: list[Instr], bodies: Bodies) -> None:
    """Each instruction's hashes: `local` (all it says of itself, what it calls included),
    `merkle` (local and its operands' merkle: equal for equal upstream graphs), `coarse`
    (local less layout, backend config and body) and `structure` (coarse, body and the
    operands' structure: equal for the same graph laid out or configured differently);
    and the bytes of its result."""
    for ins in instrs:  # printed in program order: operands come first
        if ins.calls or ins.applies:
            ins.body = bodies.fingerprint([*ins.calls, *([ins.applies] if ins.applies else [])])
        ins.local = hash(
            (ins.raw_op, ins.shape, ins.fusion_kind, ins.backend_kind, ins.target, ins.body,
             ins.groups, ins.attrs, ins.backend, ins.literal, ins.entry)
        )  # fmt: skip
        ins.coarse = hash(
            (ins.op, ins.dims, ins.fusion_kind, ins.target, ins.attrs, ins.literal, ins.entry)
        )
        ins.merkle = hash((ins.local, tuple(instrs[o].merkle for o in ins.operands)))
        ins.structure = hash(
            (ins.coarse, ins.body, tuple(instrs[o].structure for o in ins.operands))
        )
        if ins.unit:
            ins.result_bytes = hlo.shape_bytes(payload_shape(ins.raw_op, ins.shape))
