"""The tool outputs a process keeps: found by what produced them, bounded in size."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.cuda.listings import Listings


def test_outputs_are_found_by_command_and_input_alone() -> None:
    kept = Listings()
    key = Listings.key("cuobjdump", "-sass", b"\x7fELF cubin")
    kept.put(key, ("listing",))
    assert kept.get(Listings.key("cuobjdump", "-sass", b"\x7fELF cubin")) == ("listing",)
    assert kept.get(Listings.key("cuobjdump", "-sass", b"\x7fELF other")) is None
    # Parts are kept apart: moving a byte from one part to the next is another key.
    assert Listings.key("ab", "c") != Listings.key("a", "bc")


def test_the_least_recently_read_go_first_and_oversize_is_not_kept() -> None:
    kept = Listings(limit=10)
    kept.put("a", ("aaaa",))
    kept.put("b", ("bbbb",))
    assert kept.get("a") == ("aaaa",)  # read: now the most recent
    kept.put("c", ("cc", "cc"))  # 12 characters in all: the least recent, b, goes
    assert kept.get("b") is None and kept.get("a") and kept.get("c")
    kept.put("a", ("a",))  # replacing an entry counts its new size, not both
    kept.put("d", ("dddd",))
    assert kept.get("a") == ("a",) and kept.get("c") and kept.get("d")
    kept.put("e", ("e" * 11,))  # larger than the whole limit: never kept, nothing evicted
    assert kept.get("e") is None and kept.get("d")


def test_made_keeps_what_it_made_and_never_a_failure() -> None:
    kept, calls = Listings(), []

    def make() -> tuple[str, ...]:
        calls.append(1)
        return ("listing",)

    def fail() -> tuple[str, ...]:
        calls.append(1)
        raise RuntimeError("the tool refused")

    assert kept.made("k", make) == kept.made("k", make) == ("listing",)
    assert len(calls) == 1
    for _ in range(2):
        with pytest.raises(RuntimeError, match="the tool refused"):  # passed through
            kept.made("bad", fail)
    assert len(calls) == 3 and kept.get("bad") is None


def test_a_tool_is_its_path_and_the_files_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NVDISASM_PATH", raising=False)
    cuobjdump, nvdisasm = tmp_path / "cuobjdump", tmp_path / "nvdisasm"
    for tool in (cuobjdump, nvdisasm):
        tool.write_text("#!/bin/sh\n")
    first = Listings.disassembler(str(cuobjdump))
    assert Listings.disassembler(str(cuobjdump)) == first  # nothing changed: one key
    nvdisasm.write_text("#!/bin/sh\n# upgraded in place\n")  # the tool it starts, alone
    second = Listings.disassembler(str(cuobjdump))
    assert second != first
    cuobjdump.write_text("#!/bin/sh\n# upgraded in place\n")
    assert Listings.disassembler(str(cuobjdump)) not in (first, second)
    third = Listings.disassembler(str(cuobjdump))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "nvdisasm").write_text("#!/bin/sh\n")
    monkeypatch.setenv("NVDISASM_PATH", str(elsewhere))  # cuobjdump starts that one instead
    assert Listings.disassembler(str(cuobjdump)) != third
    missing = str(tmp_path / "nothing-here")
    assert Listings.tool(missing) == missing  # no file: the path stands for itself
