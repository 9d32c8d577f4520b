"""The correctness check: an output against its float64 reference. NumPy only."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from workers import faults
from workers.protocol import Correctness


def check_output(
    output: npt.NDArray[Any], reference: npt.NDArray[Any], tolerance: float
) -> Correctness:
    """Judge `output` by its relative error ‖out − ref‖ / ‖ref‖ against `tolerance`.

    NaN or Inf anywhere fails, whatever the tolerance, and so does a shape that differs
    from the reference's. A reference of all zeros makes the error absolute.
    """
    out = np.asarray(faults.as_judged(np.asarray(output)), dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if out.shape != ref.shape:
        return Correctness(
            passed=False,
            error=None,
            tolerance=tolerance,
            detail=f"output shape {list(out.shape)} differs from the reference's {list(ref.shape)}",
        )
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if bad:
        return Correctness(
            passed=False,
            error=None,
            tolerance=tolerance,
            detail=f"the output holds {bad} NaN or Inf value{'s' if bad != 1 else ''}",
        )
    difference = float(np.linalg.norm(out - ref))
    scale = float(np.linalg.norm(ref))
    error = difference / scale if scale > 0 else difference
    passed = error <= tolerance
    detail = None if passed else f"relative error {error:.3g} exceeds the tolerance {tolerance:.3g}"
    return Correctness(passed=passed, error=error, tolerance=tolerance, detail=detail)
