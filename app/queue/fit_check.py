"""What a fit search's probes say about the shape of the peak, and the values it compiles
to check an answer: the round check, and the check of the rest of the range.

- **A peak that falls.** A search assumes that a larger value needs at least as much
  memory. Its probes can show otherwise (`falls`): a value above another with a smaller
  peak (each the compile's own `memory_analysis()` figure), or a value that fits above
  one that does not. Compilers do this: XLA pads and lays out a batch of 558,081 rows
  differently from one of 558,080, and can need 30 % more memory for it; it
  rematerializes near its memory limit, so a larger program can need less.
- **Round values.** A value's roundness is how many times 2 divides it (558,080 =
  2^10 × 545 is rounder than 558,081). Tiles and padding make round values the ones
  whose peaks lie on the program's own line, and the values a search on a coarser grid
  compiles (every value of the step-1024 grid from 1024 is a multiple of 1024), so the
  checks compile round values first (`roundest`).
- **The round check.** Once a search has proved a boundary on a fine grid, it compiles
  the next multiple of 1,024 above it (`round_check`): when that one fits, the peak is
  not monotone, and the search goes on above.
- **The rest of the range.** When the probes show a peak that falls, the first proved
  boundary is not taken for the largest: the search compiles a value in each stretch of
  the range above it, stretches that grow fourfold (`check_points`), the roundest of
  each stretch, and searches on above any that fits.

Pure functions of grid indices and probes, like the planner that uses them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

ROUND = 1024
"""The round check compiles the next multiple of 1,024 above the value that did not fit:
a compiler's tiles and padding are smaller (XLA's TPU lanes are 128 wide), and a search
over every 1,024th value compiles such multiples only."""
SNAP_SHARE = 256
"""Once the peak is shown not monotone, a value the search aims at gives way to the
roundest within 1/256 (0.4 %) below it."""
GROWTH = 4
"""The stretches that check the rest of the range grow fourfold: about 10 over a million
values."""
MAX_PAIRS = 8
"""The pairs of probes a search lists as showing a peak that falls."""


class Grid(Protocol):
    """The grid a search compiles on (app.queue.fit_plan.Grid)."""

    def index(self, value: int) -> int | None: ...

    @property
    def lo(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def size(self) -> int: ...

    def value(self, index: int) -> int: ...


@dataclass(frozen=True)
class Probe:
    """One finished compile: its value, whether it fits, its peak when known, and whether
    that peak is the figure of a refusal (libtpu's, rounded: a bound, not a peak)."""

    value: int
    fits: bool
    peak_bytes: int | None = None
    refused: bool = False


def twos(value: int) -> int:
    """How many times 2 divides `value` (0 is divisible by any power of 2)."""
    return 64 if value == 0 else (value & -value).bit_length() - 1


def roundest(grid: Grid, first: int, last: int) -> int | None:
    """The grid index in [first, last] whose value is the roundest (ties: the largest),
    or None when the stretch is empty. The values lo + i × step divisible by 2^k form
    an arithmetic progression in i, solved for each k from the largest down."""
    first, last = max(first, 0), min(last, grid.size - 1)
    if first > last:
        return None
    for k in range(64, -1, -1):
        modulus = 1 << k
        common = math.gcd(grid.step, modulus)
        if grid.lo % common:
            continue
        period = modulus // common
        start = 0
        if period > 1:
            start = (-(grid.lo // common) * pow(grid.step // common, -1, period)) % period
        index = last - (last - start) % period
        if index >= first:
            return index
    return last  # not reached: every index is a multiple of 2^0


def _falls(a: Probe, b: Probe) -> bool:
    """Whether `b`, at a larger value than `a`, shows a peak that falls: it fits where
    `a` does not, or its peak (a compile's own, not a refusal's figure) is below a's."""
    if b.fits and not a.fits:
        return True
    if a.peak_bytes is None or b.peak_bytes is None or a.refused or b.refused:
        return False
    return b.peak_bytes < a.peak_bytes


def falls(probes: Sequence[Probe]) -> list[tuple[int, int]]:
    """Pairs of values (a, b), a < b, where the probes show a peak that falls as the
    value grows: for each such b, in b's order, the a below it with the largest peak
    (a value that does not fit, first, when b fits); at most MAX_PAIRS."""
    ordered = sorted(probes, key=lambda p: p.value)
    pairs: list[tuple[int, int]] = []
    for j, b in enumerate(ordered):
        below = [a for a in ordered[:j] if _falls(a, b)]
        if below:
            worst = max(below, key=lambda a: (not a.fits, a.peak_bytes or 0))
            pairs.append((worst.value, b.value))
    return pairs[:MAX_PAIRS]


def shown_after(probes: Sequence[Probe]) -> int | None:
    """How many probes, in the order they were planned, it took to show a peak that falls
    (None: they do not show one)."""
    for n, latest in enumerate(probes, start=1):
        for earlier in probes[: n - 1]:
            low, high = sorted((earlier, latest), key=lambda p: p.value)
            if low.value != high.value and _falls(low, high):
                return n
    return None


def round_check(grid: Grid, over: int) -> int | None:
    """The index of the round check above a proved boundary (`over` does not fit, and the
    value before it does; in grid indices): the next multiple of ROUND above the value at
    `over` (of the largest power of two at most a quarter of that value, where that is
    less), when that value is no such multiple itself and the next one is on the grid;
    None otherwise."""
    if over >= grid.size:
        return None
    value = grid.value(over)
    unit = min(ROUND, 1 << max(0, (value // 4).bit_length() - 1))
    if unit < 2 or value % unit == 0:
        return None
    index = grid.index((value // unit + 1) * unit)
    return index if index is not None and index < grid.size else None


def check_points(grid: Grid, over: int, probed: set[int], *, width: int = 1) -> list[int]:
    """The indices that check the rest of the range above `over`: in each stretch of
    offsets [GROWTH^k, GROWTH^(k+1) - 1] above it (k = 0, 1, …, to the grid's end), at
    least `width` long (a bracket still open is checked at its own scale and coarser),
    its roundest value, unless a value as round in it was compiled already."""
    points = []
    offset = 1
    while over + offset < grid.size:
        first, last = over + offset, min(over + offset * GROWTH - 1, grid.size - 1)
        offset *= GROWTH
        if last - first + 1 < width and last < grid.size - 1:
            continue
        index = roundest(grid, first, last)
        if index is None:
            continue
        roundness = twos(grid.value(index))
        if not any(first <= i <= last and twos(grid.value(i)) >= roundness for i in probed):
            points.append(index)
    return points


def checks_made(grid: Grid, probes: Sequence[Probe], seeds: int, shown: int | None) -> int:
    """How many of `probes` (in the order planned, `seeds` of them first) were planned to
    check an answer: after those before them had closed the top bracket, or shown the
    peak not monotone (`shown` of them). One pass, keeping the top bracket of each
    prefix: the largest fitting index and the sorted indices that do not fit."""
    fit, over = -1, list[int]()
    made = 0
    for n, probe in enumerate(probes):
        fell = shown is not None and n >= shown
        if n >= seeds and (fell or _closed(fit, over, grid.size)):
            made += 1
        index = grid.index(probe.value)
        if index is None:
            continue
        if probe.fits:
            fit = max(fit, index)
        else:
            bisect.insort(over, index)
    return made


def _closed(fit: int, over: list[int], size: int) -> bool:
    """Whether the smallest non-fitting index above `fit` is the one after it (or `fit`
    is the grid's last)."""
    at = bisect.bisect_right(over, fit)
    return fit == size - 1 or (at < len(over) and over[at] == fit + 1)


def snapped(grid: Grid, fit: int, index: int) -> int:
    """The roundest index in the 1/SNAP_SHARE of the value below `index` (and above the
    largest that fits, `fit`): near what a line aims at, and a value a coarser grid would
    compile."""
    reach = grid.value(index) // SNAP_SHARE // grid.step
    found = roundest(grid, max(fit + 1, index - reach), index)
    return index if found is None else found


def round_halfway(grid: Grid, fit: int, over: int, index: int) -> int:
    """`index` (a halving of the stretch between `fit` and `over`, or a doubling of `fit`
    while nothing above it failed) moved to the roundest value of the stretch's middle
    half (of the 1/SNAP_SHARE below a doubling): it still takes a quarter of the
    stretch at least, and round values tell more (see above)."""
    if over == grid.size:
        return snapped(grid, fit, index)
    quarter = (over - fit - 1) // 4
    found = roundest(grid, fit + 1 + quarter, over - 1 - quarter)
    return index if found is None else found
