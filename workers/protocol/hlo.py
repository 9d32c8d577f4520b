"""How HLO text is read, in one place for both sides: the regular expressions for its
syntax and the bytes of a shape. Pure text, no jax.

The worker's readers of optimized HLO use these (`workers.protocol.hlo_summary`: what XLA
chose, fusions, library calls, collectives; `workers.scale.hlo_flow`: how values are
placed across a mesh), and so do the server's IR pages (`app.ir`: each instruction's
origins, the explained summary, the pass pipeline's renames). Keeping one copy keeps
them reading the same syntax.
"""

from __future__ import annotations

import re

COMPUTATION = re.compile(
    r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(){}]+)\s*(?:\(.*\))?\s*(?:->.*)?\{$"
)
"""A computation header: `ENTRY %name (params) -> shape {` or `%name {`."""

INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<shape>.+?)\s+"
    r"(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$"
)
"""One instruction: `[ROOT] %name = shape opcode(operands), attributes` (indented or not)."""

KIND = re.compile(r"\bkind=(\w+)")
"""A fusion's kind: kLoop, kInput, kOutput, kCustom."""

CALLS = re.compile(r"\bcalls=(\{[^}]*\}|%?[^\s,{}]+)")
"""The computation(s) an instruction calls: `calls=%a` or `calls={%a, %b}` (see `called`)."""

TO_APPLY = re.compile(r"\bto_apply=%?([^\s,{}]+)")
"""The computation a reduce, map or collective applies."""

BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')
"""A custom fusion's own kind inside its backend config, e.g. __triton_gemm."""

CUSTOM_CALL_TARGET = re.compile(r'custom_call_target="([^"]+)"')
"""A custom call's target name."""

REPLICA_GROUPS = re.compile(
    r"replica_groups=(\{\}|\{\{.*?\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?"
    r"|mesh\[[^\]]*\]\s*\{[^}]*\})"
)
"""A collective's replica groups, in any of the explicit, iota or mesh spellings."""

IOTA_GROUPS = re.compile(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")
"""Iota replica groups: `[G,S]<=[N]` or `[G,S]<=[A,B]T(1,0)`."""

MESH_GROUPS = re.compile(r"^mesh\[([^\]]*)\]\s*\{([^}]*)\}$")
"""Mesh replica groups: `mesh['x'=2,'y'=4] {'y'}`."""

MESH_AXIS = re.compile(r"^'?([^'=]+)'?=(\d+)$")
"""One axis of a mesh: `'x'=2`."""

DIMENSIONS = re.compile(r"\bdimensions=\{([\d,]*)\}")
"""The dimensions an instruction works along."""

OP_NAME = re.compile(r'\bop_name="([^"]*)"')
"""The JAX operation an instruction came from (metadata op_name)."""

ARRAY_SHAPE = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
"""One array shape: `f32[64,128]`."""

SHARDING = re.compile(r"\bsharding=\{((?:[^{}]|\{[^{}]*\})*)\}")
"""An instruction's sharding annotation, one level of nested braces allowed."""

NUM_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
"""The module's partition count."""

PARAMETER_INDEX = re.compile(r"^\s*(\d+)\s*\)")
"""A parameter's index: the `0)` after `parameter(`."""

VALUE = re.compile(r"%([\w.\-]+)")
"""A value named as an operand: `%name`."""


_ELEMENT_BYTES: dict[str, int] = {
    "pred": 1,
    "s4": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}


def called(rest: str) -> list[str]:
    """Every computation an instruction's attributes say it calls, in order."""
    match = CALLS.search(rest)
    if match is None:
        return []
    return [part.strip().lstrip("%") for part in match[1].strip("{}").split(",") if part.strip()]


def shape_bytes(shape: str) -> int | None:
    """Bytes held by an HLO shape (tuples summed); None if an element type is unknown."""
    total = 0
    found = False
    for element, dims in ARRAY_SHAPE.findall(shape):
        size = _ELEMENT_BYTES.get(element)
        if size is None and element.startswith("f8"):
            size = 1
        if size is None:
            return None
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += size * count
        found = True
    return total if found else None
