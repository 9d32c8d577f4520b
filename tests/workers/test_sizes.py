"""Byte sizes are read and written in one place: a setting's bytes, libtpu's "31.25G", and
the "3.22 GB" every page and command shows."""

from __future__ import annotations

import pytest

from workers.protocol.sizes import byte_text, env_bytes, parse_bytes


def test_a_size_is_a_whole_number_or_one_of_libtpus_binary_multiples() -> None:
    assert parse_bytes(" 2147483648 ") == 2**31
    assert parse_bytes("31.25G", binary_multiples=True) == round(31.25 * 2**30)
    assert parse_bytes("6.75M", binary_multiples=True) == round(6.75 * 2**20)
    for wrong in ("2GiB", "1e9", "-5", "31.25G", ""):
        with pytest.raises(ValueError, match="expected a number of bytes"):
            parse_bytes(wrong)
    with pytest.raises(ValueError, match="one with K, M, G or T"):
        parse_bytes("2 GB", binary_multiples=True)


def test_a_setting_names_itself_when_its_bytes_are_unreadable() -> None:
    assert env_bytes({"X_BYTES": "1024"}, "X_BYTES") == 1024
    assert env_bytes({"X_BYTES": "  "}, "X_BYTES") is None and env_bytes({}, "X_BYTES") is None
    for wrong in ("2GiB", "0", "-1", "1.5"):
        with pytest.raises(
            ValueError, match=f"X_BYTES: expected a positive number of bytes, got {wrong!r}"
        ):
            env_bytes({"X_BYTES": wrong}, "X_BYTES")


def test_sizes_read_in_decimal_units_with_three_figures() -> None:
    assert byte_text(3_221_225_472) == "3.22 GB"
    assert byte_text(3_221_225_472, exact=True) == "3.22 GB (3,221,225,472 bytes)"
    assert byte_text(16_400) == "16.4 kB" and byte_text(2 * 10**12) == "2 TB"
    assert byte_text(512) == "512 bytes" and byte_text(0) == "0 bytes"
    assert byte_text(None) == "—" and byte_text(None, unknown="unknown") == "unknown"
