"""A posted correctness verdict judged by the server's own rule: the tolerance from the
catalog at the arithmetic the run's products ran at, the error kept only where finite, the
verdict the worst checked result's. The recomputed rules of `correctness.*` (and of a cuda
run's baselines) name it. Jax-free."""

from __future__ import annotations

import math

from workers.catalog.arithmetic import Arithmetic, arithmetic_of, phrase, platform_arithmetics
from workers.catalog.base import WorkloadParams
from workers.catalog.exported import ExportedParams
from workers.protocol import PATH_PLATFORM, Correctness, PathId, ResultCheck


def checked_error(error: float | None) -> float | None:
    """An error figure: kept when finite and not negative (else the check did not pass)."""
    return error if error is not None and math.isfinite(error) and error >= 0 else None


def _judged(passed: bool, checked: bool, error: float | None, tolerance: float) -> bool:
    """A verdict passes only where the server's own comparison agrees."""
    return passed and checked and error is not None and error <= tolerance


def server_arithmetic(
    posted: str | None, params: WorkloadParams | None, path: PathId
) -> Arithmetic | None:
    """The arithmetic a run's float32 products ran at, by the server's own rule: for a
    catalog workload, what its path's platform runs the requested precision at; for an
    uploaded program (whose precision only the worker can read), the posted one when the
    platform has such an arithmetic, else None (no allowance). The cuda path's hand-written
    kernels have none."""
    if params is None or path is PathId.CUDA:
        return None
    platform = PATH_PLATFORM[path].value
    if isinstance(params, ExportedParams):
        try:
            claimed = Arithmetic(posted) if posted is not None else None
        except ValueError:
            return None
        return claimed if claimed in platform_arithmetics(platform) else None
    precision = params.contraction_precision()
    return arithmetic_of(platform, precision) if precision is not None else None


def result_tolerance(
    params: WorkloadParams | None,
    check: ResultCheck,
    dtypes: dict[str, str] | None,
    arithmetic: Arithmetic | None = None,
) -> float:
    """One result's tolerance: the catalog's, by the result's dtype where the artifact's
    header names it and the arithmetic its products ran at; otherwise the posted one, no
    looser than the loosest the catalog allows an uploaded program."""
    if isinstance(params, ExportedParams):
        if dtypes is not None and check.name in dtypes:
            return params.result_tolerance(dtypes[check.name], arithmetic)
        return min(_finite_or(check.tolerance, 0.0), params.loosest_tolerance())
    own = params.tolerance_at(arithmetic) if params is not None else None
    return own if own is not None else _finite_or(check.tolerance, 0.0)


def _count(value: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) and value >= 0 else fallback


def _ratio(r: ResultCheck) -> float:
    """How far a result is from failing: its error over its tolerance (inf: no error)."""
    if r.error is None:
        return math.inf
    if r.tolerance <= 0:
        return math.inf if r.error > 0 else 0.0
    return r.error / r.tolerance


def server_correctness(
    c: Correctness,
    params: WorkloadParams | None,
    dtypes: dict[str, str] | None,
    path: PathId = PathId.JAX_CPU,
) -> Correctness:
    """`c` judged against the catalog's tolerance at the arithmetic the run's products ran
    at: every result's, then the verdict as the worst checked result's (the one nearest to
    failing, or past it), whatever the worker named as its worst."""
    arithmetic = server_arithmetic(c.arithmetic, params, path)
    words = phrase(arithmetic) if arithmetic is not None else None
    results = []
    for r in c.results:
        tol = result_tolerance(params, r, dtypes, arithmetic)
        error = checked_error(r.error)
        passed = _judged(r.passed, r.checked, error, tol)
        update = {"tolerance": tol, "error": error, "passed": passed, "sampled": _count(r.sampled)}
        results.append(r.model_copy(update=update))
    found = {"arithmetic": arithmetic.value if arithmetic else None, "arithmetic_words": words}
    checked = [r for r in results if r.checked]
    if checked:
        worst = max(checked, key=_ratio)
        passed = c.checked and all(r.passed for r in checked)
        return c.model_copy(
            update={
                "tolerance": worst.tolerance,
                "error": worst.error,
                "passed": passed,
                "results": results,
                "worst": worst.name,
                **found,
            }
        )
    if isinstance(params, ExportedParams) and dtypes is not None and len(dtypes) == 1:
        tolerance = params.result_tolerance(next(iter(dtypes.values())), arithmetic)
    elif isinstance(params, ExportedParams):
        tolerance = min(_finite_or(c.tolerance, 0.0), params.loosest_tolerance())
    else:
        own = params.tolerance_at(arithmetic) if params is not None else None
        tolerance = own if own is not None else _finite_or(c.tolerance, 0.0)
    error = checked_error(c.error)
    passed = _judged(c.passed, c.checked, error, tolerance)
    return c.model_copy(
        update={
            "tolerance": tolerance,
            "error": error,
            "passed": passed,
            "results": results,
            "worst": None,  # no checked result to be the worst
            **found,
        }
    )
