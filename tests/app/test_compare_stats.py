"""The comparison's statistics: a ratio of medians with an interval bootstrapped over runs."""

from __future__ import annotations

import statistics

import pytest

from app.pages.compare.stats import Interval, noise_floor, ratio_interval, verdict

A = [1.00e-3, 1.04e-3, 0.97e-3, 1.01e-3]


def test_a_clear_difference_has_an_interval_that_excludes_one() -> None:
    b = [x * 0.5 for x in A]
    found = ratio_interval(A, b)
    assert found.ratio == pytest.approx(0.5)
    assert found.low <= found.ratio <= found.high < 1.0
    assert not found.includes_one
    assert verdict(found).startswith("B takes 0.500×")
    assert "B is faster" in verdict(found)
    slower = ratio_interval(b, A)
    assert slower.low > 1.0 and "B is slower" in verdict(slower)


def test_the_same_runs_on_both_sides_show_no_measurable_difference() -> None:
    found = ratio_interval(A, list(reversed(A)))
    assert found.ratio == pytest.approx(1.0)
    assert found.includes_one
    assert verdict(found).startswith("No measurable difference")
    assert "faster" not in verdict(found) and "slower" not in verdict(found)


def test_the_interval_is_over_run_medians_so_it_widens_with_run_to_run_noise() -> None:
    quiet = ratio_interval(A, [x * 0.9 for x in A])
    noisy_b = [0.9e-3 * f for f in (0.6, 1.0, 1.4, 0.8)]
    noisy = ratio_interval(A, noisy_b)
    assert noisy.high - noisy.low > 3 * (quiet.high - quiet.low)
    assert noisy.includes_one  # a 10% change buried in ±40% run-to-run noise is no finding


def test_the_ratio_is_of_medians_not_means() -> None:
    b = [0.5e-3, 0.5e-3, 0.5e-3, 50e-3]  # one wild run
    found = ratio_interval(A, b)
    assert found.ratio == pytest.approx(0.5e-3 / statistics.median(A))


def test_the_bootstrap_is_seeded_and_reproducible() -> None:
    b = [x * 0.8 for x in A]
    assert ratio_interval(A, b) == ratio_interval(A, b)
    assert ratio_interval(A, b, resamples=500).resamples == 500


def test_the_noise_floor_is_a_side_against_its_own_repeats() -> None:
    tight = noise_floor([1.0, 1.001, 0.999])
    loose = noise_floor([1.0, 1.3, 0.7])
    assert tight.ratio == 1.0 and tight.includes_one
    assert tight.half_width_pct < 0.5
    assert loose.half_width_pct > 20
    assert Interval(1.0, 0.9, 1.05, 0.95, 10).half_width_pct == pytest.approx(10.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="a: no runs"):
        ratio_interval([], A)
    with pytest.raises(ValueError, match="b: medians must be positive"):
        ratio_interval(A, [0.0, 1.0])
