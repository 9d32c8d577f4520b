"""The correctness check: an output against its float64 reference. NumPy only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.measure import faults
from workers.protocol import Correctness, ResultCheck


def non_finite_verdict(bad: int, tolerance: float) -> Correctness:
    """The failed verdict on an output holding `bad` NaN or Inf values."""
    return Correctness(
        passed=False,
        error=None,
        tolerance=tolerance,
        detail=f"the output holds {bad} NaN or Inf value{'s' if bad != 1 else ''}",
    )


def shape_verdict(
    shape: tuple[int, ...], expected: tuple[int, ...], tolerance: float
) -> Correctness:
    """The failed verdict on an output whose shape is not the reference's."""
    return Correctness(
        passed=False,
        error=None,
        tolerance=tolerance,
        detail=f"output shape {list(shape)} differs from the reference's {list(expected)}",
    )


def error_verdict(error: float, tolerance: float, *, estimated: bool = False) -> Correctness:
    """The verdict on a finite relative error: passed when within `tolerance`. An
    `estimated` error (random projections) says so when it fails."""
    passed = error <= tolerance
    kind = " (estimated)" if estimated else ""
    detail = (
        None
        if passed
        else f"relative error {error:.3g}{kind} exceeds the tolerance {tolerance:.3g}"
    )
    return Correctness(passed=passed, error=error, tolerance=tolerance, detail=detail)


def _non_finite(out: npt.NDArray[Any], tolerance: float) -> Correctness | None:
    """A failed verdict if `out` holds NaN or Inf anywhere, else None."""
    bad = int(np.count_nonzero(~np.isfinite(out)))
    return non_finite_verdict(bad, tolerance) if bad else None


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
        return shape_verdict(out.shape, ref.shape, tolerance)
    failed = _non_finite(out, tolerance)
    if failed is not None:
        return failed
    difference = float(np.linalg.norm((out - ref).ravel()))
    scale = float(np.linalg.norm(ref.ravel()))
    return error_verdict(difference / scale if scale > 0 else difference, tolerance)


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


def _result_check(
    name: str,
    output: npt.NDArray[Any],
    expected: tuple[Any | None, Any] | None,
    tolerance: float,
) -> ResultCheck:
    """One result against its reference: the whole array, or the elements a sample names."""
    if expected is None:
        found = unchecked(output, tolerance, "the reference holds nothing for this result")
        return ResultCheck(
            name=name, passed=False, checked=found.checked, tolerance=tolerance, detail=found.detail
        )
    indices, values = expected
    picked = output if indices is None else np.asarray(output).reshape(-1)[indices]
    verdict = check_output(picked, values, tolerance)
    sampled = None if indices is None else len(indices)
    detail = verdict.detail
    if detail is not None and sampled is not None:
        detail = f"{detail} (on {sampled:,} sampled elements)"
    return ResultCheck(
        name=name,
        passed=verdict.passed,
        error=verdict.error,
        tolerance=tolerance,
        detail=detail,
        sampled=sampled,
    )


def check_results(
    names: Sequence[str],
    outputs: Sequence[npt.NDArray[Any]],
    expected: Mapping[int, tuple[Any | None, Any]],
    tolerances: Sequence[float],
    *,
    reference: str,
    why_none: str | None = None,
) -> Correctness:
    """Several results, each checked on its own; the verdict is the worst one's.

    `expected` maps a result's position to (flat indices or None for the whole result,
    expected values); a result it leaves out is unchecked, and fails only if it holds NaN
    or Inf. The run passes when every checked result passed and at least one was checked;
    with none checked (no reference at all: `why_none` says why) it is unchecked, as a
    single output is. The worst is the failed result with the largest error (a non-finite
    one first), else the passed one with the largest error.
    """
    checks = [
        _result_check(name, out, expected.get(i), tol)
        for i, (name, out, tol) in enumerate(zip(names, outputs, tolerances, strict=True))
    ]
    compared = [c for c in checks if c.checked]
    failed = [c for c in compared if not c.passed]
    if not compared:
        first = checks[0] if checks else None
        return Correctness(
            passed=False,
            checked=False,
            error=None,
            tolerance=first.tolerance if first is not None else 0.0,
            reference=reference,
            detail=f"output unchecked: {why_none}" if why_none else "output unchecked",
            results=checks,
        )
    worst = max(failed or compared, key=lambda c: c.error if c.error is not None else np.inf)
    count = f"{len(compared)} of {len(checks)} results checked"
    if failed:
        detail = f"{worst.name}: {worst.detail or 'failed'} ({count})"
    else:
        detail = f"{count}; the worst is {worst.name}"
    return Correctness(
        passed=not failed,
        error=worst.error,
        tolerance=worst.tolerance,
        reference=reference,
        detail=detail,
        results=checks,
        worst=worst.name,
    )
