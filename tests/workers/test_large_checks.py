"""Large outputs are checked without float64 copies of whole arrays. A large dense product
is checked by random projections of the whole product, with no float64 copy of A, B or C:
a right product passes, a wrong one fails, and the estimate stays within the factor
docs/design/product-check.md states of the exact check's error, on sizes where both can be
computed; a real run of a product past the exact check's limit says which check it had.
Attention is checked exactly, a block of queries at a time."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from workers.catalog.product_check import EXACT_CHECK_BYTES, projected, projected_reference
from workers.measure.correctness import check_output
from workers.measure.faults import perturbed
from workers.measure.projected import ProjectedProduct
from workers.protocol import JobSpec
from workers.run.engine import run_job

BF16 = ml_dtypes.bfloat16
TOLERANCE = 2e-2
"""The catalog's tolerance for a bfloat16 product."""
RANK_ONE_FACTOR = (0.47, 1.63)
"""Estimate ÷ exact error for an error in one element, the least concentrated case: the
0.0001 % and 99.9999 % points of √(χ²₃₂ / 32)."""


def operands(m: int, k: int, n: int, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """bfloat16 A and B, the float64 product, and C as a chip makes it: float32
    accumulation, rounded to bfloat16."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(BF16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(BF16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    c = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    return a, b, exact, c


@pytest.fixture(scope="module")
def product() -> tuple[Any, Any, Any, Any]:
    return operands(2048, 1024, 2048)


def exact_error(output: Any, exact: Any) -> float:
    return float(np.linalg.norm(np.asarray(output, np.float64) - exact) / np.linalg.norm(exact))


def test_a_right_product_passes_with_an_estimate_within_5_percent_of_the_exact_error(
    product: tuple[Any, Any, Any, Any],
) -> None:
    a, b, exact, c = product
    verdict = ProjectedProduct(a, b).check(c, TOLERANCE)
    assert verdict.passed and verdict.detail is None
    assert verdict.reference == projected_reference()
    assert "32 random projections of the whole product" in verdict.reference
    assert verdict.error is not None
    # Rounding errors spread over every element: the estimate is tight.
    assert verdict.error == pytest.approx(exact_error(c, exact), rel=0.05)
    assert check_output(c, exact, TOLERANCE).passed


def test_one_element_off_by_1_percent_is_under_what_either_check_can_see(
    product: tuple[Any, Any, Any, Any],
) -> None:
    """In a 2048² product one element 1 % off moves ‖C − A·B‖ / ‖A·B‖ by about 1e-2 /
    2048: the exact check passes it too. Both judge the whole product's error."""
    a, b, exact, c = product
    wrong = c.astype(np.float64)
    wrong[100, 200] *= 1.01
    assert check_output(wrong, exact, TOLERANCE).passed
    assert ProjectedProduct(a, b).check(wrong, TOLERANCE).passed


def test_an_element_off_by_twice_the_tolerance_fails(product: tuple[Any, Any, Any, Any]) -> None:
    """The least concentrated error (one element, rank one) at twice the tolerance: a
    check of 32 projections misses it with probability 5e-6."""
    a, b, exact, c = product
    wrong = c.astype(np.float64)
    wrong[100, 200] += 2 * TOLERANCE * np.linalg.norm(exact)
    assert not check_output(wrong, exact, TOLERANCE).passed
    verdict = ProjectedProduct(a, b).check(wrong, TOLERANCE)
    assert not verdict.passed
    assert verdict.detail is not None and "(estimated) exceeds the tolerance 0.02" in verdict.detail


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("rows in reverse order", lambda a, b, c: c[::-1]),
        ("zeros", lambda a, b, c: np.zeros_like(c)),
        ("the first 64 rows lost", lambda a, b, c: np.where(np.arange(2048)[:, None] < 64, 0, c)),
        ("k halved", lambda a, b, c: a[:, :512].astype(np.float32) @ b[:512].astype(np.float32)),
    ],
)
def test_gross_errors_fail(product: tuple[Any, Any, Any, Any], name: str, wrong: Any) -> None:
    a, b, exact, c = product
    output = wrong(a, b, c)
    verdict = ProjectedProduct(a, b).check(output, TOLERANCE)
    assert not verdict.passed, name
    assert verdict.error is not None
    assert verdict.error == pytest.approx(exact_error(output, exact), rel=0.2), name


def test_nan_anywhere_and_a_wrong_shape_fail(product: tuple[Any, Any, Any, Any]) -> None:
    a, b, _, c = product
    bad = c.astype(np.float32)
    bad[2047, 0] = np.nan
    verdict = ProjectedProduct(a, b).check(bad, TOLERANCE)
    assert not verdict.passed and verdict.error is None
    assert verdict.detail == "the output holds 1 NaN or Inf value"
    verdict = ProjectedProduct(a, b).check(c[:, :-1], TOLERANCE)
    assert not verdict.passed
    assert verdict.detail == "output shape [2048, 2047] differs from the reference's [2048, 2048]"


def test_a_fault_injected_by_a_test_reaches_the_projected_check_too(
    product: tuple[Any, Any, Any, Any],
) -> None:
    a, b, _, c = product
    with perturbed(0.05):
        verdict = ProjectedProduct(a, b).check(c, TOLERANCE)
    assert not verdict.passed and verdict.error == pytest.approx(0.05, rel=0.05)


def test_the_estimate_stays_within_the_stated_factor_of_the_exact_error() -> None:
    """Over 40 draws of R, for an error in one element (its estimate's spread is the
    widest: √(χ²₃₂ / 32)) and for rounding spread over the output (within 5 %)."""
    a, b, exact, c = operands(256, 128, 256, seed=1)
    one = c.astype(np.float64)
    one[7, 9] += 0.1 * np.linalg.norm(exact)
    ratios_one, ratios_spread = [], []
    for seed in range(40):
        check = ProjectedProduct(a, b, seed=seed)
        estimated_one, estimated_spread = check.estimate(one), check.estimate(c)
        assert estimated_one is not None and estimated_spread is not None
        ratios_one.append(estimated_one / exact_error(one, exact))
        ratios_spread.append(estimated_spread / exact_error(c, exact))
    low, high = RANK_ONE_FACTOR
    assert low <= min(ratios_one) and max(ratios_one) <= high
    assert min(ratios_spread) >= 0.95 and max(ratios_spread) <= 1.05
    # The one-element estimates do vary with R: this is no exact check in disguise.
    assert max(ratios_one) - min(ratios_one) > 0.2


def test_the_exact_check_covers_4096_cubed_and_projections_8192_cubed() -> None:
    assert not projected(4096, 4096, 4096)
    assert projected(8192, 8192, 8192)
    assert projected(16384, 16384, 1)  # the output alone passes the limit
    assert 8 * (4096**2 * 3) <= EXACT_CHECK_BYTES < 8 * (8192**2 * 3)


def test_a_run_past_the_exact_limit_is_checked_by_projections() -> None:
    """8192 × 2 @ 2 × 8192 in float32: float64 copies of 537 MB, past the exact check's
    limit, yet a product cheap enough to run here."""
    job = JobSpec.model_validate(
        {"workload": "matmul", "params": {"m": 8192, "n": 8192, "k": 2}, "measure": {"samples": 2}}
    )
    run = run_job(job)
    assert run.valid and run.correctness is not None and run.correctness.passed
    assert run.correctness.reference == projected_reference()
    assert run.correctness.error is not None and run.correctness.error < 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_attention_is_checked_exactly_a_block_of_queries_at_a_time(causal: bool) -> None:
    """4096 queries of one head make two blocks of float64 scores; the error summed over
    them is the whole reference's, and a fault shows in either block."""
    from workers.catalog import parse_params
    from workers.workloads.attention import Attention

    workload = Attention()
    shape = {"batch": 1, "heads": 2, "seq_len": 4096, "head_dim": 32, "causal": causal}
    params = workload.typed(parse_params("attention", shape))
    inputs = workload.make_inputs(params, np.random.default_rng(0))
    output = np.asarray(workload.function(params)(*inputs))
    whole = check_output(output, workload.reference(params, inputs), params.tolerance())
    blocked = workload.checker(params, inputs)(output)
    assert whole.passed and blocked.passed and blocked.reference == whole.reference
    assert blocked.error == pytest.approx(whole.error, rel=1e-9)
    wrong = output.copy()
    wrong[0, 1, 3000:] *= 1.5  # the second block of the second head
    assert not workload.checker(params, inputs)(wrong).passed


def test_large_attention_is_admitted_on_a_40_gb_host() -> None:
    """Its whole float64 reference held 34 GB of float64 scores and weights; the blocked
    check holds one block's."""
    from workers.catalog import parse_params
    from workers.catalog.job_limit import default_job_bytes

    shape = {"batch": 8, "heads": 16, "seq_len": 4096, "head_dim": 128, "dtype": "bfloat16"}
    peak = parse_params("attention", shape).peak()
    assert peak.phase == "sampling"  # the program's own scores and weights: 12.9 GB
    assert peak.total < 14 * 10**9 <= default_job_bytes(40 * 10**9)
