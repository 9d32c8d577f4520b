"""An optimized HLO module as a graph, ready for the HLO diff.

The module is read by the one HLO reader (`workers.protocol.hlo.read_hlo`). Each
instruction of the program's own computations (the entry, loop bodies, called
computations) becomes a `Node`, built once and frozen: what the matcher compares (opcode,
shape and layout, fusion or backend kind, custom-call target, a fusion's body, replica
groups, backend config, the remaining attributes), what kind of work it does (a GEMM, a
reduction, another kernel, a collective, a layout change...), its operands and users, its
JAX operation and the user's source line, and what the module says it costs. What a
fusion's body or a reducer holds is summed up in its caller's fingerprint and keys
(`app.ir.hlo_bodies`).

An asynchronous pair (`all-reduce-start` … `all-reduce-done`, `copy-start` … `copy-done`)
is one node, named after its start, with the shape its done delivers: the two halves are
one operation scheduled in two places.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from app.ir.hlo_bodies import GEMM_OPS, REDUCE_OPS, Bodies, compared_attributes, op_key, position
from workers.protocol.hlo import (
    HloModule,
    Instruction,
    element_counts,
    layout_of,
    payload_shape,
    read_hlo,
    shape_bytes,
    without_layout,
)
from workers.protocol.hlo_summary import COLLECTIVES, library_of, parse_replica_groups

KERNELS = frozenset({"fusion", "custom-call", "dot", "convolution"})
"""Opcodes that are a kernel of their own on a device."""
LAYOUT_OPS = frozenset({"bitcast", "reshape", "copy", "transpose"})
WORKS = (
    "parameter",
    "constant",
    "collective",
    "layout",
    "tuple",
    "gemm",
    "reduction",
    "kernel",
    "op",
)
"""What a node does: the first of these that fits."""
KERNEL_WORKS = frozenset({"gemm", "reduction", "kernel"})
_LEFT_OUT = frozenset(
    {"frontend_attributes", "sharding", "control-predecessors", "channel_id", "kind",
     "custom_call_target", "to_apply", "calls", "called_computations", "replica_groups",
     "use_global_device_ids"}
)  # fmt: skip
"""Attributes left out of the compared `attrs`: annotations, names of channels and
computations, and what is compared on its own."""
_GEMM_TARGET = re.compile(r"cublas|gemm|matmul|\$conv|cudnn", re.IGNORECASE)


@dataclass(frozen=True, slots=True, repr=False)
class Node:
    """One instruction the diff pairs (for an asynchronous pair, its start), built once;
    what the matcher reads in its inner loops is a field of its own."""

    ins: Instruction
    """The reader's instruction (its names, source frames and backend config)."""
    index: int
    op: str
    """The opcode, an asynchronous start's without its `-start`."""
    shape: str
    """The shape it delivers (an asynchronous pair's done's)."""
    dims: str
    """The shape without its layouts: `f32[512,64]`."""
    layout: str
    counts: tuple[int, ...]
    """The element count of each array it delivers."""
    fusion_kind: str | None
    backend_kind: str | None
    """A custom fusion's own kind (`__triton_gemm`)."""
    target: str | None
    """A custom call's target."""
    kind: str | None
    """The fusion kind (with a custom fusion's backend kind) or custom-call target."""
    family: str | None
    """Which opcodes may stand in for its own (FAMILIES)."""
    op_name: str | None
    source: tuple[str, int] | None
    """The user's innermost source line: (file as the program spells it, line)."""
    work: str
    """What it does (one of WORKS)."""
    unit: bool
    """Paired by the diff: not the done of an asynchronous pair."""
    entry: bool
    root: bool
    literal: str
    """The operand text when it names no instruction: a parameter's number, a constant."""
    operands: tuple[int, ...]
    users: tuple[int, ...]
    done: str | None
    """The name of the done that completes an asynchronous start."""
    body: int
    """The fingerprint of what it calls (0 when it calls nothing)."""
    groups: str | None
    """Replica groups, spelled one way whatever spelling the module used."""
    attrs: str
    backend: str
    """Its backend config as printed."""
    local: int
    merkle: int
    coarse: int
    structure: int

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.name!r}, {self.op!r})"

    @property
    def name(self) -> str:
        return self.ins.name

    @property
    def line(self) -> int:
        return self.ins.line

    @property
    def library(self) -> str | None:
        """The library behind a custom call or custom fusion (Triton, cuBLASLt...)."""
        found = self.backend_kind or self.target
        return library_of(found) if found else None

    @property
    def jax_op(self) -> str | None:
        return self.ins.jax_op

    @property
    def groups_text(self) -> str | None:
        return self.ins.attribute("replica_groups")

    @property
    def cycles(self) -> int | None:
        """The compiler's own estimate (a TPU's `estimated_cycles`), when it states one."""
        return self.ins.estimated_cycles

    @property
    def result_bytes(self) -> int | None:
        return shape_bytes(payload_shape(self.ins.opcode, self.shape)) if self.unit else None

    @property
    def applies(self) -> str | None:
        value = self.ins.attribute("to_apply")
        return value.lstrip("%") if value else None


FAMILIES: dict[str, str] = {
    **dict.fromkeys(KERNELS, "kernel"),
    **dict.fromkeys(COLLECTIVES, "collective"),
    **dict.fromkeys(LAYOUT_OPS, "layout"),
    **dict.fromkeys(("tuple", "get-tuple-element"), "tuple"),
}
"""Opcodes that may stand in for one another across two compiles."""


def work_of(ins: Instruction, op: str, bodies: Bodies, backend_kind: str | None = None) -> str:
    """What an instruction does (one of WORKS): a fusion by what its body holds (a dot
    makes it a GEMM, else a reduce a reduction), a custom call by its target."""
    if op in ("parameter", "constant"):
        return op
    if op in COLLECTIVES:
        return "collective"
    if op in LAYOUT_OPS:
        return "layout"
    if op in ("tuple", "get-tuple-element"):
        return "tuple"
    if op in GEMM_OPS:
        return "gemm"
    if op in REDUCE_OPS:
        return "reduction"
    if op == "custom-call":
        return "gemm" if _GEMM_TARGET.search(ins.custom_call_target or "") else "kernel"
    if op != "fusion":
        return "op"
    held = bodies.opcodes(ins.called)
    if held & GEMM_OPS or "gemm" in (backend_kind or ""):
        return "gemm"
    return "reduction" if held & REDUCE_OPS else "kernel"


class HloGraph:
    """A module's paired nodes (`units`, in program order) and their neighbours."""

    def __init__(self, module: HloModule, nodes: tuple[Node, ...], bodies: Bodies) -> None:
        self.module = module
        self.instrs = nodes
        self.units = [n.index for n in nodes if n.unit]
        self.by_name = {n.name: n.index for n in nodes}
        self.bodies = bodies
        self._keys: dict[int, frozenset[str]] = {}
        self._ranks: dict[int, float] = {}

    def ranks(self) -> dict[int, float]:
        """Each paired node's place in program order, from 0 to 1."""
        if not self._ranks:
            self._ranks = {k: n / max(len(self.units), 1) for n, k in enumerate(self.units)}
        return self._ranks

    @property
    def truncated(self) -> bool:
        return self.module.cut

    def keys(self, k: int) -> frozenset[str]:
        """What the kernel `k` computes (empty for anything that is no kernel): a fusion's
        body's keys, or its own (`app.ir.hlo_bodies`), for telling splits and merges."""
        if k not in self._keys:
            node = self.instrs[k]
            if node.op == "fusion":
                self._keys[k] = self.bodies.keys(node.ins.called)
            elif node.op in KERNELS:
                own = op_key(node.ins)
                self._keys[k] = frozenset({own}) if own else frozenset()
            else:
                self._keys[k] = frozenset()
        return self._keys[k]

    def computes(self, k: int) -> tuple[str, ...]:
        """The JAX operations the node `k` computes: a fusion's body's, or its own."""
        node = self.instrs[k]
        if node.op == "fusion":
            return self.bodies.jax_ops(node.ins.called)
        return (node.jax_op,) if node.jax_op else ()

    def gemms(self, k: int) -> int:
        """How many matrix products the kernel `k` computes (its body's dots)."""
        node = self.instrs[k]
        if node.op == "fusion":
            return sum(1 for c in node.ins.called for i in self._body(c) if i.opcode in GEMM_OPS)
        return 1 if node.work == "gemm" else 0

    def _body(self, name: str) -> tuple[Instruction, ...]:
        found = self.module.computations_by_name.get(name)
        return found.instructions if found else ()

    def operand_bytes(self, node: Node) -> int | None:
        """Bytes of a node's operands, from their shapes (None if one is unknown)."""
        total = 0
        for o in node.operands:
            size = self.instrs[o].result_bytes
            if size is None:
                return None
            total += size
        return total


def _program(module: HloModule) -> list[Instruction]:
    """The instructions of the program's own computations, in printed order."""
    inner = module.bodies()
    return [i for c in module.computations if c.name not in inner for i in c.instructions]


def _joined(instrs: list[Instruction]) -> tuple[dict[int, int], dict[int, Instruction]]:
    """Each asynchronous done (or update) → the start it completes; each start → its done."""
    at = {ins.name: k for k, ins in enumerate(instrs)}
    joined: dict[int, int] = {}
    delivered: dict[int, Instruction] = {}
    for k, ins in enumerate(instrs):
        if not ins.opcode.endswith(("-done", "-update")) or len(ins.operands) != 1:
            continue
        start = at.get(ins.operands[0], k)
        start = joined.get(start, start)  # an update already joined
        stem = ins.opcode.rsplit("-", 1)[0]
        if instrs[start].opcode not in (f"{stem}-start", stem, "async-start"):
            continue
        joined[k] = start
        if ins.opcode.endswith("-done"):
            delivered[start] = ins
    return joined, delivered


def _groups(text: str | None) -> str | None:
    if text is None:
        return None
    parsed = parse_replica_groups(text)
    return str(parsed) if parsed is not None else text


def read_graph(text: str, *, cut: bool = False) -> HloGraph:
    """The module in `text` as a graph; a `cut` text is read as far as it goes."""
    return graph_of(read_hlo(text, cut=cut))


def graph_of(module: HloModule) -> HloGraph:
    """The module as a graph of frozen nodes, each built once (module docstring)."""
    instrs = _program(module)
    bodies = Bodies(module.computations_by_name)
    joined, delivered = _joined(instrs)
    at = {ins.name: joined.get(k, k) for k, ins in enumerate(instrs)}
    operands = [tuple(at[n] for n in ins.operands if n in at) for ins in instrs]
    users = _users(operands)
    nodes: list[Node] = []
    for k, ins in enumerate(instrs):
        done = delivered.get(k)
        nodes.append(
            _node(k, ins, done, operands[k], users.get(k, ()), k not in joined, nodes, bodies)
        )
    return HloGraph(module, tuple(nodes), bodies)


def _users(operands: list[tuple[int, ...]]) -> dict[int, tuple[int, ...]]:
    """Each node's users, in program order: built from sorted pairs of numbers, whose
    tuples the cycle collector soon stops tracking (a list per node would stay tracked)."""
    reads = sorted((o, k) for k, found in enumerate(operands) for o in dict.fromkeys(found))
    out: dict[int, tuple[int, ...]] = {}
    start = 0
    for end in range(1, len(reads) + 1):
        if end == len(reads) or reads[end][0] != reads[start][0]:
            out[reads[start][0]] = tuple(k for _, k in reads[start:end])
            start = end
    return out


@lru_cache(maxsize=4096)
def _shape(shape: str) -> tuple[str, str, tuple[int, ...]]:
    """A shape's dims, layout and element counts (a module repeats few shapes)."""
    return without_layout(shape), layout_of(shape), tuple(sorted(element_counts(shape)))


def _kind(fusion_kind: str | None, backend_kind: str | None, target: str | None) -> str | None:
    if fusion_kind:
        return f"{fusion_kind}/{backend_kind}" if backend_kind else fusion_kind
    return target


def _node(  # noqa: PLR0917 - one node's place in the module
    k: int,
    ins: Instruction,
    done: Instruction | None,
    operands: tuple[int, ...],
    users: tuple[int, ...],
    unit: bool,
    built: list[Node],
    bodies: Bodies,
) -> Node:
    """A node's fingerprints: `local` (all it says of itself, what it calls included),
    `merkle` (local and its operands' merkle: equal for equal upstream graphs), `coarse`
    (local less layout, backend config and body) and `structure` (coarse, body and the
    operands' structure: equal for the same graph laid out or configured differently).
    Operands come first in program order, so theirs are built."""
    opcode, called, literal, entry = ins.opcode, ins.called, ins.operand_text, ins.entry
    attributes = dict(ins.attributes)
    op = opcode.removesuffix("-start")
    shape = done.shape if done is not None else ins.shape
    dims, layout, counts = _shape(shape)
    body = bodies.fingerprint(called) if called else 0
    groups = _groups(attributes.get("replica_groups"))
    attrs = compared_attributes((k, v) for k, v in attributes.items() if k not in _LEFT_OUT)
    target = ins.custom_call_target if "custom_call_target" in attributes else None
    fusion_kind = attributes.get("kind") if op == "fusion" else None
    backend_kind = ins.backend_kind if op == "fusion" else None
    backend = ins.backend_config
    local = hash(
        (opcode, shape, fusion_kind, backend_kind, target, body, groups, attrs,
         backend, literal, entry)
    )  # fmt: skip
    coarse = hash((op, dims, fusion_kind, target, attrs, literal, entry))
    upstream = [built[o] for o in operands if o < k]
    merkle = hash((local, tuple(u.merkle for u in upstream)))
    structure = hash((coarse, body, tuple(u.structure for u in upstream)))
    return Node(
        ins, k, op, shape, dims, layout, counts, fusion_kind, backend_kind, target,
        _kind(fusion_kind, backend_kind, target), FAMILIES.get(op), ins.op_name, position(ins),
        work_of(ins, op, bodies, backend_kind), unit, entry, ins.root, literal, operands, users,
        done.name if done is not None else None, body, groups, attrs, backend,
        local, merkle, coarse, structure,
    )  # fmt: skip
