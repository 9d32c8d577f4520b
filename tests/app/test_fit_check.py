"""What a fit search's probes say about the peak, and the round values its checks compile:
the roundest value of a stretch on any grid, the pairs that show a peak falling (a
refusal's rounded figure never counts), the round check just above an answer and the
stretches that check the rest of the range."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.queue.fit_check import Probe, check_points, falls, round_check, roundest, shown_after, twos
from app.queue.fit_plan import Grid


def test_roundness_is_the_power_of_two_that_divides_a_value() -> None:
    assert [twos(v) for v in (1, 2, 12, 558_080, 558_081, 2**20)] == [0, 1, 2, 10, 0, 20]
    assert twos(0) > twos(2**62)


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(0, 5000),
    step=st.integers(1, 3000),
    size=st.integers(1, 400),
    first=st.integers(0, 400),
    length=st.integers(0, 400),
)
def test_the_roundest_value_of_a_stretch_on_any_grid(
    lo: int, step: int, size: int, first: int, length: int
) -> None:
    grid = Grid(lo, lo + (size - 1) * step, step)
    last = first + length
    found = roundest(grid, first, last)
    inside = range(max(first, 0), min(last, size - 1) + 1)
    if not inside:
        assert found is None
        return
    best = max(inside, key=lambda i: (twos(grid.value(i)), i))
    assert found == best


def test_a_grid_of_odd_values_has_no_round_one() -> None:
    grid = Grid(1, 1 + 1024 * 99, 1024)  # 1, 1025, 2049, …: all odd
    assert roundest(grid, 3, 40) == 40


def test_a_peak_that_falls_is_shown_by_its_pairs() -> None:
    probes = [
        Probe(100, True, 50),
        Probe(200, False, 90),
        Probe(300, False, 70),  # needs less than 200
        Probe(400, True, 55),  # fits above 200 and 300
        Probe(500, False, 95),
    ]
    assert falls(probes) == [(200, 300), (200, 400)]
    assert shown_after(probes) == 3
    assert falls([p for p in probes if p.value not in {300, 400}]) == []


def test_a_refusal_s_figure_shows_no_fall_but_its_verdict_does() -> None:
    refused = [Probe(100, True, 50), Probe(200, False, 90, refused=True), Probe(300, False, 80)]
    assert falls(refused) == []  # 90 is libtpu's rounded figure, not a peak
    assert falls([*refused, Probe(400, True, 60)]) == [(200, 400)]


def test_the_round_check_looks_just_above_an_answer() -> None:
    fine = Grid(1, 2**20)

    def check(grid: Grid, over: int) -> int | None:
        found = round_check(grid, grid.index(over) or 0)
        return None if found is None else grid.value(found)

    assert check(fine, 421_885) == 421_888  # the next multiple of 1,024
    assert check(fine, 1_001) == 1_024  # of 128, at most a quarter of the value
    assert check(fine, 7_447) == 8_192
    assert check(fine, 152) == 160  # of 32
    assert check(fine, 7) is None and check(fine, 2**19) is None  # small, or round already
    assert check(Grid(1, 255), 250) is None  # 256 is past the range
    coarse = Grid(1024, 2**20, 1024)
    assert check(coarse, 559_104) is None  # every value is a multiple of 1,024
    assert round_check(coarse, coarse.size) is None


def test_the_rest_of_the_range_in_stretches_that_grow_fourfold() -> None:
    grid = Grid(0, 1000)
    assert check_points(grid, 0, set()) == [2, 8, 32, 128, 512]
    # A stretch that holds a value as round as its roundest is checked already.
    assert check_points(grid, 0, {8, 200}) == [2, 32, 128, 512]
    assert check_points(grid, 0, {9}) == [2, 8, 32, 128, 512]
    # An open bracket 100 wide is checked at its scale and coarser.
    assert check_points(grid, 0, set(), width=100) == [128, 512]
    assert check_points(grid, 1000, set()) == []
