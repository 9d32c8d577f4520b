"""HLO text's syntax: the expressions that split a line of a module into its parts.

Only the reader (`workers.protocol.hlo.module`) and its neighbours in this package use
these; every other module takes the typed instructions the reader builds. One copy keeps
every consumer reading the same syntax.

An instruction is printed `[ROOT] %name = shape opcode(operands), key=value, ...`. A value
is a quoted string (escapes allowed), a braced group (nested, quoted strings may hold
braces), the mesh spelling of replica groups, or a bare token that may hold bracketed
parts (`[2,4]<=[8]T(1,0)`, `b01f_01io->b01f`). XLA prints `metadata={...}` and then
`backend_config=...` last.
"""

from __future__ import annotations

import re
from collections.abc import Callable

COMPUTATION = re.compile(
    r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(){}]+)\s*(?:\(.*\))?\s*(?:->.*)?\{$"
)
"""A computation header: `ENTRY %name (params) -> shape {` or `%name {`."""

INSTRUCTION = re.compile(
    r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<shape>.+?)\s+"
    r"(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$"
)
"""One instruction: `[ROOT] %name = shape opcode(operands), attributes` (indented or not)."""

_QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_BRACED = r'\{(?:[^{}"]++|' + _QUOTED + r")*+\}"
for _ in range(8):  # eight levels of nesting: a GPU backend config needs five
    _BRACED = r'\{(?:[^{}"]++|' + _QUOTED + "|" + _BRACED + r")*+\}"
_BARE = r'(?:[^\s,{}\[\]()"]++|\[[^\]]*+\]|\([^()]*+\))++'
_MESH = r"mesh\[[^\]]*+\]\s*+\{[^}]*+\}"
_VALUE = f"(?:{_MESH}|{_QUOTED}|{_BRACED}|{_BARE})"
ATTRIBUTE = re.compile(r",\s*+(?P<key>[\w.\-]++)=(?P<value>" + _VALUE + ")")
"""One attribute with the comma before it: `, key=value`."""
ATTRIBUTES = re.compile(r"(?:,\s*+[\w.\-]++=" + _VALUE + r")*+\s*+")
"""A whole attribute list, to check that each part of it was read."""
FIELD = re.compile(r"(\w+)=(" + _QUOTED + r"|[^\s}]++)")
"""One field of `metadata={...}`: `op_name="jit(f)/dot_general"`, `source_line=12`."""

KIND = re.compile(r"\bkind=(\w+)")
"""A fusion's kind: kLoop, kInput, kOutput, kCustom."""

CALLS = re.compile(r"\bcalls=(\{[^}]*\}|%?[^\s,{}]+)")
"""The computation(s) an instruction calls: `calls=%a` or `calls={%a, %b}`."""

BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')
"""A custom fusion's own kind inside its backend config, e.g. __triton_gemm."""

ESTIMATED_CYCLES = re.compile(r'"estimated_cycles":"?(\d+)')
"""libtpu's cost model in an instruction's backend config: the cycles it expects it to take."""

REPLICA_GROUPS = re.compile(
    r"(\{\}|\{\{.*?\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?"
    r"|mesh\[[^\]]*\]\s*\{[^}]*\})"
)
"""A collective's replica groups, in any of the explicit, iota or mesh spellings."""

IOTA_GROUPS = re.compile(r"^\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?$")
"""Iota replica groups: `[G,S]<=[N]` or `[G,S]<=[A,B]T(1,0)`."""

MESH_GROUPS = re.compile(r"^mesh\[([^\]]*)\]\s*\{([^}]*)\}$")
"""Mesh replica groups: `mesh['x'=2,'y'=4] {'y'}`."""

MESH_AXIS = re.compile(r"^'?([^'=]+)'?=(\d+)$")
"""One axis of a mesh: `'x'=2`."""

ARRAY_SHAPE = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([^\]]*)\]")
"""One array shape: `f32[64,128]` (a dynamic dimension is printed `<=8`)."""

LAYOUT = re.compile(r"(?<=\])\{[^{}]*\}")
"""The layout after an array shape: `{1,0}`, `{0,1:T(8,128)S(1)}`."""

VALUE = re.compile(r"%([\w.\-]+)")
"""A value named as an operand: `%name`."""

REFERENCE = re.compile(r"%[\w.\-]+")
"""A name in an attribute (a computation, an instruction)."""

TABLE_ROW = re.compile(r"^(\d{1,12})\s+(.*)$")
"""A row of a source table: `3 {file_location_id=3 parent_frame_id=3}`."""
TABLE_FIELD = re.compile(r"\b(\w+)=(\d{1,12})(?!\d)")
"""A numeric field of a source table's row (a number of thousands of digits is none)."""


def split_operands(rest: str) -> tuple[str, str] | None:
    """(operands, attributes) of an instruction's text after `opcode(`; None when the
    operand list never closes (a line cut short)."""
    close = rest.find(")")
    if close >= 0 and "(" not in rest[:close]:
        return rest[:close], rest[close + 1 :]
    depth = 0
    for i, char in enumerate(rest):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return rest[:i], rest[i + 1 :]
            depth -= 1
    return None


def unnamed(text: str) -> str:
    """`text` with the names of values and computations left out (`%fused_add` and
    `%fused_computation.2` read alike)."""
    return REFERENCE.sub("%", text) if "%" in text else text


def unquoted(value: str) -> str:
    """A quoted value's text, its escapes read back (`params[\\'w\\']` → `params['w']`)."""
    if len(value) < 2 or value[0] != '"':
        return value
    inner = value[1:-1]
    if "\\" not in inner:
        return inner
    return re.sub(r"\\(.)", r"\1", inner)


def attribute_spans(line: str) -> list[tuple[str, int, int]]:
    """Each attribute of an instruction's line as (key, start, end), the span running from
    the comma before it to the end of its value; empty for a line that is no instruction."""
    found = INSTRUCTION.match(line)
    if found is None:
        return []
    parts = split_operands(found["rest"])
    if parts is None:
        return []
    start = found.start("rest") + len(parts[0]) + 1
    return [(m["key"], start + m.start(), start + m.end()) for m in ATTRIBUTE.finditer(parts[1])]


def without_metadata(line: str) -> str:
    """An instruction's line without its `metadata={...}` (the Python source it names);
    any other line as it is."""
    if "metadata=" not in line:
        return line
    for key, start, end in attribute_spans(line):
        if key == "metadata":
            return line[:start] + line[end:]
    return line


def called(rest: str) -> list[str]:
    """Every computation an instruction's `calls=` names, in order."""
    match = CALLS.search(rest)
    if match is None:
        return []
    return [part.strip().lstrip("%") for part in match[1].strip("{}").split(",") if part.strip()]


def instruction_heads(text: str) -> list[tuple[str, str, str]]:
    """(name, shape, opcode) of each instruction line of `text`, in order, the rest of
    each line unread: for texts only looked through by name (a pass pipeline's many
    snapshots)."""
    found = (INSTRUCTION.match(line) for line in text.split("\n"))
    return [(m["name"], m["shape"], m["op"]) for m in found if m is not None]


def quoted(text: str) -> str:
    """`text` as HLO prints a string value: in double quotes, quotes and backslashes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_metadata(
    line: str, change: Callable[[list[tuple[str, str]]], list[tuple[str, str]]]
) -> str:
    """An instruction's line with the fields of its `metadata={...}` (key, value as
    printed) replaced by what `change` makes of them; a line without metadata gets it
    (before its backend config, where XLA prints it), unless `change` makes none."""
    spans = attribute_spans(line)
    found = next(((start, end) for key, start, end in spans if key == "metadata"), None)
    if found is not None:
        start, end = found
        text = line[start:end]
        fields = change(FIELD.findall(text, text.index("{") + 1, len(text) - 1))
        printed = " ".join(f"{k}={v}" for k, v in fields)
        return f"{line[:start]}, metadata={{{printed}}}{line[end:]}"
    fields = change([])
    if not fields or (not spans and INSTRUCTION.match(line) is None):
        return line
    at = next((start for key, start, _ in spans if key == "backend_config"), len(line))
    printed = " ".join(f"{k}={v}" for k, v in fields)
    return f"{line[:at]}, metadata={{{printed}}}{line[at:]}"
