"""A dense product's output checked by random projections, with no float64 copy of A, B or
C. NumPy only.

With R an n × p matrix of standard normal values, E‖X·R‖² = p·‖X‖² for any m × n matrix X
(Frobenius norms), so ‖(C − A·B)·R‖ / ‖A·B·R‖ estimates the exact check's relative error
‖C − A·B‖ / ‖A·B‖. Every product here is a thin one: B·R (k × p), then A·(B·R) and C·R
(m × p), each computed in float64 from one block of rows widened at a time
(workers.catalog.peak.float64_rows). The whole output is read, every element
weighs in, and NaN or Inf anywhere fails as in the exact check. docs/design/product-check.md
says how far the estimate may be from the exact error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from workers.catalog.peak import float64_rows
from workers.catalog.product_check import PROJECTION_SEED, PROJECTIONS, projected_reference
from workers.measure import faults
from workers.measure.correctness import error_verdict, non_finite_verdict, shape_verdict
from workers.protocol import Correctness

Matrix = npt.NDArray[Any]


def projections(n: int, count: int = PROJECTIONS, seed: int = PROJECTION_SEED) -> Matrix:
    """R: `count` standard normal columns of length `n`, in float64, from `seed`."""
    return np.random.default_rng(seed).standard_normal((n, count))


def times(matrix: Matrix, r: Matrix) -> Matrix:
    """`matrix` @ `r` accumulated in float64, one block of rows at a time widened into one
    float64 buffer (so no second block is ever alive). A row holding NaN or Inf makes its
    row of the result non-finite (R has no zero), which is how the check finds one."""
    rows, width = matrix.shape
    step = float64_rows(rows, width)
    buffer = np.empty((step, width), dtype=np.float64)
    out = np.empty((rows, r.shape[1]), dtype=np.float64)
    for start in range(0, rows, step):
        block = buffer[: min(step, rows - start)]
        np.copyto(block, matrix[start : start + step])
        np.matmul(block, r, out=out[start : start + step])
    return out


def non_finite(matrix: Matrix) -> int:
    """How many elements of `matrix` are NaN or Inf, counted a block of rows at a time."""
    rows, width = matrix.shape
    step = float64_rows(rows, width)
    return sum(
        int(np.count_nonzero(~np.isfinite(matrix[start : start + step])))
        for start in range(0, rows, step)
    )


class ProjectedProduct:
    """A·B·R, the expected side of the check, computed once for the inputs A and B (and
    so shared by several outputs of the same product, as the cuda path checks three)."""

    def __init__(
        self, a: Matrix, b: Matrix, count: int = PROJECTIONS, seed: int = PROJECTION_SEED
    ) -> None:
        self.shape = (a.shape[0], b.shape[1])
        self.count = count
        self.r = projections(b.shape[1], count, seed)
        self.expected = times(a, times(b, self.r))

    def estimate(self, output: Matrix) -> float | None:
        """The estimated ‖output − A·B‖ / ‖A·B‖; None when `output` holds NaN or Inf."""
        got = times(output, self.r)
        if not np.isfinite(got).all():
            return None
        scale = float(np.linalg.norm(self.expected))
        difference = float(np.linalg.norm(got - self.expected))
        return difference / scale if scale > 0 else difference

    def check(self, output: Matrix, tolerance: float) -> Correctness:
        """The verdict on `output`: its estimated relative error against `tolerance`. A
        shape other than the product's fails, and so does NaN or Inf anywhere."""
        judged = faults.as_judged(np.asarray(output))
        if judged.shape != self.shape:
            verdict = shape_verdict(judged.shape, self.shape, tolerance)
        else:
            error = self.estimate(judged)
            verdict = (
                non_finite_verdict(non_finite(judged), tolerance)
                if error is None
                else error_verdict(error, tolerance, estimated=True)
            )
        return verdict.model_copy(update={"reference": projected_reference(self.count)})
