"""Fault injection: one explicit setting, off unless a test turns it on.

The measurement contract promises that a wrong output shows no speed. Proving that needs
a wrong output from a correct program, so a test can ask for every output to be scaled
by (1 + by) just before it is judged. The one place that applies it is the correctness
check (`workers.measure.correctness.check_output`), which every runner uses; nothing else in the
production code knows about it, and it is off in every process unless a test says so.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

_lock = threading.Lock()
_scale_by: list[float] = []
"""The perturbations in force, innermost last; empty: no fault is injected."""


@contextmanager
def perturbed(by: float) -> Iterator[None]:
    """Within the block, every output is judged as if it were `output × (1 + by)`.

    `by=float("nan")` makes every output NaN. For tests only.
    """
    with _lock:
        _scale_by.append(by)
    try:
        yield
    finally:
        with _lock:
            _scale_by.pop()


def active() -> float | None:
    """The perturbation in force, or None (always None outside a test's block)."""
    with _lock:
        return _scale_by[-1] if _scale_by else None


def as_judged(output: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`output` as the check should see it: itself, unless a test injected a fault."""
    by = active()
    if by is None:
        return output
    dtype = np.complex128 if np.iscomplexobj(output) else np.float64
    return np.asarray(output, dtype=dtype) * (1.0 + by)
