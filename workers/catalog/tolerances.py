"""Rounding-error bounds the catalog's tolerances are built from. Plain Python, no jax:
the server recomputes a job's tolerance with the same code the worker checks it with."""

from __future__ import annotations

import math

from workers.catalog.arithmetic import Arithmetic
from workers.catalog.base import Dtype, Precision

__all__ = ["UNIT_ROUNDOFF", "contraction_tolerance"]

UNIT_ROUNDOFF: dict[str, float] = {
    "float32": 2.0**-24,
    "bfloat16": 2.0**-8,
    "float16": 2.0**-11,
}
"""Half the gap between 1 and the next representable number, per storage type."""

# Allowed relative error of a float32 product by requested precision. Backends differ in
# what DEFAULT means: the CPU computes in full float32, a GPU may use TF32 (10-bit
# mantissa) and a TPU a single bfloat16 pass (7-bit mantissa, relative error near 2^-9
# per product), so DEFAULT must admit bfloat16-level error. HIGH is TF32 on a GPU and
# three bfloat16 passes on a TPU: about 2^-11 per product, hence 2e-3 with margin.
# HIGHEST is full float32; see `contraction_tolerance` for how it grows with the length.
_FLOAT32_TOLERANCE: dict[Precision, float] = {
    Precision.DEFAULT: 1e-2,
    Precision.HIGH: 2e-3,
    Precision.HIGHEST: 1e-5,
}

# Narrow storage types are dominated by rounding the output itself: about 2^-8 for
# bfloat16 and 2^-11 for float16 per element, whatever the contraction precision.
_NARROW_TOLERANCE: dict[Dtype, float] = {Dtype.BFLOAT16: 2e-2, Dtype.FLOAT16: 5e-3}


# The same bounds by the arithmetic a platform runs the requested precision at (see
# workers.catalog.arithmetic): a CPU computes every precision in float32, a TPU's HIGHEST
# is six bfloat16 passes (float32 in practice), TF32 and three bfloat16 passes keep about
# 11 and 17 significant bits.
_BY_ARITHMETIC: dict[Arithmetic, Precision] = {
    Arithmetic.FLOAT32: Precision.HIGHEST,
    Arithmetic.BF16X6: Precision.HIGHEST,
    Arithmetic.BF16X3: Precision.HIGH,
    Arithmetic.TF32: Precision.HIGH,
    Arithmetic.BF16X1: Precision.DEFAULT,
}


def contraction_tolerance(
    dtype: Dtype, precision: Precision, length: int, arithmetic: Arithmetic | None = None
) -> float:
    """Allowed relative error of a contraction over `length` terms.

    `arithmetic` is what the platform ran the requested `precision` at, when known: the
    bound then follows it (a CPU's DEFAULT is float32, a TPU's one bfloat16 pass). Without
    it the bound admits the coarsest arithmetic any platform uses for `precision`.

    In full float32 the rounding errors of `length` accumulated terms of random sign grow
    like √length; four unit roundoffs per √term keeps the bound honest at large `length`
    while staying near 1e-5 for ordinary sizes.
    """
    if dtype is not Dtype.FLOAT32:
        return _NARROW_TOLERANCE[dtype]
    if arithmetic is not None:
        precision = _BY_ARITHMETIC[arithmetic]
    if precision is Precision.HIGHEST:
        grown = 4 * UNIT_ROUNDOFF["float32"] * math.sqrt(length)
        return max(_FLOAT32_TOLERANCE[precision], grown)
    return _FLOAT32_TOLERANCE[precision]
