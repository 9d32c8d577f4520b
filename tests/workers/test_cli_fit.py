"""`boundary fit` as a person types it: the command line read into a search (the searched
dimension, the range, other parameters and fixed symbolic dimensions), and against a real
`boundary serve` with its one local worker, a catalog workload and an uploaded file, each
followed to its table and page; a bad search exits 2 naming the field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.app.fit_fakes import symbolic_artifact
from tests.servers import wait_for_target
from workers.cli.fit import build_parser, progress_line, search_body, table
from workers.cli.run import UsageError

ROOT = Path(__file__).resolve().parents[2]
GATHER = ["gather", "width=4096", "count=1024", "--dim", "rows", "--range", "1:16777216"]


def boundary_fit(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "app.cli", "fit", *args]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_command_line_reads_as_a_search() -> None:
    words = ["model.jaxexport", "--dim", "b", "--dim", "s=128", "--range", "8:4096"]
    words += ["--step", "8", "--target", "v6e:1x1", "--target", "h100:1", "--server", "unix:u"]
    args = build_parser().parse_intermixed_args([*words, "seed=3"])
    body = search_body(args, "a" * 64)
    assert body == {
        "artifact": "a" * 64,
        "params": {"seed": 3, "dims": {"s": 128}},
        "dimension": "b",
        "range": [8, 4096],
        "step": 8,
        "targets": ["v6e:1x1", "h100:1"],
    }
    workload = search_body(
        build_parser().parse_intermixed_args([*GATHER, "--target", "b200:1", "--server", "unix:u"]),
        None,
    )
    assert workload["workload"] == "gather" and workload["params"] == {"width": 4096, "count": 1024}
    for wrong, says in ((["--dim", "b", "--dim", "c"], "--dim"), (["--range", "8-16"], "--range")):
        line = [
            "w",
            "--dim",
            "b",
            "--range",
            "1:2",
            "--target",
            "h100:1",
            "--server",
            "unix:u",
            *wrong,
        ]
        with pytest.raises(UsageError, match=says):
            search_body(build_parser().parse_intermixed_args(line), None)


def test_progress_says_compiles_bracket_and_what_compiles_now() -> None:
    target = {
        "target": "h100:1",
        "status": "searching",
        "probes_done": 3,
        "bracket": {"fits": 256, "over": 4096},
        "probes": [{"value": 300, "status": "running"}],
    }
    assert progress_line(target) == (
        "[h100:1] searching: 3 compiles · 256 fits · 4,096 does not · compiling 300"
    )
    checking = {**target, "probes_done": 9, "checks_done": 4, "non_monotone": True}
    assert progress_line(checking).startswith("[h100:1] searching: 5 compiles + 4 to check")
    assert progress_line(checking).endswith("not monotone: checking the rest of the range")


def _found(**more: object) -> dict[str, object]:
    return {
        "target": "h100:1",
        "status": "found",
        "reason": None,
        "rule": "usable",
        "usable_bytes": 60_000_000_000,
        "criterion": "fits when memory_analysis() peak ≤ 0.75 × 80 GB = 60,000,000,000 bytes",
        "largest_fitting": 558_080,
        "largest_is_hi": False,
        "peak_bytes_at_largest": 59_991_790_036,
        "value_above": 558_081,
        "peak_bytes_above": 78_283_251_220,
        "refused_above": None,
        "non_monotone": False,
        "non_monotone_probes": [],
        "probes_done": 6,
        "checks_done": 1,
        **more,
    }


def test_the_table_proves_each_answer_in_exact_bytes() -> None:
    fit = {"dimension": "b", "range": [1, 1_048_576], "step": 1, "targets": [_found()]}
    assert table(fit) == [
        "largest b that fits, in 1 … 1,048,576 (step 1):",
        "  h100:1    558,080",
        "              558,080: fits: peak 59,991,790,036 bytes ≤ 60,000,000,000 usable",
        "              558,081: does not fit: peak 78,283,251,220 bytes > 60,000,000,000 usable",
        "            fits when memory_analysis() peak ≤ 0.75 × 80 GB = 60,000,000,000 bytes; "
        "5 compiles + 1 to check",
    ]
    falls = _found(non_monotone=True, non_monotone_probes=[[421_885, 421_888]])
    lines = table({**fit, "targets": [falls]})
    assert lines[4] == (
        "            not monotone: the peak falls as b grows (421,885 → 421,888); the search "
        "checked the rest of the range, and a value it did not compile may fit above"
    )
    tpu = _found(
        target="v6e:1x1",
        rule="libtpu",
        usable_bytes=33_550_237_184,
        peak_bytes_at_largest=33_537_034_272,
        peak_bytes_above=33_555_640_000,
        refused_above="Used 31.25G of 31.25G hbm. Exceeded hbm capacity by 5.0M",
    )
    lines = table({**fit, "targets": [tpu]})
    assert lines[2].endswith("558,080: fits: libtpu compiled it, peak 33,537,034,272 bytes")
    assert lines[3].endswith(
        "558,081: does not fit: refused by libtpu (it needs at least 33,555,640,000 bytes)"
    )
    top = _found(largest_is_hi=True, largest_fitting=1_048_576, value_above=None)
    assert table({**fit, "targets": [top]})[1].endswith(
        "1,048,576, the top of the range (a larger value may fit too)"
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_a_search_from_the_command_line_prints_its_table_and_page(
    bench_server: str, tmp_path: Path
) -> None:
    wait_for_target(bench_server, "h100:1")
    done = boundary_fit(*GATHER, "--target", "h100:1", "--server", bench_server)
    assert done.returncode == 0, done.stderr
    proof = (
        r"h100:1\s+3,661,085\n\s+3,661,085: fits: peak [\d,]+ bytes ≤ 60,000,000,000 usable\n"
        r"\s+3,661,086: does not fit: peak [\d,]+ bytes > 60,000,000,000 usable\n"
    )
    assert re.search(proof, done.stdout), done.stdout
    assert "4 compiles" in done.stdout and "[h100:1] found: 4 compiles" in done.stderr
    page = re.search(r"fit page  (\S+/fits/[0-9a-f]{16})$", done.stdout, re.M)
    assert page is not None, done.stdout

    artifact = tmp_path / "forward.jaxexport"
    artifact.write_bytes(symbolic_artifact())
    args = ["--dim", "b", "--range", "8:65536", "--step", "8", "--target", "h100:1"]
    uploaded = boundary_fit(str(artifact), *args, "--server", bench_server)
    assert uploaded.returncode == 0, uploaded.stderr
    assert "uploaded forward.jaxexport" in uploaded.stderr
    top = r"h100:1\s+65,536, the top of the range .*\n\s+65,536: fits: peak [\d,]+ bytes ≤"
    assert re.search(top, uploaded.stdout), uploaded.stdout

    refused = boundary_fit(
        "gather",
        "--dim",
        "rows",
        "--range",
        "1:99999999",
        "--target",
        "h100:1",
        "--server",
        bench_server,
    )
    assert refused.returncode == 2 and "range: " in refused.stderr and "rows" in refused.stderr
