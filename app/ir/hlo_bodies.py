"""What the computations inside an HLO module's kernels compute: for each fusion body (or
other called computation) a fingerprint, a set of keys and the opcodes it holds.

The fingerprint is equal for two bodies that do the same work, whatever their names: each
instruction is hashed with its opcode, shape, attributes, backend config and the hashes
of its operands, and the body's is its root's. The keys say what the body computes in
terms that survive another target's compiler: each computing instruction as its JAX
operation and the user's source line (`jit(f)/dot_general@model.py:74`), or as its
opcode and shape where the metadata is silent.

Bodies are read by the one HLO reader (`workers.protocol.hlo`); this module only sums
them up, each body once.
"""

from __future__ import annotations

from collections.abc import Iterable

from workers.protocol.hlo import Computation, Instruction, unnamed, without_layout

PLUMBING = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
"""Opcodes that compute nothing of their own."""
GEMM_OPS = frozenset({"dot", "convolution", "ragged-dot", "scaled-dot"})
"""Opcodes that are a matrix product."""
REDUCE_OPS = frozenset({"reduce", "reduce-window"})
"""Opcodes that are a reduction."""
MAX_DEPTH = 32
"""Bodies nested deeper than this are not looked into."""


def position(ins: Instruction) -> tuple[str, int] | None:
    """The user's innermost source line of an instruction: (file as spelled, line)."""
    frame = ins.source.user if ins.source else None
    return (frame.file, frame.line) if frame else None


def op_key(ins: Instruction) -> str | None:
    """One computing instruction as a key (None for plumbing and fusions, whose bodies
    speak for them)."""
    if ins.opcode in PLUMBING or ins.opcode == "fusion":
        return None
    if ins.op_name:
        where = position(ins)
        return f"{ins.op_name}@{where[0]}:{where[1]}" if where else f"{ins.op_name}@"
    return f"{ins.opcode}:{without_layout(ins.shape)}"


def compared_attributes(attributes: Iterable[tuple[str, str]]) -> str:
    """Attributes as two instructions are compared by them, names of values and
    computations left out (`%fused_add` and `%fused_computation.2` read alike)."""
    return unnamed(", ".join(f"{k}={v}" for k, v in attributes))


class Bodies:
    """Fingerprints, keys and opcodes of a module's computations, each worked out once."""

    def __init__(self, computations: dict[str, Computation]) -> None:
        self._by_name = computations
        self._prints: dict[str, int] = {}
        self._keys: dict[str, frozenset[str]] = {}
        self._opcodes: dict[str, tuple[str, ...]] = {}
        self._ops: dict[str, tuple[str, ...]] = {}

    def fingerprint(self, names: Iterable[str], depth: int = 0) -> int:
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
            nested = self.fingerprint(ins.called, depth + 1) if ins.called else 0
            last = hash(
                (ins.opcode, ins.shape, compared_attributes(ins.attributes), ins.backend_config,
                 ins.operand_text, nested, tuple(hashes.get(r, 0) for r in ins.operands))
            )  # fmt: skip
            hashes[ins.name] = last
            if ins.root:
                root = last
        self._prints[name] = root or last
        return self._prints[name]

    def keys(self, names: Iterable[str], depth: int = 0) -> frozenset[str]:
        """What the computations `names` compute, as keys."""
        return frozenset().union(*(self._keys_of(n, depth) for n in names))

    def _keys_of(self, name: str, depth: int) -> frozenset[str]:
        if name in self._keys:
            return self._keys[name]
        computation = self._by_name.get(name)
        if computation is None or depth > MAX_DEPTH:
            return frozenset()
        self._keys[name] = frozenset()
        found: set[str] = set()
        for ins in computation.instructions:
            if ins.called:
                found |= self.keys(ins.called, depth + 1)
            key = op_key(ins)
            if key is not None:
                found.add(key)
        self._keys[name] = frozenset(found)
        return self._keys[name]

    def opcodes(self, names: Iterable[str], depth: int = 0) -> set[str]:
        """Every opcode the computations `names` hold, nested bodies included."""
        return {op for n in names for op in self._opcodes_of(n, depth)}

    def _opcodes_of(self, name: str, depth: int) -> tuple[str, ...]:
        if name in self._opcodes:
            return self._opcodes[name]
        computation = self._by_name.get(name)
        if computation is None or depth > MAX_DEPTH:
            return ()
        self._opcodes[name] = ()
        found = {ins.opcode for ins in computation.instructions}
        for ins in computation.instructions:
            if ins.called:
                found |= self.opcodes(ins.called, depth + 1)
        self._opcodes[name] = tuple(sorted(found))
        return self._opcodes[name]

    def jax_ops(self, names: Iterable[str], depth: int = 0) -> tuple[str, ...]:
        """The JAX operations the computations `names` compute, in order, each once
        (`dot_general`, `add`, `tanh`), nested bodies included."""
        found: dict[str, None] = {}
        for name in names:
            found.update(dict.fromkeys(self._ops_of(name, depth)))
        return tuple(found)

    def _ops_of(self, name: str, depth: int) -> tuple[str, ...]:
        if name in self._ops:
            return self._ops[name]
        computation = self._by_name.get(name)
        if computation is None or depth > MAX_DEPTH:
            return ()
        self._ops[name] = ()
        found: dict[str, None] = {}
        for ins in computation.instructions:
            if ins.called:
                found.update(dict.fromkeys(self.jax_ops(ins.called, depth + 1)))
            if ins.opcode not in PLUMBING and ins.jax_op:
                found.setdefault(ins.jax_op, None)
        self._ops[name] = tuple(found)
        return self._ops[name]
