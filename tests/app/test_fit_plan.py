"""The fit search's planner, over made-up peak functions: the answer always fits and the
next value does not, within a bound on compiles; an affine peak takes at most four
compiles to find (and one round check), and the median over stepped and noisy peaks
stays at five or fewer, the checks counted apart. Peaks that depend on a value's
alignment, or fall where a compiler changes its mind, are flagged, and a search over
every value agrees with one over every 1,024th."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.queue.fit_plan import CHECK_BUDGET, Grid, How, Probe, next_step

Peak = Callable[[int], int]


class Found(NamedTuple):
    """A search's answer, the compiles that searched for it and those that checked it."""

    largest: int | None
    compiles: int
    checks: int
    non_monotone: bool


def search(
    grid: Grid, peak: Peak, limit: int, aim: int | None = None, *, predict: bool = True
) -> Found:
    """Run a search to its end against `peak` (fits: peak ≤ `limit`), aiming the
    prediction at `aim` (the limit when not given)."""
    probes: list[Probe] = []
    while True:
        step = next_step(grid, probes, limit if aim is None else aim, predict=predict)
        if step.done:
            made = len(probes) - step.checks
            return Found(step.largest, made, step.checks, step.non_monotone)
        assert step.values, step
        for value in step.values:
            assert value not in [p.value for p in probes], "a value compiled twice"
            assert grid.index(value) is not None
            probes.append(Probe(value, peak(value) <= limit, peak(value)))
        assert len(probes) <= bound(grid), "past the bound on compiles"


def bound(grid: Grid) -> int:
    """Seeds and the first prediction (4); then while nothing has failed, at worst one
    doubling of the largest fitting value every other compile; then a halving every
    other compile. The checks take at most CHECK_BUDGET compiles per bit of the grid's
    size, a last round of check points, and the closing of a bracket they opened (a
    quarter of it at least each compile)."""
    bits = grid.size.bit_length()
    return 4 + 4 * bits + CHECK_BUDGET * bits + bits + 3 * bits


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
    found = search(grid, peak, limit)
    assert found.largest == boundary(grid, peak, limit)
    assert found.compiles <= 4 and found.checks <= 1 and not found.non_monotone


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
    found = search(grid, peak, limit, aim)
    assert found.largest == boundary(grid, peak, limit) and not found.non_monotone


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
    assert proved(grid, peak, limit, search(grid, peak, limit).largest)


@settings(max_examples=200, deadline=None)
@given(grid=grids, where=st.floats(-0.1, 1.1))
def test_plain_bisection_is_exact_within_one_compile_per_halving(grid: Grid, where: float) -> None:
    def peak(v: int) -> int:
        return 1000 + 3 * v

    limit = peak(round(grid.lo + where * (grid.hi - grid.lo)))
    found = search(grid, peak, limit, predict=False)
    assert found.largest == boundary(grid, peak, limit)
    assert found.compiles <= grid.size.bit_length() and found.checks == 0


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
        counts.append(search(grid, peak, limit).compiles)
        bisections.append(search(grid, peak, limit, predict=False).compiles)
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
        found = search(grid, peak, limit)
        assert proved(grid, peak, limit, found.largest)
        assert found.compiles <= 6


def test_seeds_then_the_predicted_value_then_the_value_past_it() -> None:
    grid = Grid(8, 8192, 8)
    first = next_step(grid, [], 10_000)
    # lo, and the upper quartile in the log: 8^(1/4) × 8192^(3/4) = 1448.2.
    assert first.how is How.SEED and first.values == (8, 1448)
    probes = [Probe(8, True, 1000 + 8 * 10), Probe(1448, False, 1000 + 1448 * 10)]
    second = next_step(grid, probes, 10_000)
    # 1000 + 10 v ≤ 10000 up to v = 900: on the grid of 8s, 896 fits and 904 does not.
    assert second.how is How.PREDICT and second.values == (896,)
    assert second.predicted == 896
    assert second.bracket.fits == 8 and second.bracket.over == 1448
    probes.append(Probe(896, True, 9960))
    third = next_step(grid, probes, 10_000)
    assert third.values == (904,) and third.bracket.fits == 896
    probes.append(Probe(904, False, 10040))
    # Proved; then the round check: the next multiple of 128 (at most a quarter of 904).
    check = next_step(grid, probes, 10_000)
    assert check.how is How.ROUND and check.values == (1024,) and check.checks == 0
    done = next_step(grid, [*probes, Probe(1024, False, 11240)], 10_000)
    assert done.done and done.largest == 896 and done.checks == 1 and not done.non_monotone
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
        assert shown[0] == real.largest == boundary(grid, peak, limit)
        extra.append(shown[1] - real.compiles)
    assert max(extra) <= 1, extra


def search_reported(grid: Grid, peak: Peak, reported: Peak, limit: int) -> tuple[int | None, int]:
    """`search`, where each compile's verdict comes from `peak` but its figure from
    `reported`."""
    probes: list[Probe] = []
    while not (step := next_step(grid, probes, limit)).done:
        probes += [Probe(v, peak(v) <= limit, reported(v), peak(v) > limit) for v in step.values]
        assert len(probes) <= bound(grid), "past the bound on compiles"
    return step.largest, len(probes) - step.checks


def aligned(base: int, slope: int, align: int, factor: float) -> Peak:
    """An affine peak where values that are not multiples of `align` need `factor` times
    the memory per value (XLA pads and lays out a batch of 558,081 otherwise than one of
    558,080: 78 GB against 60 GB on an H100 for one train step)."""

    def peak(v: int) -> int:
        return base + slope * v if v % align == 0 else base + round(slope * v * factor)

    return peak


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(10**8, 10**10),
    slope=st.integers(10**3, 10**6),
    align=st.sampled_from([2, 8, 64, 128, 512, 1024]),
    factor=st.floats(1.02, 1.6),
    where=st.integers(8, 1020),  # from 4,096 on, the round check reaches a 1,024 multiple
)
def test_a_search_over_every_value_agrees_with_one_over_every_1024th_or_both_say_not_monotone(
    *, base: int, slope: int, align: int, factor: float, where: int
) -> None:
    peak = aligned(base, slope, align, factor)
    limit = peak(where * 1024 + align * (where % 3))
    fine = search(Grid(1, 2**20), peak, limit)
    coarse = search(Grid(1024, 2**20, 1024), peak, limit)
    assert fine.largest is not None and coarse.largest is not None
    # Every multiple of 1,024 is aligned: the coarse search sees an affine peak; the fine
    # one finds what it finds, and agrees.
    assert not coarse.non_monotone and coarse.compiles <= 4
    assert coarse.largest <= fine.largest < coarse.largest + 1024


def test_once_the_peak_falls_the_rest_of_the_range_is_checked_before_the_answer() -> None:
    grid = Grid(1, 2**20)
    limit = 60 * 10**9
    probes = [
        Probe(1, True, 10**9),
        Probe(1024, True, 2 * 10**9),
        Probe(2**20, False, 70 * 10**9),
        Probe(500_000, True, 59 * 10**9),
        Probe(500_001, False, 78 * 10**9),  # over, and above it hi needs less
    ]
    check = next_step(grid, probes, limit)
    assert check.non_monotone and check.falls == ((500_001, 2**20),)
    assert check.how is How.CHECK and check.bracket.fits == 500_000
    # The roundest value of each stretch of offsets [4^k, 4^(k+1) - 1] above 500,001,
    # but the last one's, where hi was compiled (as round as any).
    assert check.values == (
        500_004, 500_016, 500_032, 500_224, 500_736, 503_808, 507_904, 524_288, 655_360,
    )  # fmt: skip
    verdicts = {v: v in (507_904, 524_288) for v in check.values}
    probes += [Probe(v, fits, (55 if fits else 61) * 10**9) for v, fits in verdicts.items()]
    # The top bracket moved up; above it the stretches at its own scale are checked first.
    above = next_step(grid, probes, limit)
    assert (above.bracket.fits, above.bracket.over) == (524_288, 655_360)
    assert above.how is How.CHECK and above.values == (786_432,)
    probes.append(Probe(786_432, False, 70 * 10**9))
    onward = next_step(grid, probes, limit)
    assert onward.how in (How.PREDICT, How.BISECT) and len(onward.values) == 1
    assert 524_288 < onward.values[0] < 655_360
    assert onward.checks == len(probes) - 5  # every probe planned once it fell


def pocketed(rng: random.Random) -> Peak:
    """An affine peak less `drop` over one stretch of values: a pocket below the limit, or
    a jump over it, where a compiler changes its mind."""
    base, slope = rng.randint(10**8, 10**10), rng.randint(10**3, 10**5)
    start = rng.randint(1, 2**20)
    span, drop = range(start, rng.randint(start, 2**20)), rng.randint(0, slope * 2**19)

    def peak(v: int) -> int:
        return base + slope * v - (drop if v in span else 0)

    return peak


def test_whatever_the_peak_the_answer_is_proved_by_its_neighbour() -> None:
    rng = random.Random(58)
    for _ in range(40):
        peak = pocketed(rng)
        limit = peak(rng.randint(1, 2**20))
        for grid in (Grid(1, 2**20), Grid(1024, 2**20, 1024)):
            found = search(grid, peak, limit)
            assert proved(grid, peak, limit, found.largest)


def test_the_step_says_which_probes_show_the_peak_falling_and_when() -> None:
    grid = Grid(1, 1000)
    probes = [Probe(1, True, 10), Probe(32, True, 320), Probe(600, False, 900)]
    probes.append(Probe(900, True, 800))
    step = next_step(grid, probes, 850)
    assert step.non_monotone and step.shown_after == 4
    assert step.falls == ((600, 900),)  # 900 fits above 600, which does not
    assert (step.bracket.fits, step.bracket.over) == (900, None)  # the top bracket
    monotone = next_step(grid, probes[:3], 850)
    assert not monotone.non_monotone and monotone.falls == () and monotone.shown_after is None
