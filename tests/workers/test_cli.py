"""`boundary run`: the readable report, --json, --ir and errors that name the field."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from workers.cli.run import run_command
from workers.protocol import BoundaryId, PathId, RunResult

SMALL = ["m=32", "n=32", "k=32", "--samples", "3"]


def test_report_shows_stages_stats_correctness_environment_and_hlo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_command(["matmul", *SMALL]) == 0
    out = capsys.readouterr().out
    for words in ("matmul on jax-cpu", "stages", "trace", "host-sync", "median", "rounds 3",
                  "correct   passed", "device    cpu", "jaxlib", "HLO", "YNNPACK"):  # fmt: skip
        assert words in out, words


def test_json_prints_one_run_result_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(["matmul", *SMALL, "--mode", "throughput", "--json"]) == 0
    out = capsys.readouterr().out
    run = RunResult.model_validate_json(out)
    assert run.params["m"] == 32 and run.job.measure.samples == 3
    assert run.measurements[0].boundary is BoundaryId.HOST_THROUGHPUT
    assert out.count("\n") == 1


def test_ir_prints_one_artifact(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run_command(["reduction", "rows=8", "cols=8", "--stages", "compile", "--ir", "stablehlo"])
        == 0
    )
    out = capsys.readouterr().out
    # StableHLO carries its source locations: `#loc` definitions may come before the module.
    assert re.search(r"^module @jit_reduce_sum", out, re.M) and "loc(" in out
    assert "stablehlo.reduce" in out
    assert run_command(["reduction", "rows=8", "cols=8", "--stages", "compile", "--ir", "ptx"]) == 1
    assert "no ptx artifact" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["matmul", "m=0"],
            "params.m: Input should be greater than or equal to 1 (allowed: 1 ≤ m ≤ 16384)",
        ),
        (["matmul", "m=big"], "params.m: Input should be a valid integer"),
        (["matmul", "dtype=float64"], "params.dtype"),
        (["matmul", "m"], "expected key=value"),
        (["conv"], "unknown workload"),
        (["matmul", "--path", "jax-tpu"], "path jax-tpu needs a tpu device; this process has: cpu"),
    ],
)
def test_bad_jobs_exit_non_zero_naming_the_problem(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(argv) == 2
    assert words in capsys.readouterr().err


def test_bad_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(["matmul", "--samples", "0"]) == 2
    assert "--samples" in capsys.readouterr().err
    assert run_command(["matmul", "--stages", "compile,link"]) == 2
    assert "'link' is no stage" in capsys.readouterr().err


def test_parameters_may_come_after_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse filled the parameters from the words before the first option only, and
    # refused the rest: "unrecognized arguments: n=32 k=24".
    assert run_command(["matmul", "m=32", "--samples", "3", "n=32", "--json", "k=24"]) == 0
    run = RunResult.model_validate_json(capsys.readouterr().out)
    assert (run.params["m"], run.params["n"], run.params["k"]) == (32, 32, 24)
    assert run.job.measure.samples == 3


def test_a_pallas_backend_after_the_path_reaches_the_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from workers.cli.run import build_job, parse_command_line

    argv = [
        "matmul",
        "dtype=bfloat16",
        "--path",
        "jax-gpu",
        "kernel=pallas",
        "pallas_backend=mosaic-gpu",
    ]
    job = build_job(parse_command_line(argv))
    assert job.path is PathId.JAX_GPU
    assert job.params == {"dtype": "bfloat16", "kernel": "pallas", "pallas_backend": "mosaic-gpu"}
    # Without a GPU here the run is refused for the path, not for the words' order.
    assert run_command(argv) == 2
    err = capsys.readouterr().err
    assert "needs a gpu device" in err and "unrecognized" not in err


def test_an_unknown_option_is_named_alone_and_a_parameter_given_twice_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_command(["matmul", "m=32", "--bogus", "n=32"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus\n" in err and "n=32" not in err
    assert run_command(["matmul", "m=32", "--samples", "3", "m=64"]) == 2
    assert "params.m: given twice" in capsys.readouterr().err


def test_settings_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOUNDARY_MAX_JOB_BYTES", "100")
    assert run_command(["matmul", *SMALL]) == 2
    assert "over this server's limit of 100 bytes" in capsys.readouterr().err
    monkeypatch.setenv("BOUNDARY_MAX_JOB_BYTES", "lots")
    assert run_command(["matmul", *SMALL]) == 2
    assert "BOUNDARY_MAX_JOB_BYTES" in capsys.readouterr().err


def test_invalid_run_exits_one_and_shows_no_speed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.measure.faults import perturbed

    with perturbed(1.0):
        assert run_command(["matmul", *SMALL]) == 1
    out = capsys.readouterr().out
    assert "INVALID RUN" in out and "FAILED" in out
    assert "median" not in out and "FLOP/s" not in out


def test_profile_writes_the_trace_beside_the_user(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_command(["matmul", *SMALL, "--profile"]) == 0
    out = capsys.readouterr().out
    (archive,) = tmp_path.glob("matmul-*.profile.tar.gz")
    assert archive.name in out and "not tracing, lowering, compiling" in out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.endswith(".xplane.pb") for n in names)
    assert any(n.endswith(".trace.json.gz") for n in names)


def test_measurement_flags_reach_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(["matmul", *SMALL, "--profile", "--json"]) == 0
    run = RunResult.model_validate_json(capsys.readouterr().out)
    assert run.job.measure.profile is True and run.job.measure.flush_l2 is False
    assert run.profile is not None and run.profile.data_b64


def test_a_gpu_targets_reports_are_not_called_an_empty_pipeline() -> None:
    # A b200:1 compile without --pipeline keeps XLA's fusion report and launch order;
    # the report used to call that "pipeline  0 dumped steps, 0 distinct modules".
    from workers.cli.printout import pipeline_line
    from workers.protocol import PipelineCapture

    reports = PipelineCapture(files={"thunk_sequence.txt": "t", "priority_fusion_dump.txt": "p"})
    line = pipeline_line(reports)
    assert line is not None and "dumped steps" not in line
    assert "priority_fusion_dump.txt, thunk_sequence.txt" in line
    assert pipeline_line(PipelineCapture()) is None  # what a server sends back: files apart
    assert pipeline_line(None) is None
    cut = pipeline_line(PipelineCapture(cut="XLA wrote no per-pass dump for this compile"))
    assert cut is not None and "no per-pass dump" in cut


def test_a_symbolic_dimension_takes_its_value_from_dim(capsys: pytest.CaptureFixture[str]) -> None:
    from workers.cli.run import UsageError, build_job, parse_command_line

    sha = "a" * 64
    argv = ["exported", f"artifact={sha}", "--dim", "b=64", "--dim", "s=128"]
    job = build_job(parse_command_line(argv))
    assert job.params == {"artifact": sha, "dims": {"b": 64, "s": 128}}
    for bad in (["--dim", "b"], ["--dim", "b=x"], ["--dim", "b=1", "--dim", "b=2"]):
        with pytest.raises(UsageError, match=r"--dim|params\.dims\.b: given twice"):
            build_job(parse_command_line(["exported", f"artifact={sha}", *bad]))


def test_the_fit_line_names_the_usable_bytes_with_the_published_hbm_beside_them() -> None:
    from workers.cli.printout import target_lines
    from workers.protocol import TargetMemory, TargetReport

    memory = TargetMemory(
        peak_bytes=17 * 10**9,
        generated_code_bytes=40_000,
        usable_bytes=16_909_336_064,
        usable_source="libtpu 0.0.42.1: the largest program it compiles for v5e:1x1 …",
        hbm_bytes=16 * 2**30,
        hbm_label="16 GB HBM2 per chip (Google's GB; 16 GiB)",
        source="tpu-v5e",
    )
    report = TargetReport(
        id="v5e:1x1", model="v5e", count=1, compiler="libtpu", deviceless=True, memory=memory
    )
    lines = target_lines(report)
    assert lines[1] == (
        "memory    does not fit by 90.7 MB: one device needs 17 GB of 16.9 GB usable "
        "(16,909,336,064 bytes); published 16 GB HBM2 per chip (Google's GB; 16 GiB) "
        "(17,179,869,184 bytes a device)"
    )
    assert lines[2].startswith("          usable: libtpu 0.0.42.1")
