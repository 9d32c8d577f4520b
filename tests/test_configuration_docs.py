"""docs/configuration.md names every variable Boundary reads, and each upper limit the
code holds a setting to: a variable a user cannot find, or a limit met only when start-up
refuses the value, is a hole in the manual."""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
NOT_SETTINGS = {
    "BOUNDARY_FRAMES": "a name in the sources an export sends, not a variable",
    "BOUNDARY_WORKER_PARENT": "set by `serve` for the workers it starts",
    "BOUNDARY_RUNNER_PARENT": "set by a worker for the runners it starts",
    "BOUNDARY_MOSAIC_GPU_CUDA_ROOT": "set by a worker for its Mosaic GPU compile child",
    "BOUNDARY_TEST_HOOKS": "the tests' own",
    "BOUNDARY_TEST_HANG_FILE": "the tests' own",
}


def rows() -> dict[str, str]:
    """Each variable the page's table names (its first cell may name several) → its rows
    (a variable the server and a worker both read has one of each)."""
    found: dict[str, str] = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `BOUNDARY_"):
            for name in re.findall(r"`(BOUNDARY_\w+)`", line.split(" | ")[0]):
                found[name] = found.get(name, "") + line + "\n"
    return found


def read_by_the_code() -> set[str]:
    """Every BOUNDARY_ name the server and workers spell out, and BOUNDARY_<TOOL> for each
    CUDA tool they look for (`find_tool`)."""
    names: set[str] = set()
    for path in [*(ROOT / "app").rglob("*.py"), *(ROOT / "workers").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"\"(BOUNDARY_[A-Z0-9_]+)\"", text))
        names.update(f"BOUNDARY_{t.upper()}" for t in re.findall(r"find_tool\(\"(\w+)\"\)", text))
    return names


def test_every_setting_is_listed_with_the_most_it_may_be() -> None:
    listed = rows()
    for name, field in Settings.model_fields.items():
        row = listed.get(f"BOUNDARY_{name}")
        assert row is not None, f"BOUNDARY_{name} is not in {PAGE.name}"
        most = [m.le for m in field.metadata if getattr(m, "le", None) is not None]
        for limit in most:
            assert f"at most {limit:g}" in row, f"BOUNDARY_{name}'s row omits its limit {limit}"


def test_every_variable_the_code_reads_is_listed() -> None:
    code, listed = read_by_the_code(), rows()
    assert set(NOT_SETTINGS) <= code, "a name kept out of the page is no longer in the code"
    missing = sorted(code - set(NOT_SETTINGS) - set(listed))
    assert missing == [], f"read by the code, not in {PAGE.name}: {missing}"
