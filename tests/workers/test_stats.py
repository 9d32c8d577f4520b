"""Statistics under pytest-benchmark's names, and the rules that stop sampling."""

from __future__ import annotations

import pytest

from workers.measure.stats import quartiles, relative_iqr, summarize
from workers.measure.stopping import Stopper
from workers.protocol import MeasureOptions


def test_quartiles_follow_pytest_benchmark() -> None:
    assert quartiles([1.0]) == (1.0, 1.0)
    assert quartiles([1.0, 2.0, 3.0, 4.0]) == (1.5, 3.5)  # halves' medians
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (1.75, 4.25)  # 4m+1: weights 1/4, 3/4
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) == (2.25, 5.75)  # 4m+3


def test_summary_names_and_values() -> None:
    stats = summarize([3.0, 1.0, 2.0, 4.0, 100.0])
    assert (stats.min, stats.max, stats.median, stats.rounds) == (1.0, 100.0, 3.0, 5)
    assert stats.mean == pytest.approx(22.0)
    assert stats.stddev == pytest.approx(43.6176, rel=1e-4)
    assert (stats.q1, stats.q3, stats.iqr) == (1.75, 28.0, 26.25)
    assert stats.outliers == "1;1"
    assert stats.ops is None  # calls per second come from the publish step alone
    assert stats.wide_spread
    assert not summarize([1.0, 1.01, 0.99, 1.0]).wide_spread
    assert summarize([2.0]).stddev == 0.0


def test_fixed_count_stops_at_exactly_n() -> None:
    stopper = Stopper(MeasureOptions(samples=7), start=0.0)
    samples: list[float] = []
    while True:
        samples.append(1.0)
        if stopper.done(samples, now=0.1):
            break
    assert len(samples) == 7
    assert stopper.reason == (
        "took the 7 samples asked for: too few (under 10) to judge warm-up or shape"
    )
    assert stopper.kept_from(7) == 0  # below 10 nothing is discarded


def test_a_thousand_samples_are_allowed() -> None:
    stopper = Stopper(MeasureOptions(samples=1000), start=0.0)
    assert not stopper.done([1e-3] * 999, now=1.0)
    assert stopper.done([1e-3] * 1000, now=1.0)


def test_auto_stops_when_the_spread_is_small() -> None:
    stopper = Stopper(MeasureOptions(samples="auto", auto_rel_iqr=0.05), start=0.0)
    samples = [1.0 + 0.001 * (i % 3) for i in range(9)]
    assert not stopper.done(samples, now=1.0)  # below the minimum count
    samples.append(1.0)
    assert stopper.done(samples, now=1.0)
    assert "IQR/median" in stopper.reason and "after 10 samples" in stopper.reason
    assert relative_iqr(samples) < 0.05


def test_auto_stops_at_the_sample_cap_when_noisy() -> None:
    stopper = Stopper(MeasureOptions(samples="auto", auto_max_samples=40), start=0.0)
    samples: list[float] = []
    while True:
        samples.append(1.0 if len(samples) % 2 else 3.0)  # IQR/median stays near 1
        if stopper.done(samples, now=0.0):
            break
    assert len(samples) == 40
    assert stopper.reason == "reached the cap of 40 samples"


def test_auto_at_its_cap_says_how_many_it_kept_after_a_warm_up() -> None:
    stopper = Stopper(MeasureOptions(samples="auto", auto_max_samples=40), start=0.0)
    samples: list[float] = []
    while True:
        # Ten slow warm-up samples, then a spread that never settles below the threshold.
        n = len(samples)
        samples.append((8.0 if n % 2 else 12.0) if n < 10 else 1.0 if n % 2 else 3.0)
        if stopper.done(samples, now=0.0):
            break
    assert len(samples) == 40
    discarded = stopper.kept_from(40)
    assert 0 < discarded <= 10
    assert stopper.reason == f"reached the cap of 40 samples: kept the last {40 - discarded}"


def test_the_time_cap_stops_either_kind() -> None:
    auto = Stopper(MeasureOptions(samples="auto", max_seconds=2.0), start=10.0)
    assert not auto.done([1.0, 3.0], now=11.0)
    assert auto.done([1.0, 3.0, 1.0], now=12.5)
    assert auto.reason == "reached the time cap of 2 s after 3"
    fixed = Stopper(MeasureOptions(samples=100, max_seconds=1.0), start=0.0)
    assert fixed.done([1.0], now=1.5)
    assert fixed.reason == "reached the time cap of 1 s after 1 of 100"
