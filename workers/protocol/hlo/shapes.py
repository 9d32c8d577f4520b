"""HLO shapes read as data: their bytes, their element counts, and the shape without its
layout. Pure text, no jax."""

from __future__ import annotations

from workers.protocol.hlo.syntax import ARRAY_SHAPE, LAYOUT

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


def _count(dims: str) -> int:
    count = 1
    for part in dims.split(","):
        dim = part.strip().removeprefix("<=")
        if dim:
            count *= int(dim)
    return count


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
        total += size * _count(dims)
        found = True
    return total if found else None


def element_counts(shape: str) -> frozenset[int]:
    """The element count of each array in a shape (one for an array, several for a tuple;
    a scalar counts 1, a token nothing)."""
    return frozenset(
        _count(dims) for element, dims in ARRAY_SHAPE.findall(shape) if element != "token"
    )


def without_layout(shape: str) -> str:
    """The shape without its layouts: `f32[512,64]{1,0}` → `f32[512,64]`."""
    return LAYOUT.sub("", shape) if "{" in shape else shape


def layout_of(shape: str) -> str:
    """The layouts of a shape, in order (empty when it prints none)."""
    return " ".join(LAYOUT.findall(shape)) if "{" in shape else ""


def top_level_parts(text: str) -> list[str]:
    """The parts of a comma-separated list outside any brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def payload_shape(op: str, shape: str) -> str:
    """The shape a collective delivers: async `-start` forms carry operands and scratch too.

    `all-gather-start` returns (operands, results); `collective-permute-start` returns
    (operand, result, context...); `all-reduce-start` returns its results directly.
    """
    if not shape.startswith("(") or not op.endswith("-start"):
        return shape
    parts = top_level_parts(shape[1:-1])
    if op == "all-gather-start" and len(parts) >= 2:
        return ", ".join(parts[len(parts) // 2 :])
    if op == "collective-permute-start" and len(parts) >= 2:
        return parts[1]
    return shape
