"""The precision a lowered program's float32 contractions ask for, read from the program.

The precision of a dot or convolution is written into the StableHLO JAX lowers (an
exported program carries its own: `jax.default_matmul_precision` cannot change it after
export), as `precision_config` and, where the program chose one, a dot `algorithm`. This
module walks the lowered module as MLIR (structured, not its text) and says which
arithmetic the platform runs the coarsest of them at (`workers.catalog.arithmetic`). The
check of the run's output allows for exactly that.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from workers.catalog.arithmetic import Arithmetic, arithmetic_of, coarsest
from workers.catalog.base import Precision

CONTRACTIONS = ("stablehlo.dot_general", "stablehlo.convolution")
"""The operations whose products a platform may round: what a TPU runs on its MXU."""

_WIDE = ("f32", "complex<f32>")
"""Operand element types whose products a platform may compute below their own precision."""

_OPERAND_TYPE = re.compile(r"lhs_precision_type\s*=\s*(\w+)")
_PASSES = re.compile(r"num_primitive_operations\s*=\s*(\d+)")
_BY_TYPE: dict[str, Arithmetic] = {
    "f32": Arithmetic.FLOAT32,
    "tf32": Arithmetic.TF32,
    "f16": Arithmetic.TF32,  # 11 significant bits, as TF32
}
_BF16_PASSES: dict[int, Arithmetic] = {
    1: Arithmetic.BF16X1,
    3: Arithmetic.BF16X3,
    6: Arithmetic.BF16X6,
}
_PRECISION = re.compile(r"precision\s+(DEFAULT|HIGHEST|HIGH)\b")


def _operations(op: Any) -> Iterator[Any]:
    """Every operation nested in `op`, depth first."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _operations(child.operation)


def _wide_operands(op: Any) -> bool:
    return any(any(w in str(v.type) for w in _WIDE) for v in op.operands)


def _precision(op: Any) -> Precision:
    """The precision an operation asks for: its coarser operand's (DEFAULT when unset)."""
    attributes = op.attributes
    config = str(attributes["precision_config"]) if "precision_config" in attributes else ""
    asked = {Precision(name.lower()) for name in _PRECISION.findall(config)}
    for precision in (Precision.DEFAULT, Precision.HIGH, Precision.HIGHEST):
        if precision in asked:
            return precision
    return Precision.DEFAULT


def _algorithm(op: Any) -> Arithmetic | None:
    """The arithmetic a dot's explicit `algorithm` computes (a `jax.lax.DotAlgorithmPreset`
    becomes one: its operand type and how many products it takes), or None without one.
    An operand type this module does not know counts as the coarsest arithmetic."""
    if "algorithm" not in op.attributes:
        return None
    text = str(op.attributes["algorithm"])
    operand = _OPERAND_TYPE.search(text)
    passes = _PASSES.search(text)
    kind = operand.group(1) if operand else ""
    if kind == "bf16":
        return _BF16_PASSES.get(int(passes.group(1)) if passes else 1, Arithmetic.BF16X1)
    return _BY_TYPE.get(kind, Arithmetic.BF16X1)


def contraction_arithmetics(module: Any, platform: str) -> list[Arithmetic]:
    """The arithmetic of each float32 contraction in `module` (an MLIR module) on `platform`."""
    found = []
    for op in _operations(module.operation):
        if op.name not in CONTRACTIONS or not _wide_operands(op):
            continue
        chosen = _algorithm(op)
        found.append(chosen or arithmetic_of(platform, _precision(op)))
    return found


def program_arithmetic(lowered: Any, platform: str) -> Arithmetic | None:
    """The coarsest arithmetic `lowered`'s float32 contractions run at on `platform` (cpu,
    gpu or tpu); None when the program has none (its check then needs no allowance)."""
    try:
        module = lowered.compiler_ir("stablehlo")
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if module is None:
        return None
    return coarsest(contraction_arithmetics(module, platform))
