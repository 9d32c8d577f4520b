"""An HLO instruction as the reader builds it: frozen, every part of its line read, its
fields in one plain tuple (`workers.protocol.hlo.packed` says why)."""

from __future__ import annotations

from dataclasses import dataclass

from workers.protocol.hlo.frames import Frame, Source
from workers.protocol.hlo.packed import At, Packed
from workers.protocol.hlo.shapes import element_counts, layout_of, without_layout
from workers.protocol.hlo.syntax import BACKEND_KIND, ESTIMATED_CYCLES, FIELD, unquoted


@dataclass(frozen=True, slots=True)
class Metadata:
    """An instruction's `metadata={...}`: the JAX operation, and where in Python it was
    written (`source_file`/`source_line`, or a `stack_frame_id` into the tables)."""

    op_name: str | None
    source_file: str | None
    source_line: int | None
    stack_frame_id: int | None
    text: str
    """As printed, braces included."""

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """Every field, quoted values read back."""
        return tuple((k, unquoted(v)) for k, v in FIELD.findall(self.text[1:-1]))

    @property
    def jax_op(self) -> str | None:
        """The JAX primitive: `jit(step)/transpose(jvp())/dot_general` → `dot_general`."""
        return jax_op_of(self.op_name)

    @property
    def backward(self) -> bool:
        """Whether the operation belongs to a gradient (a transposed JVP)."""
        return "transpose(" in (self.op_name or "")


Read = tuple[str | None, str | None, int | None, int | None, str | None]
"""What the reader reads of a metadata: op_name, source_file, source_line, stack_frame_id,
and the JAX primitive its op_name ends in."""


def jax_op_of(op_name: str | None) -> str | None:
    """The JAX primitive: `jit(step)/transpose(jvp())/dot_general` → `dot_general` (of names
    joined by `;`, the first)."""
    if not op_name:
        return None
    first = op_name.split(";", 1)[0]
    return first.rsplit("/", 1)[-1] or first


class Instruction(Packed):
    """One instruction as printed, every part read, built once; its Python `source` (the
    whole stack, the user's frame, the library's) is kept beside its fields."""

    __slots__ = ("source",)
    source: Source | None

    def __init__(  # noqa: PLR0917 - the parts of one printed line
        self,
        head: tuple[str, str, str, tuple[str, ...], str],
        attributes: tuple[tuple[str, str], ...],
        metadata: tuple[str, Read] | None,
        backend_config: str,
        called: tuple[str, ...],
        place: tuple[str, bool, bool, int],
        source: Source | None,
    ) -> None:
        """`head`: name, opcode, shape, operands, operand text; `metadata`: its text and
        what was read of it; `place`: computation, entry, root, line."""
        text, read = metadata if metadata is not None else ("", (None, None, None, None, None))
        super().__init__((*head, attributes, text, *read, backend_config, called, *place))
        self._set_once("source", source)

    name: At[str] = At(0)
    opcode: At[str] = At(1)
    shape: At[str] = At(2, "As printed, layouts included: `f32[8,512]{1,0}`.")
    operands: At[tuple[str, ...]] = At(3, "The names of the values it reads, in order.")
    operand_text: At[str] = At(
        4, "What its parentheses hold when that names no value: a parameter's number."
    )
    attributes: At[tuple[tuple[str, str], ...]] = At(
        5, "Every attribute but `metadata` and `backend_config`, as printed, in order."
    )
    metadata_text: At[str] = At(6, "Its `metadata={...}` as printed; empty when it has none.")
    op_name: At[str | None] = At(7, "The JAX operation's full name in its metadata.")
    jax_op: At[str | None] = At(11, "The JAX primitive its op_name ends in: `dot_general`.")
    backend_config: At[str] = At(12, "As printed (JSON or a quoted string); empty if none.")
    called: At[tuple[str, ...]] = At(
        13, "The computations it runs: a fusion's body, a reducer, a loop's condition and body."
    )
    computation: At[str] = At(14)
    entry: At[bool] = At(15)
    root: At[bool] = At(16)
    line: At[int] = At(17, "Its 1-based line in the text.")

    def __repr__(self) -> str:
        return f"Instruction({self.name!r}, {self.opcode!r}, line {self.line})"

    @property
    def metadata(self) -> Metadata | None:
        """Its metadata: the JAX operation and where in Python it was written."""
        f = self._fields
        return Metadata(f[7], f[8], f[9], f[10], f[6]) if f[6] else None

    def attribute(self, key: str) -> str | None:
        """The value of the attribute `key` as printed, or None."""
        for k, v in self.attributes:
            if k == key:
                return v
        return None

    @property
    def dims(self) -> str:
        return without_layout(self.shape)

    @property
    def layout(self) -> str:
        return layout_of(self.shape)

    @property
    def element_counts(self) -> frozenset[int]:
        return element_counts(self.shape)

    @property
    def fusion_kind(self) -> str | None:
        return self.attribute("kind") if self.opcode == "fusion" else None

    @property
    def backend_kind(self) -> str | None:
        """A custom fusion's own kind in its backend config (`__triton_gemm`)."""
        if self.opcode != "fusion" or '"kind"' not in self.backend_config:
            return None
        found = BACKEND_KIND.search(self.backend_config)
        return found[1] if found else None

    @property
    def estimated_cycles(self) -> int | None:
        """The compiler's own estimate of its cycles (libtpu's `estimated_cycles`), if any."""
        if "estimated_cycles" not in self.backend_config:
            return None
        found = ESTIMATED_CYCLES.search(self.backend_config)
        return int(found[1]) if found else None

    @property
    def custom_call_target(self) -> str | None:
        target = self.attribute("custom_call_target")
        return unquoted(target) if target is not None else None

    @property
    def user_frame(self) -> Frame | None:
        """The innermost frame in the user's own files."""
        return self.source.user if self.source else None

    @property
    def parameter_number(self) -> int | None:
        if self.opcode != "parameter":
            return None
        text = self.operand_text.strip()
        return int(text) if text.isdigit() else None

    @property
    def parameter_path(self) -> str | None:
        """An entry parameter's name as jax gave it: its argument's pytree path
        (`params['w']`, or `leaves[3]` for a deserialized export)."""
        return self.op_name if self.opcode == "parameter" and self.entry else None


@dataclass(frozen=True, slots=True)
class Computation:
    name: str
    entry: bool
    line: int
    instructions: tuple[Instruction, ...]
    cut: bool = False
    """The text stopped inside it."""

    @property
    def root(self) -> Instruction | None:
        return next((i for i in self.instructions if i.root), None)
