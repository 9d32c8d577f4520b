"""The correctness check: an output against its float64 reference. NumPy only."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from workers.measure import faults
from workers.protocol import Correctness


def _non_finite(out: npt.NDArray[Any], tolerance: float) -> Correctness | None:
    """A failed verdict if `out` holds NaN or Inf anywhere, else None."""
    bad = int(np.count_nonzero(~np.isfinite(out)))
    if not bad:
        return None
    return Correctness(
        passed=False,
        error=None,
        tolerance=tolerance,
        detail=f"the output holds {bad} NaN or Inf value{'s' if bad != 1 else ''}",
    )


def _wide(array: npt.NDArray[Any], complex_: bool) -> npt.NDArray[Any]:
    """`array` in float64, or complex128 when either side is complex (so an imaginary
    part is compared, never dropped)."""
    return np.asarray(array, dtype=np.complex128 if complex_ else np.float64)


def check_output(
    output: npt.NDArray[Any], reference: npt.NDArray[Any], tolerance: float
) -> Correctness:
    """Judge `output` by its relative error ‖out − ref‖ / ‖ref‖ against `tolerance`.

    NaN or Inf anywhere fails, whatever the tolerance, and so does a shape that differs
    from the reference's. Complex values are compared as complex. A reference of all
    zeros makes the error absolute.
    """
    raw = faults.as_judged(np.asarray(output))
    complex_ = np.iscomplexobj(raw) or np.iscomplexobj(reference)
    out = _wide(raw, complex_)
    ref = _wide(np.asarray(reference), complex_)
    if out.shape != ref.shape:
        return Correctness(
            passed=False,
            error=None,
            tolerance=tolerance,
            detail=f"output shape {list(out.shape)} differs from the reference's {list(ref.shape)}",
        )
    failed = _non_finite(out, tolerance)
    if failed is not None:
        return failed
    difference = float(np.linalg.norm((out - ref).ravel()))
    scale = float(np.linalg.norm(ref.ravel()))
    error = difference / scale if scale > 0 else difference
    passed = error <= tolerance
    detail = None if passed else f"relative error {error:.3g} exceeds the tolerance {tolerance:.3g}"
    return Correctness(passed=passed, error=error, tolerance=tolerance, detail=detail)


def unchecked(output: npt.NDArray[Any], tolerance: float, why: str) -> Correctness:
    """The verdict on an output there is nothing to compare with.

    A finite output is "unchecked" (`checked` false: its timings stand, said to be of an
    unverified output). NaN or Inf fails all the same: no reference is needed to know
    that such an output is wrong.
    """
    raw = faults.as_judged(np.asarray(output))
    out = _wide(raw, np.iscomplexobj(raw))
    failed = _non_finite(out, tolerance)
    if failed is not None:
        return failed.model_copy(update={"reference": "none"})
    return Correctness(
        passed=False,
        checked=False,
        error=None,
        tolerance=tolerance,
        reference="none",
        detail=f"output unchecked: {why}",
    )
