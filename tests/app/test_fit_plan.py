"""The fit search's planner, over made-up peak functions: the answer always fits and the
next value does not, within a bound on compiles; an affine peak takes at most four
compiles, and the median over stepped and noisy peaks stays at five or fewer."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.queue.fit_plan import Grid, How, Probe, next_step

Peak = Callable[[int], int]


def search(
    grid: Grid, peak: Peak, limit: int, aim: int | None = None, *, predict: bool = True
) -> tuple[int | None, int]:
    """Run a search to its end against `peak` (fits: peak ≤ `limit`), aiming the
    prediction at `aim` (the limit when not given); its answer and how many compiles."""
    probes: list[Probe] = []
    while True:
        step = next_step(grid, probes, limit if aim is None else aim, predict=predict)
        if step.done:
            return step.largest, len(probes)
        assert step.values, step
        for value in step.values:
            assert value not in [p.value for p in probes], "a value compiled twice"
            assert grid.index(value) is not None
            probes.append(Probe(value, peak(value) <= limit, peak(value)))
        assert len(probes) <= bound(grid), "past the bound on compiles"


def bound(grid: Grid) -> int:
    """Seeds and the first prediction (4); then while nothing has failed, at worst one
    doubling of the largest fitting value every other compile; then a halving every
    other compile."""
    return 4 + 4 * grid.size.bit_length()


def proved(grid: Grid, peak: Peak, limit: int, largest: int | None) -> bool:
    """The answer fits and the next value does not (or it is hi; or lo does not fit)."""
    if largest is None:
        return peak(grid.lo) > limit
    nxt = largest + grid.step
    return peak(largest) <= limit and (largest == grid.hi or peak(nxt) > limit)


def boundary(grid: Grid, peak: Peak, limit: int) -> int | None:
    """The true answer for a peak that grows with the value."""
    fitting = [v for v in range(grid.lo, grid.hi + 1, grid.step) if peak(v) <= limit]
    return max(fitting) if fitting else None


grids = st.builds(
    lambda lo, n, step: Grid(lo, lo + n * step, step),
    st.integers(1, 64),
    st.integers(0, 70_000),
    st.sampled_from([1, 1, 2, 8]),
)


@settings(max_examples=300, deadline=None)
@given(
    grid=grids,
    base=st.integers(0, 10**10),
    slope=st.integers(1, 10**7),
    where=st.floats(-0.2, 1.2),
)
def test_an_affine_peak_is_found_exactly_in_four_compiles_or_fewer(
    grid: Grid, base: int, slope: int, where: float
) -> None:
    def peak(v: int) -> int:
        return base + slope * v

    limit = max(0, peak(round(grid.lo + where * (grid.hi - grid.lo))))
    largest, compiles = search(grid, peak, limit)
    assert largest == boundary(grid, peak, limit)
    assert compiles <= 4


@settings(max_examples=300, deadline=None)
@given(
    grid=grids,
    base=st.integers(0, 10**10),
    slope=st.integers(1, 10**6),
    pad=st.sampled_from([1, 8, 128, 1000]),
    curve=st.integers(0, 50),
    where=st.floats(0.0, 1.0),
    aim_error=st.floats(-0.08, 0.08),
)
def test_a_growing_stepped_or_curved_peak_is_found_exactly_within_the_bound(
    *, grid: Grid, base: int, slope: int, pad: int, curve: int, where: float, aim_error: float
) -> None:
    def peak(v: int) -> int:
        padded = -(-v // pad) * pad
        return base + slope * padded + curve * v * v

    limit = peak(round(grid.lo + where * (grid.hi - grid.lo)))
    aim = round(limit * (1 + aim_error))
    largest, _ = search(grid, peak, limit, aim)
    assert largest == boundary(grid, peak, limit)


@settings(max_examples=300, deadline=None)
@given(
    grid=grids,
    base=st.integers(10**6, 10**10),
    slope=st.integers(1, 10**6),
    noise=st.floats(0.0, 0.05),
    seed=st.integers(0, 2**32),
    where=st.floats(-0.1, 1.1),
)
def test_a_noisy_peak_gives_an_answer_that_fits_with_a_next_value_that_does_not(
    *, grid: Grid, base: int, slope: int, noise: float, seed: int, where: float
) -> None:
    def peak(v: int) -> int:
        jitter = random.Random(seed * 1_000_003 + v).uniform(-noise, noise)
        return round((base + slope * v) * (1 + jitter))

    limit = base + slope * round(grid.lo + where * (grid.hi - grid.lo))
    largest, _ = search(grid, peak, limit)
    assert proved(grid, peak, limit, largest)


@settings(max_examples=200, deadline=None)
@given(grid=grids, where=st.floats(-0.1, 1.1))
def test_plain_bisection_is_exact_within_one_compile_per_halving(grid: Grid, where: float) -> None:
    def peak(v: int) -> int:
        return 1000 + 3 * v

    limit = peak(round(grid.lo + where * (grid.hi - grid.lo)))
    largest, compiles = search(grid, peak, limit, predict=False)
    assert largest == boundary(grid, peak, limit)
    assert compiles <= grid.size.bit_length()


def wobbly(base: int, slope: int, seed: int) -> Peak:
    """An affine peak with a wobble of up to a quarter of its slope at each value (the
    padding of small buffers), which moves the boundary by a step at most."""

    def peak(v: int) -> int:
        return base + slope * v + random.Random(seed + v).randint(-slope // 4, slope // 4)

    return peak


def test_the_median_over_affine_peaks_with_a_wobble_is_five_compiles_or_fewer() -> None:
    rng = random.Random(38)
    grid = Grid(1, 65_536)
    counts, bisections = [], []
    for _ in range(200):
        peak = wobbly(rng.randint(10**8, 10**10), rng.randint(10**3, 10**6), rng.randint(0, 9))
        limit = peak(rng.randint(2, 65_535))
        counts.append(search(grid, peak, limit)[1])
        bisections.append(search(grid, peak, limit, predict=False)[1])
    assert statistics.median(counts) <= 5
    assert statistics.median(bisections) >= 16


def kneed(rng: random.Random) -> Peak:
    """An affine peak whose slope changes once, with a jump, at a random value: where a
    compiler changes its mind (XLA starts to rematerialize near the limit)."""
    base, slope = rng.randint(10**8, 10**10), rng.randint(10**3, 10**7)
    knee, factor = rng.randint(2, 65_535), rng.uniform(0.4, 1.2)
    jump = rng.randint(-slope * 50, slope * 5)

    def peak(v: int) -> int:
        if v <= knee:
            return base + slope * v
        return base + slope * knee + jump + round(slope * factor) * (v - knee)

    return peak


def test_a_peak_with_a_knee_takes_at_most_six_compiles() -> None:
    rng = random.Random(38)
    grid = Grid(1, 65_536)
    for _ in range(300):
        peak = kneed(rng)
        limit = peak(rng.randint(2, 65_535))
        largest, compiles = search(grid, peak, limit)
        assert proved(grid, peak, limit, largest)
        assert compiles <= 6


def test_seeds_then_the_predicted_value_then_the_value_past_it() -> None:
    grid = Grid(8, 8192, 8)
    first = next_step(grid, [], 10_000)
    assert first.how is How.SEED and first.values == (8, 256)
    probes = [Probe(8, True, 1000 + 8 * 10), Probe(256, True, 1000 + 256 * 10)]
    second = next_step(grid, probes, 10_000)
    # 1000 + 10 v ≤ 10000 up to v = 900: on the grid of 8s, 896 fits and 904 does not.
    assert second.how is How.PREDICT and second.values == (896,)
    assert second.predicted == 896
    assert second.bracket.fits == 256 and second.bracket.over is None
    probes.append(Probe(896, True, 9960))
    third = next_step(grid, probes, 10_000)
    assert third.values == (904,) and third.bracket.fits == 896
    done = next_step(grid, [*probes, Probe(904, False, 10040)], 10_000)
    assert done.done and done.largest == 896
    assert (done.bracket.fits, done.bracket.over) == (896, 904)


def test_no_limit_or_a_flat_peak_falls_back_to_bisection() -> None:
    grid = Grid(1, 100)
    probes = [Probe(1, True, 500), Probe(10, True, 500)]
    assert next_step(grid, probes, 400).how is How.BISECT
    assert next_step(grid, [*probes[:1], Probe(10, True, 600)], None).how is How.BISECT


def test_ends_of_the_range() -> None:
    grid = Grid(4, 4)
    assert next_step(grid, [], 1).values == (4,)
    assert next_step(grid, [Probe(4, False, 9)], 1).largest is None
    wide = Grid(1, 1000)
    nothing = next_step(wide, [Probe(1, False, 99), Probe(32, False, 999)], 1)
    assert nothing.done and nothing.largest is None
    everything = next_step(wide, [Probe(1, True, 1), Probe(32, True, 32)], 10**9)
    assert everything.values == (1000,)
    assert next_step(wide, [Probe(1, True), Probe(1000, True)], None).largest == 1000


def test_a_grid_must_hold_its_ends() -> None:
    with pytest.raises(ValueError, match="not a grid"):
        Grid(1, 10, 4)
    assert Grid(8, 64, 8).index(12) is None and Grid(8, 64, 8).index(64) == 7


def test_a_refusal_that_reports_only_the_limit_costs_no_more_compiles() -> None:
    """libtpu may refuse a program just over the limit with the limit itself as its figure
    ("31.25G exceeds available HBM (31.25G)"): that figure says nothing of the slope, and
    the search takes at most one compile more than with the program's real peak (it took
    up to five more, predicting the refused value again and again)."""
    grid, limit, rounding = Grid(1, 65_536, 1), 33_554_432_000, 10 * 2**20
    rng = random.Random(7)
    extra: list[int] = []
    for _ in range(60):
        slope, where, curve = rng.randint(10**5, 10**8), rng.uniform(2, 60_000), rng.random() / 3

        def peak(v: int, slope: int = slope, where: float = where, curve: float = curve) -> int:
            return int(limit - slope * where * (1 + curve) + slope * v * (1 + curve * v / where))

        def refused_at_limit(v: int, peak: Peak = peak) -> int:
            return limit if limit < peak(v) < limit + rounding else peak(v)

        real = search(grid, peak, limit)
        shown = search_reported(grid, peak, refused_at_limit, limit)
        assert shown[0] == real[0] == boundary(grid, peak, limit)
        extra.append(shown[1] - real[1])
    assert max(extra) <= 1, extra


def search_reported(grid: Grid, peak: Peak, reported: Peak, limit: int) -> tuple[int | None, int]:
    """`search`, where each compile's verdict comes from `peak` but its figure from
    `reported`."""
    probes: list[Probe] = []
    while not (step := next_step(grid, probes, limit)).done:
        probes += [Probe(v, peak(v) <= limit, reported(v)) for v in step.values]
        assert len(probes) <= bound(grid), "past the bound on compiles"
    return step.largest, len(probes)
