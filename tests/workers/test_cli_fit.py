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
from workers.cli.fit import build_parser, progress_line, search_body
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


@pytest.mark.e2e
@pytest.mark.slow
def test_a_search_from_the_command_line_prints_its_table_and_page(
    bench_server: str, tmp_path: Path
) -> None:
    wait_for_target(bench_server, "h100:1")
    done = boundary_fit(*GATHER, "--target", "h100:1", "--server", bench_server)
    assert done.returncode == 0, done.stderr
    assert re.search(r"h100:1\s+3,661,085 \(peak 60 GB\); 3,661,086: 60 GB", done.stdout)
    assert "4 compiles" in done.stdout and "[h100:1] found: 4 compiles" in done.stderr
    page = re.search(r"fit page  (\S+/fits/[0-9a-f]{16})$", done.stdout, re.M)
    assert page is not None, done.stdout

    artifact = tmp_path / "forward.jaxexport"
    artifact.write_bytes(symbolic_artifact())
    args = ["--dim", "b", "--range", "8:65536", "--step", "8", "--target", "h100:1"]
    uploaded = boundary_fit(str(artifact), *args, "--server", bench_server)
    assert uploaded.returncode == 0, uploaded.stderr
    assert "uploaded forward.jaxexport" in uploaded.stderr
    assert re.search(r"h100:1\s+65,536 \(peak [\d.]+ MB\), the top of the range", uploaded.stdout)

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
