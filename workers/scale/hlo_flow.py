"""How values lie across devices in a partitioned HLO program. Pure text, no jax.

After SPMD partitioning, the optimized HLO is the program one device runs: every shape
is a per-device shape, parameters keep the sharding they arrived with, and collectives
are explicit instructions. Following the entry computation's data flow from its
parameters tells, for each value, whether every device holds all of it (replicated), its
own piece of it (partitioned), or the result of moving data between devices (gathered
and redistributed), and, for each collective, which value it moves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from workers.protocol import HloCollective, Intermediate, PlacementKind
from workers.protocol.hlo import Computation, Instruction, read_hlo
from workers.protocol.hlo_summary import COLLECTIVES, collective_of, jax_op_name, library_of

PLUMBING = frozenset({"tuple", "get-tuple-element", "bitcast", "constant", "after-all"})
"""Instructions that move no data: never listed, only looked through."""

PASS_THROUGH = frozenset({"copy", "bitcast", "reshape", "transpose", "convert", "copy-start"})
"""One-operand instructions a value keeps its identity through when traced to its source."""

REDUCING = frozenset({"all-reduce", "reduce-scatter"})

REPLICATED: PlacementKind = "replicated"
PARTITIONED: PlacementKind = "partitioned"
MOVED: PlacementKind = "gathered-and-redistributed"


@dataclass
class Node:
    """One instruction of the entry computation with what the flow analysis found."""

    ins: Instruction
    operands: list[str]
    placement: PlacementKind = REPLICATED
    spread: bool = False
    """True when devices hold different data (a shard, or a partial result)."""
    detail: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Flow:
    """The analysis of one partitioned program."""

    partitions: int
    nodes: list[Node]
    collectives: list[tuple[HloCollective, str | None]]
    """Each collective with a description of the value it moves (None if untraced)."""

    def intermediates(self) -> list[Intermediate]:
        """Every listed value in program order."""
        rows = []
        for node in self.nodes:
            if node.ins.opcode in PLUMBING or node.ins.opcode.endswith("-done"):
                continue
            detail = "; ".join(filter(None, [node.detail, *node.notes])) or None
            rows.append(
                Intermediate(
                    name=node.ins.name,
                    op=_describe_op(node.ins, self._bodies),
                    jax_op=jax_op_name(node.ins.op_name),
                    shape=node.ins.shape,
                    placement=node.placement,
                    detail=detail,
                )
            )
        return rows

    _bodies: dict[str, Computation] = field(default_factory=dict)


def _is_collective(op: str) -> bool:
    return op in COLLECTIVES or op.removesuffix("-start") in COLLECTIVES


def _sharding_spread(ins: Instruction) -> bool | None:
    """Whether a `sharding={...}` attribute splits the value; None if there is none."""
    found = ins.attribute("sharding")
    if found is None:
        return None
    text = found[1:-1].strip() if found.startswith("{") else found
    if text in {"replicated", "manual"} or text.startswith("maximal"):
        return False
    tiles = re.search(r"devices=\[([\d,]+)\]", text)
    if tiles is None:
        return None
    dims = [int(d) for d in tiles[1].split(",") if d]
    if "last_tile_dim_replicate" in text and dims:
        dims = dims[:-1]
    return any(d > 1 for d in dims)


def _describe_op(ins: Instruction, bodies: dict[str, Computation]) -> str:
    if ins.opcode != "fusion":
        return ins.opcode
    label = f"fusion {ins.fusion_kind or ''}".strip()
    backend = ins.backend_kind
    if backend is not None:
        library = library_of(backend)
        label += f" ({library or backend})"
    ops = [
        i.opcode
        for name in ins.called
        if name in bodies
        for i in bodies[name].instructions
        if i.opcode not in PLUMBING and i.opcode != "parameter"
    ]
    if ops:
        label += ": " + ", ".join(dict.fromkeys(ops))
    return label


def analyse(text: str, input_names: list[str] | None = None) -> Flow:
    """The placement of every value in the entry computation of partitioned HLO `text`.

    `input_names` name the parameters by position when their metadata does not.
    """
    module = read_hlo(text)
    entry = module.entry
    flow = Flow(
        partitions=module.partitions, nodes=[], collectives=[], _bodies=module.computations_by_name
    )
    if entry is None:
        return flow
    nodes: dict[str, Node] = {}
    for ins in entry.instructions:
        node = Node(ins, list(ins.operands))
        nodes[ins.name] = node
        flow.nodes.append(node)
        inputs = [nodes[name] for name in node.operands if name in nodes]
        if ins.opcode == "parameter":
            spread = _sharding_spread(ins)
            node.spread = bool(spread)
            node.placement = PARTITIONED if spread else REPLICATED
            node.detail = _parameter_label(ins, input_names)
        elif _is_collective(ins.opcode):
            collective = collective_of(ins)
            size = len(collective.groups[0]) if collective.groups else flow.partitions
            whole = collective.kind in {"all-gather", "all-reduce", "collective-broadcast"}
            node.placement = MOVED
            # After an all-gather or all-reduce over every device, all hold the same data.
            node.spread = not (whole and size >= flow.partitions)
            node.detail = f"{collective.kind} over groups of {size} device(s)"
            source = trace_source(ins.name, nodes, input_names)
            flow.collectives.append((collective, source))
        elif ins.opcode.endswith("-done") and inputs:
            node.placement, node.spread = inputs[0].placement, inputs[0].spread
        else:
            node.spread = any(n.spread for n in inputs)
            node.placement = PARTITIONED if node.spread else REPLICATED
    _mark_partial_sums(flow, nodes)
    return flow


def _parameter_label(ins: Instruction, input_names: list[str] | None) -> str:
    name = jax_op_name(ins.op_name)
    position = ins.parameter_number
    if not name and position is not None and input_names:
        name = input_names[position] if position < len(input_names) else None
    return f"input {name}" if name else "an input"


def _mark_partial_sums(flow: Flow, nodes: dict[str, Node]) -> None:
    """Values an all-reduce or reduce-scatter consumes hold partial sums, not copies."""
    for node in flow.nodes:
        if node.ins.opcode.removesuffix("-start") not in REDUCING:
            continue
        groups = collective_of(node.ins).groups
        if (groups is not None and len(groups[0]) < 2) or flow.partitions < 2:
            continue  # a "sum" over one device combines nothing
        for name in node.operands[:1]:
            current = nodes.get(name)
            while current is not None:
                current.spread = True
                if current.placement == REPLICATED:
                    current.placement = PARTITIONED
                current.notes.append(
                    f"partial sums: each device holds its own contribution, combined by "
                    f"{node.ins.name}"
                )
                if current.ins.opcode not in PASS_THROUGH | PLUMBING or not current.operands:
                    break
                current = nodes.get(current.operands[0])


def trace_source(
    name: str, nodes: dict[str, Node], input_names: list[str] | None = None
) -> str | None:
    """What the collective `name` moves, followed back through copies and reshapes."""
    node = nodes.get(name)
    if node is None or not node.operands:
        return None
    current = nodes.get(node.operands[0])
    seen = 0
    while current is not None and seen < 50:
        seen += 1
        ins = current.ins
        if ins.opcode == "parameter":
            return _parameter_label(ins, input_names)
        single = len(current.operands) == 1
        wrapped_copy = ins.opcode == "fusion" and single and _is_copy_fusion(ins)
        if (
            ins.opcode in PASS_THROUGH or ins.opcode in PLUMBING or wrapped_copy
        ) and current.operands:
            current = nodes.get(current.operands[0])
            continue
        if _is_collective(ins.opcode):
            return f"the result of {ins.opcode.removesuffix('-start')} {ins.name}"
        origin = jax_op_name(ins.op_name)
        return f"the result of {origin or ins.opcode} ({ins.name})"
    return None


def _is_copy_fusion(ins: Instruction) -> bool:
    return ins.fusion_kind == "kLoop" and "copy" in ins.name
