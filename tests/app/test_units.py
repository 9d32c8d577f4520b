"""Durations as the pages write them: a unit a reader compares at a glance, and a time of a
few nanoseconds on a chip never written as zero."""

from __future__ import annotations

import pytest

from app.web.units import format_seconds


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (2.5, "2.500 s"),
        (0.00123, "1.230 ms"),
        (10.09e-6, "10.1 µs"),
        (1.17e-6, "1.2 µs"),
        (13.75e-9, "13.8 ns"),  # an asynchronous copy's start on the TPU v5e
        (3.75e-9, "3.75 ns"),
        (0.0, "0.0 µs"),
    ],
)
def test_a_duration_reads_in_a_unit_that_shows_it(seconds: float, written: str) -> None:
    assert format_seconds(seconds) == written
