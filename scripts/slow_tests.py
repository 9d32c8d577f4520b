"""Writes tests/slow_tests.txt, the tests that `./scripts/test --quick` leaves out for their
time, and tests/file_times.txt, how long each test file took, from the JUnit XML of a full
run.

    ./scripts/test --junitxml=/tmp/full.xml
    .venv/bin/python scripts/slow_tests.py /tmp/full.xml [--over 3]

A test is slow when it took more than `--over` seconds (setup, call and teardown together)
in that full, parallel run. Those are the ones that compile for a TPU or GPU target without
the hardware, export a model, start processes or build a virtual environment; the list is
measured rather than guessed, and a test can still carry `@pytest.mark.slow` itself.
tests/conftest.py marks each listed test `slow` at collection, and hands the full run's
files to its processes longest first (by tests/file_times.txt), so that no long file starts
last while the other processes have nothing left to do.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "slow_tests.txt"
FILE_TIMES = ROOT / "tests" / "file_times.txt"
HEADER = (
    "# Tests that ./scripts/test --quick leaves out: over {over:g} s in a full parallel run.\n"
    "# Written by scripts/slow_tests.py from that run's JUnit XML; one pytest node id a line.\n"
)
FILE_TIMES_HEADER = (
    "# Each test file's seconds in a full parallel run, longest first: the full run hands\n"
    "# files out in this order. Written by scripts/slow_tests.py; seconds, a tab, the file.\n"
)


def node_id(case: ET.Element) -> str:
    """The pytest node id of a JUnit test case (`tests.app.test_x` + name)."""
    return case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")


def slow_ids(junit: Path, over: float) -> list[str]:
    cases = ET.parse(junit).getroot().iter("testcase")
    # The browser's tests are never in the quick tier: no need to list them.
    ids = {node_id(c) for c in cases if float(c.get("time") or 0) > over}
    return sorted(i for i in ids if not i.startswith("tests/browser/"))


def file_times(junit: Path) -> dict[str, float]:
    """Each test file's seconds in the run (its tests' setup, call and teardown), longest
    first."""
    times: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = node_id(case).split("::", 1)[0]
        times[file] = times.get(file, 0.0) + float(case.get("time") or 0)
    return dict(sorted(times.items(), key=lambda item: -item[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="the JUnit XML of a full run")
    parser.add_argument("--over", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    ids = slow_ids(args.junit, args.over)
    LIST.write_text(HEADER.format(over=args.over) + "".join(i + "\n" for i in ids))
    print(f"{len(ids)} slow tests written to {LIST.relative_to(ROOT)}")
    times = file_times(args.junit)
    FILE_TIMES.write_text(
        FILE_TIMES_HEADER + "".join(f"{seconds:.1f}\t{file}\n" for file, seconds in times.items())
    )
    print(f"{len(times)} test files' times written to {FILE_TIMES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
