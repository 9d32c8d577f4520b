"""XLA compiler options per job: the allow-list's refusals, what the three compilers really
do with each option on the lists, and that every compile of a job gets them.

The checker tests need no jax. The rest compile for real (XLA:CPU, and the CUDA plugin and
libtpu without the hardware); the lists' extreme values are compiled in a child process
per compiler, so an option that aborts the process is named rather than killing pytest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.pages.compiler_options import EXAMPLES, Example
from workers.cli.run import run_command
from workers.protocol import CachePolicy, JobSpec, RunResult
from workers.protocol.compiler_options import (
    MAX_OPTIONS,
    OptionError,
    as_arguments,
    as_text,
    check_options,
    compiler_for,
)
from workers.protocol.option_lists import ALLOWED, Compiler

ROOT = Path(__file__).resolve().parents[2]


def refusal(given: object, compiler: Compiler = Compiler.XLA_GPU) -> str:
    with pytest.raises(OptionError) as caught:
        check_options(given, compiler)  # type: ignore[arg-type]
    return caught.value.message


# --- the check (no jax) ---------------------------------------------------------------


def test_text_becomes_the_type_each_compiler_takes() -> None:
    checked = check_options(
        ["xla_gpu_enable_triton_gemm=false", "xla_gpu_autotune_level=0"], Compiler.XLA_GPU
    )
    # XLA refuses the text "false" for a bool; the check hands it a bool, sorted by name.
    assert checked == {"xla_gpu_autotune_level": 0, "xla_gpu_enable_triton_gemm": False}
    assert list(checked) == sorted(checked)
    assert check_options(["xla_cpu_prefer_vector_width=256"], Compiler.XLA_CPU) == {
        "xla_cpu_prefer_vector_width": 256
    }
    # libtpu's three-way flags take text.
    assert check_options({"xla_msa_enable": False}, Compiler.LIBTPU) == {"xla_msa_enable": "false"}


def test_a_checked_job_reads_back_unchanged() -> None:
    """A stored job is read again by the worker and the server: the check is idempotent."""
    job = JobSpec.model_validate(
        {
            "workload": "sharded-matmul",
            "path": "jax-tpu",
            "target": "v6e:2x2",
            "compiler_options": {"xla_msa_enable": False, "xla_memory_scheduler": "dfs"},
        }
    )
    again = JobSpec.model_validate(job.model_dump(mode="json"))
    assert again.compiler_options == {"xla_memory_scheduler": "dfs", "xla_msa_enable": "false"}


def test_a_missing_equals_sign_is_named_with_an_example() -> None:
    assert "write NAME=VALUE, e.g. xla_gpu_enable_triton_gemm=false" in refusal(
        ["xla_gpu_enable_triton_gemm"]
    )


def test_a_value_of_the_wrong_type_says_what_the_option_takes() -> None:
    assert refusal(["xla_gpu_autotune_level=high"]) == (
        "xla_gpu_autotune_level takes a whole number from 0 to 4; 'high' is not one"
    )
    assert "takes true or false; 'maybe'" in refusal(["xla_gpu_enable_triton_gemm=maybe"])
    # The JSON API is strict: text is no bool, a bool is no number, 9 is out of bounds.
    assert "takes true or false" in refusal({"xla_gpu_enable_triton_gemm": "false"})
    assert "whole number" in refusal({"xla_gpu_autotune_level": True})
    assert "whole number from 0 to 4; 9" in refusal({"xla_gpu_autotune_level": 9})
    assert "one of DEFAULT, NONE" in refusal(
        ["xla_tpu_all_gather_collective_matmul_mode=post_spmd"], Compiler.LIBTPU
    )


def test_a_dump_option_is_refused_with_its_reason() -> None:
    message = refusal(["xla_dump_to=/tmp/x"])
    assert message.startswith("xla_dump_to is not allowed: it writes dump files on the worker")
    assert "The 23 options allowed for XLA:GPU are listed at /compiler-options" in message


def test_an_option_of_another_compiler_names_both_and_a_near_miss_is_suggested() -> None:
    assert "it is an option of XLA:GPU, and this job compiles with libtpu" in refusal(
        ["xla_gpu_enable_triton_gemm=false"], Compiler.LIBTPU
    )
    assert "Did you mean xla_gpu_enable_triton_gemm?" in refusal(["xla_gpu_enable_triton_gem=0"])


def test_the_cuda_path_takes_none_and_a_job_takes_at_most_sixteen() -> None:
    with pytest.raises(OptionError, match=r"path cuda compiles CUDA C\+\+ with nvcc"):
        compiler_for("cuda")
    assert "given twice" in refusal(
        ["xla_gpu_enable_triton_gemm=false", "xla_gpu_enable_triton_gemm=true"]
    )
    many = [f"xla_gpu_autotune_level={i % 5}" for i in range(MAX_OPTIONS + 1)]
    assert f"at most {MAX_OPTIONS} options, not {MAX_OPTIONS + 1}" in refusal(many)


def test_no_allowed_option_names_a_file_or_a_dump() -> None:
    for specs in ALLOWED.values():
        for name in specs:
            assert name.startswith("xla_") and "dump" not in name
            assert not name.endswith(("_to", "_dir", "_path", "_file"))


def test_options_read_as_a_person_types_them() -> None:
    options = {"xla_gpu_enable_triton_gemm": False, "xla_gpu_autotune_level": 0}
    assert as_text(options) == "xla_gpu_autotune_level=0, xla_gpu_enable_triton_gemm=false"
    assert as_text({}) == "none"
    assert as_arguments({"xla_gpu_enable_triton_gemm": False}) == [
        "--xla-option",
        "xla_gpu_enable_triton_gemm=false",
    ]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--xla-option", "xla_dump_to=/tmp/x"], "xla_dump_to is not allowed: it writes dump"),
        (["--xla-option", "xla_gpu_enable_triton_gemm"], "write NAME=VALUE"),
        (["--xla-option", "xla_gpu_autotune_level=high"], "takes a whole number from 0 to 4"),
    ],
)
def test_boundary_run_refuses_an_option_with_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["matmul", "--path", "jax-gpu", "--target", "b200:1"]
    assert run_command([*job, *argv]) == 2
    err = capsys.readouterr().err
    assert words in err
    if "not allowed" in words:  # and every name that is, on the next line
        assert "allowed for XLA:GPU: xla_gpu_enable_triton_gemm, " in err


def test_boundary_run_refuses_any_option_on_the_cuda_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["matmul", "--path", "cuda", "--xla-option", "xla_gpu_enable_triton_gemm=false"]
    assert run_command(argv) == 2
    assert "path cuda compiles CUDA C++ with nvcc, not with XLA" in capsys.readouterr().err


# --- what the compilers do with them (real compiles) ----------------------------------

slow = pytest.mark.slow


def _boundary_run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "run", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ,
        timeout=300,
        check=False,
    )


@slow
def test_triton_gemm_off_on_a_b200_is_a_cublas_call_recorded_with_its_option() -> None:
    """The issue's "done when", as a user types it."""
    done = _boundary_run(
        "matmul", "m=1024", "n=1024", "k=1024", "dtype=bfloat16", "--path", "jax-gpu",
        "--target", "b200:1", "--xla-option", "xla_gpu_enable_triton_gemm=false", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = RunResult.model_validate_json(done.stdout)
    hlo = run.artifacts.hlo or ""
    assert 'custom_call_target="__cublas$lt$matmul"' in hlo
    assert "__triton_nested_gemm_fusion" not in hlo
    assert run.job.compiler_options == {"xla_gpu_enable_triton_gemm": False}
    assert run.environment.extra["compiler_options"] == "xla_gpu_enable_triton_gemm=false"
    assert run.target is not None
    assert "compiled with xla_gpu_enable_triton_gemm=false" in run.target.notes
    # The untimed dump compile got the option too: the launch order is the cuBLAS call,
    # and no GEMM kernel of XLA's own was generated.
    assert run.pipeline is not None
    assert "kCublasLtMatmul" in run.pipeline.files["thunk_sequence.txt"]
    assert "gemm_fusion" not in (run.artifacts.ptx or "")

    refused = _boundary_run("matmul", "--path", "jax-gpu", "--target", "b200:1",
                            "--xla-option", "xla_dump_to=/tmp/x")  # fmt: skip
    assert refused.returncode == 2 and "xla_dump_to is not allowed" in refused.stderr


@slow
def test_the_pass_pipeline_capture_compiles_with_the_jobs_options() -> None:
    from workers.run.engine import run_job

    job = JobSpec.model_validate(
        {
            "workload": "matmul",
            "path": "jax-gpu",
            "target": "b200:1",
            "params": {"m": 256, "n": 256, "k": 256, "dtype": "bfloat16"},
            "measure": {"pipeline": True},
            "compiler_options": {"xla_gpu_enable_triton_gemm": False},
        }
    )
    run = run_job(job)
    assert run.pipeline is not None and run.pipeline.steps
    assert "__cublas$lt$matmul" in (run.pipeline.final or "")


@slow
def test_a_cpu_run_with_options_executes_checks_and_keys_the_persistent_cache(
    tmp_path: Path,
) -> None:
    """Options are part of the persistent cache's key: the plain program and the one with
    an option are two entries, and the same option again is a hit."""
    from workers.run.engine import run_job

    def run(options: dict[str, Any]) -> RunResult:
        job = JobSpec.model_validate(
            {
                "workload": "matmul",
                "params": {"m": 96, "n": 80, "k": 64},
                "measure": {"samples": 3, "cache": CachePolicy.PERSISTENT.value},
                "compiler_options": options,
            }
        )
        return run_job(job, cache_dir=tmp_path / "cache")

    plain = run({})
    fast = run({"xla_cpu_enable_fast_math": True})
    again = run({"xla_cpu_enable_fast_math": True})
    events = [r.environment.cache_events for r in (plain, fast, again)]
    assert all(e is not None for e in events)
    assert [e.misses > 0 for e in events if e] == [True, True, False]
    assert again.environment.cache_events and again.environment.cache_events.hits > 0
    assert fast.valid and fast.correctness is not None and fast.correctness.passed
    assert "compiler_options" not in plain.environment.extra


# --- the worked examples on /compiler-options, compiled for real ----------------------


def _compile(example: Example, with_option: bool) -> str:
    from workers.run.engine import run_job

    body = example.job()
    if not with_option:
        body = {k: v for k, v in body.items() if k != "compiler_options"}
    run = run_job(JobSpec.model_validate(body))
    assert run.artifacts.hlo is not None
    return run.artifacts.hlo


def _instructions(hlo: str) -> list[str]:
    """The HLO's instructions without source metadata or stack frames."""
    body = hlo[hlo.find("\n%") :]
    return [
        re.sub(r", metadata=\{[^}]*\}|stack_frame_id=\d+", "", line) for line in body.splitlines()
    ]


@slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_each_worked_example_changes_the_hlo_as_its_page_says(example: Example) -> None:
    plain = _compile(example, with_option=False)
    changed = _compile(example, with_option=True)
    for pattern in example.plain_has:
        assert re.search(pattern, plain), (example.id, "plain", pattern)
    for pattern in example.option_has:
        assert re.search(pattern, changed), (example.id, "option", pattern)
    for pattern in example.option_lacks:
        assert not re.search(pattern, changed), (example.id, "option lacks", pattern)
    same = _instructions(plain) == _instructions(changed)
    assert same is example.same_hlo, example.id


# --- every option on every list, at its extreme values --------------------------------

PROBE = Path(__file__).with_name("option_probe.py")


@slow
@pytest.mark.parametrize("compiler", list(Compiler), ids=[c.name for c in Compiler])
def test_every_listed_option_compiles_at_its_extremes_without_harm(compiler: Compiler) -> None:
    """The lists promise that no listed value aborts the compiling process or is refused by
    the compiler (a newer libtpu can rename or drop a flag: this test says which)."""
    done = subprocess.run(
        [sys.executable, str(PROBE), compiler.value],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    trying = [line["trying"] for line in lines if "trying" in line]
    assert done.returncode == 0, f"the process died trying {trying[-1:]}: {done.stderr[-1500:]}"
    answers = [line for line in lines if "answer" in line]
    refused = [a for a in answers if a["answer"] != "compiled"]
    assert not refused, refused
    assert {name for a in answers for name in a["options"]} == set(ALLOWED[compiler])
