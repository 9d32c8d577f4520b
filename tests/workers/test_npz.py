"""workers.catalog.npz against crafted archives: what NumPy's header reader lets through is
refused, naming the member and the dimension; real archives from np.savez pass. And the
worker reads every archive through it again before np.load, whatever the server let by."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from workers.catalog import CatalogError
from workers.catalog.npz import NpzError, read_npz

MiB = 1024 * 1024


def npy(header: str, data: bytes = b"", version: int = 1) -> bytes:
    """An .npy member with `header` as its dict literal, padded as numpy pads it."""
    text = header.encode("latin-1")
    width = 2 if version == 1 else 4
    pad = (-(6 + 2 + width + len(text) + 1)) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY" + bytes([version, 0]) + len(text).to_bytes(width, "little") + text + data


def archive(members: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=method)
    buffer.seek(0)
    return buffer


def header(descr: str, shape: tuple[int, ...] | str) -> str:
    return f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"


def refused(buffer: io.BytesIO, cap: int = 16 * MiB) -> str:
    with pytest.raises(NpzError) as caught:
        read_npz(buffer, cap)
    return str(caught.value)


def test_real_archives_pass_with_their_shapes() -> None:
    for save in (np.savez, np.savez_compressed):
        buffer = io.BytesIO()
        save(buffer, arg0=np.ones((3, 4), np.float32), out0=np.zeros(5, np.float64))
        buffer.seek(0)
        arrays = read_npz(buffer, 16 * MiB)
        assert [a.text() for a in arrays] == ["arg0: float32[3,4]", "out0: float64[5]"]
        assert [a.nbytes for a in arrays] == [48, 40]


def test_numpy_accepts_a_negative_dimension_and_we_refuse_it() -> None:
    member = npy(header("<f4", (-1073741824,)))
    shape, _, _ = np.lib.format.read_array_header_1_0(io.BytesIO(member[8:]))
    assert shape == (-1073741824,)  # the finding: numpy's own check lets it through
    small = npy(header("<f4", (2,)), b"\0" * 8)
    message = refused(archive([("arg0.npy", small), ("arg1.npy", member)]))
    assert message == "arg1: dimension 0 is -1,073,741,824, and a size cannot be negative"


def test_a_size_that_overflows_names_its_dimension() -> None:
    member = npy(header("<f4", (2**32, 2**32)))
    message = refused(archive([("arg0.npy", member)]), cap=2**80)
    assert message == (
        "arg0: dimension 1 (4,294,967,296) makes the array's size overflow (over 2**63 - 1 bytes)"
    )


def test_a_size_over_the_cap_names_its_dimension() -> None:
    member = npy(header("<f4", (1024, 1024, 8)))
    message = refused(archive([("arg0.npy", member)]), cap=16 * MiB)
    assert message == "arg0: dimension 2 (8) makes the array over 16,777,216 bytes"


def test_arrays_that_fit_one_by_one_are_capped_together() -> None:
    data = b"\0" * (8 * MiB)
    member = npy(header("<f4", (2 * MiB,)), data)
    message = refused(archive([("arg0.npy", member), ("arg1.npy", member), ("arg2.npy", member)]))
    assert message.startswith("the arrays declare more than 16,777,216 bytes in all")
    assert "arg2" in message


@pytest.mark.parametrize(
    "name",
    [
        *("arg0.npy\n", "arg0.npy\r", "../arg0.npy", "a/../arg0.npy", ".arg0.npy"),
        *("/arg0.npy", "a//b.npy", "arg0.npz", "arg0", "a b.npy", "arg0.npy/x"),
    ],
)
def test_member_names_are_matched_whole(name: str) -> None:
    member = npy(header("<f4", (2,)), b"\0" * 8)
    message = refused(archive([(name, member)]))
    assert "an .npz holds only arrays named arg0, arg1" in message
    assert repr(name) in message


def test_a_header_that_declares_more_than_the_member_holds_is_refused() -> None:
    member = npy(header("<f4", (1000,)), b"\0" * 40)
    assert refused(archive([("arg0.npy", member)])) == (
        "arg0 declares 4,000 bytes (float32[1000]) but holds 40"
    )


def test_a_compressed_bomb_is_refused_from_its_header_without_inflating_it() -> None:
    member = npy(header("<f4", (16 * MiB,)), b"\0" * (64 * MiB))
    buffer = archive([("arg0.npy", member)], zipfile.ZIP_DEFLATED)
    assert len(buffer.getvalue()) < MiB  # 64 MiB of zeros deflates to about 64 KiB
    started = time.perf_counter()
    message = refused(buffer)
    assert time.perf_counter() - started < 0.5
    assert message == "arg0: dimension 0 (16,777,216) makes the array over 16,777,216 bytes"


@pytest.mark.parametrize(
    ("descr", "shape", "expected"),
    [
        ("|O", (2,), "holds '|O' values; only plain numbers are allowed"),
        ("<U4", (2,), "holds '<U4' values"),
        ("<f4", (True, 2), "dimension 0 is not a whole number"),
        ("<f4", "(2.0,)", "dimension 0 is not a whole number"),
        ("<f4", "[2]", "its shape is not a tuple"),
        ("<f4", "(" * 500 + ")" * 500, "its header is not an .npy header"),
    ],
)
def test_odd_headers_are_refused_in_plain_words(
    descr: str, shape: tuple[int, ...] | str, expected: str
) -> None:
    member = npy(header(descr, shape))
    assert expected in refused(archive([("arg0.npy", member)]))


def test_an_overlong_header_and_a_duplicate_member_are_refused() -> None:
    long = npy(header("<f4", (2,)) + " " * 20_000, b"\0" * 8)
    assert "header is over 10,000 bytes" in refused(archive([("arg0.npy", long)]))
    good = npy(header("<f4", (2,)), b"\0" * 8)
    with pytest.warns(UserWarning, match="Duplicate name"):
        twice = archive([("arg0.npy", good), ("arg0.npy", good)])
    assert refused(twice) == "'arg0.npy' is in the archive twice"


def test_something_that_is_no_zip_is_refused() -> None:
    assert refused(io.BytesIO(b"hello" * 100)) == "not an .npz archive (it is no zip file)"


def test_the_worker_refuses_a_negative_dimension_before_loading(tmp_path: Path) -> None:
    # Before: numpy's check let `arg1` declare -1073741824 and cancel a 4 GiB `arg0` in
    # the sum of sizes; a runner reached 4.6 GB. The worker checks again itself: the
    # server it trusts may be older than this check.
    from tests.workers.test_contract_findings import _double, exported_job
    from workers.files import FileCache
    from workers.run.engine import run_job

    files = FileCache(tmp_path)
    bad = archive(
        [
            ("arg0.npy", npy(header("<f4", (8, 4)), b"\0" * 128)),
            ("arg1.npy", npy(header("<f4", (-1073741824,)))),
        ]
    ).getvalue()
    job = exported_job(files, _double, (8, 4), inputs=files.put(bad))
    with pytest.raises(CatalogError) as caught:
        run_job(job, files_dir=tmp_path)
    assert str(caught.value) == (
        "params.inputs: arg1: dimension 0 is -1,073,741,824, and a size cannot be negative"
    )
    assert caught.value.field == "params.inputs"
