"""The cuda path's compile stage, run for real on this machine (nvcc, no GPU).

Every kernel source is compiled to PTX and a cubin for sm_90, every kernel's SASS is
disassembled and its resource report parsed; `cuda` jobs that only compile succeed, and
jobs that execute are refused at once where no GPU is present.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from tests.dependencies import require
from tests.workers.counted import counted, runs
from workers.catalog import CatalogError, parse_params
from workers.cli.run import run_command
from workers.cuda import env
from workers.cuda.build import build
from workers.cuda.plan import SOURCES, plan_for, source_kernels
from workers.cuda.sass import (
    disassemble,
    parse_ptxas_log,
    parse_res_usage,
    ptx_for,
    ptx_kernels,
    resources,
)
from workers.protocol import CachePolicy, JobSpec, PathId, StageId
from workers.run.cuda import COMPILE_ONLY_NOTE
from workers.run.engine import PathUnavailable, run_job

TOOLS = env.detect_tools()


@pytest.fixture(autouse=True)
def cuda_tools() -> None:
    """A CUDA compiler and a SASS disassembler: `pip install -e .` brings both."""
    if not TOOLS.can_compile:
        require("cuda-compiler", f"no CUDA compiler (nvcc or NVRTC): {TOOLS.describe()}")
    if TOOLS.cuobjdump is None and TOOLS.nvdisasm is None:
        require(
            "sass-disassembler",
            "no cuobjdump or nvdisasm: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm",
        )


NO_GPU = env.probe_gpu().count == 0
ARCH = "sm_90"


@pytest.fixture(scope="module")
def cuda_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache for the module, so each source compiles once."""
    return tmp_path_factory.mktemp("cuda-cache")


@pytest.mark.parametrize("source", SOURCES)
def test_every_kernel_has_ptx_sass_and_a_resource_report(source: str, cuda_cache: Path) -> None:
    built = build(source, ARCH, cache_dir=cuda_cache)
    expected = source_kernels(source)
    assert sorted(ptx_kernels(built.ptx)) == sorted(expected)
    assert built.ptx_s > 0 and built.cubin_s > 0 and built.cubin.stat().st_size > 0
    report = {r.name: r for r in parse_ptxas_log(built.ptxas_log, ARCH)}
    assert sorted(report) == sorted(expected)
    for name in expected:
        ptx = ptx_for(built.ptx, name)
        assert ptx is not None and f".entry {name}(" in ptx and f".target {ARCH}" in ptx
        assert ptx_kernels(ptx) == [name]  # only the chosen kernel
        sass = disassemble(built.cubin, name)
        assert sass.note is None and sass.text is not None
        assert f"Function : {name}" in sass.text and "EXIT" in sass.text
        assert "/* 0x" not in sass.text  # encodings stripped
        res = report[name]
        assert res.arch == ARCH and res.registers is not None and res.registers > 0
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, f"{name} spills"
    if source == "matmul.cu":
        # Two 32 × 32 float32 tiles staged in shared memory by the tiled kernel only.
        assert report["matmul_tiled_f32"].shared_bytes == 2 * 32 * 32 * 4
        assert report["matmul_naive_f32"].shared_bytes == 0
        assert report["matmul_tiled_f32"].barriers == 1
    if source == "reduction.cu":
        assert report["sum_tree_axis0_f32"].shared_bytes == 8 * 33 * 4  # 8 rows × 33 floats
        assert report["sum_tree_axis1_f32"].shared_bytes == (256 // 32) * 4  # a slot per warp


def test_cuobjdump_resource_usage_agrees_with_ptxas(cuda_cache: Path) -> None:
    if TOOLS.cuobjdump is None:
        require("cuobjdump", "cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    built = build("matmul.cu", ARCH, cache_dir=cuda_cache)
    listing = subprocess.run(
        [TOOLS.cuobjdump, "-res-usage", str(built.cubin)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    from_dump = {r.name: r for r in parse_res_usage(listing, ARCH)}
    from_log = {r.name: r for r in parse_ptxas_log(built.ptxas_log, ARCH)}
    assert sorted(from_dump) == sorted(from_log)
    for name, res in from_log.items():
        assert from_dump[name].registers == res.registers
        assert from_dump[name].source == "cuobjdump -res-usage"
    # resources() falls back to cuobjdump when the log lacks a kernel.
    found = resources("", built.cubin, ARCH, ["matmul_tiled_f32"], TOOLS)
    assert [r.name for r in found] == ["matmul_tiled_f32"]
    assert found[0].registers == from_log["matmul_tiled_f32"].registers


def test_builds_are_cached_by_source_and_arch(tmp_path: Path) -> None:
    first = build("elementwise.cu", ARCH, cache_dir=tmp_path)
    again = build("elementwise.cu", ARCH, cache_dir=tmp_path)
    assert not first.cached and again.cached and again.key == first.key
    assert again.ptx == first.ptx and again.ptxas_log == first.ptxas_log
    fresh = build("elementwise.cu", ARCH, cache_dir=tmp_path, use_cache=False)
    assert not fresh.cached and fresh.cubin.is_file()
    other = build("elementwise.cu", "sm_100", cache_dir=tmp_path)
    assert other.key != first.key and not other.cached and ".target sm_100" in other.ptx


def instructions(sass: str | None) -> list[str]:
    """The instructions of a SASS text, spacing folded (listings differ in column width)."""
    found = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]+);", sass or "")
    return [" ".join(each.split()) for each in found]


def test_a_cubin_is_listed_once_and_each_kernel_cut_from_it(
    cuda_cache: Path, tmp_path: Path
) -> None:
    if TOOLS.cuobjdump is None:
        require("cuobjdump", "cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    built = build("matmul.cu", ARCH, cache_dir=cuda_cache)
    log = tmp_path / "runs.log"
    tools = dataclasses.replace(TOOLS, cuobjdump=counted(TOOLS.cuobjdump, log))
    names = source_kernels("matmul.cu")
    cut = {name: disassemble(built.cubin, name, tools) for name in names}
    assert len(names) > 1 and runs(log) == ["cuobjdump"]
    for name in names:  # each kernel as cuobjdump lists that kernel alone
        alone = subprocess.run(
            [TOOLS.cuobjdump, "-sass", "-fun", name, str(built.cubin)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert instructions(cut[name].text) == instructions(alone) != []
        assert f"Function : {name}" in (cut[name].text or "")
    copy = tmp_path / "copy.cubin"  # the same bytes elsewhere: the listing is kept
    copy.write_bytes(built.cubin.read_bytes())
    assert disassemble(copy, names[0], tools).text == cut[names[0]].text
    assert runs(log) == ["cuobjdump"]
    broken = tmp_path / "broken.cubin"  # a failure is never kept: each call runs again
    broken.write_bytes(b"not a cubin")
    for _ in range(2):
        failed = disassemble(broken, names[0], tools)
        assert failed.text is None and "cuobjdump -sass failed" in (failed.note or "")
    assert runs(log) == ["cuobjdump"] * 3


def test_unknown_kernels_and_architectures_are_named(cuda_cache: Path) -> None:
    built = build("matmul.cu", ARCH, cache_dir=cuda_cache)
    assert ptx_for(built.ptx, "no_such_kernel") is None
    missing = disassemble(built.cubin, "no_such_kernel")
    assert missing.text is None and missing.note and "no_such_kernel" in missing.note
    with pytest.raises(ValueError, match=r"arch: 'sm_x' is no SM architecture"):
        env.check_arch("sm_x")
    with pytest.raises(ValueError, match="source: no kernel source"):
        build("nope.cu", ARCH, cache_dir=cuda_cache)


CASES: list[tuple[str, dict[str, Any]]] = [
    ("matmul", {"m": 100, "n": 70, "k": 33, "kernel": "naive"}),
    ("matmul", {"m": 100, "n": 70, "k": 33, "kernel": "tiled", "dtype": "bfloat16"}),
    ("matmul", {"kernel": "tiled", "dtype": "float16"}),
    ("elementwise", {"n": 1000, "ops": 5}),
    ("elementwise", {"n": 1000, "ops": 3, "kernel": "unfused", "dtype": "bfloat16"}),
    ("reduction", {"rows": 37, "cols": 53, "op": "sum", "axis": 1}),
    ("reduction", {"rows": 37, "cols": 53, "op": "softmax", "axis": 0}),
    ("reduction", {"op": "sum", "axis": 0, "kernel": "naive", "dtype": "bfloat16"}),
]


@pytest.mark.parametrize(("workload", "params"), CASES)
def test_a_compile_only_cuda_job_returns_the_chosen_kernel(
    workload: str, params: dict[str, Any], cuda_cache: Path
) -> None:
    job = JobSpec.model_validate(
        {
            "workload": workload,
            "path": "cuda",
            "params": params,
            "stages": ["compile"],
            "measure": {"cache": "persistent"},
        }
    )
    plan = plan_for(parse_params(workload, params))
    run = run_job(job, cache_dir=cuda_cache / "jax")
    assert run.valid and run.correctness is None and run.measurements == []
    assert run.artifacts.ptx is not None and ptx_kernels(run.artifacts.ptx) == [plan.kernel]
    assert run.artifacts.sass is not None and f"Function : {plan.kernel}" in run.artifacts.sass
    assert run.artifacts.jaxpr is None and run.artifacts.hlo is None
    assert [r.name for r in run.kernel_resources] == plan.kernels()
    assert run.stage_seconds.compile is not None and run.stage_seconds.compile > 0
    assert run.environment.platform == "none" and run.environment.device_count == 0
    assert run.environment.extra["target_arch"] == ARCH
    assert COMPILE_ONLY_NOTE in run.warnings
    cuda = run.extra["cuda"]
    assert cuda["kernel"] == plan.kernel and cuda["compile_only"] is True
    assert cuda["build"]["compiler"] == TOOLS.compiler
    assert len(cuda["launches"]) == len(plan.launches)


def test_unfused_elementwise_launches_once_per_operation() -> None:
    plan = plan_for(parse_params("elementwise", {"n": 10, "ops": 6, "kernel": "unfused"}))
    assert len(plan.launches) == 6 and plan.kernels() == ["chain_step_f32"]
    assert plan.launches[0].args[0] == "x" and all(
        step.args[0] == "out" for step in plan.launches[1:]
    )
    fused = plan_for(parse_params("elementwise", {"n": 10, "ops": 6}))
    assert len(fused.launches) == 1 and fused.kernel == "chain_fused_f32"


def test_a_cold_job_recompiles_and_a_persistent_one_reuses(tmp_path: Path) -> None:
    spec = {"workload": "reduction", "path": "cuda", "stages": ["compile"]}
    cold = JobSpec.model_validate({**spec, "measure": {"cache": "cold"}})
    warm = JobSpec.model_validate({**spec, "measure": {"cache": "persistent"}})
    first = run_job(cold, cache_dir=tmp_path / "jax")
    second = run_job(warm, cache_dir=tmp_path / "jax")
    third = run_job(cold, cache_dir=tmp_path / "jax")
    assert first.extra["cuda"]["build"]["cache"] == "miss"
    assert second.extra["cuda"]["build"]["cache"] == "hit"
    assert third.extra["cuda"]["build"]["cache"] == "miss"
    assert second.environment.cache is CachePolicy.PERSISTENT
    assert second.artifacts.ptx == first.artifacts.ptx


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: execution is allowed here")
def test_executing_without_a_gpu_is_refused_before_compiling(tmp_path: Path) -> None:
    job = JobSpec.model_validate({"workload": "matmul", "path": "cuda"})
    assert StageId.EXECUTE in job.stages
    with pytest.raises(PathUnavailable) as refused:
        run_job(job, cache_dir=tmp_path / "jax")
    message = str(refused.value)
    assert "executing needs an NVIDIA GPU" in message and "--stages compile" in message
    assert env.probe_gpu().reason is not None and env.probe_gpu().reason in message
    assert not (tmp_path / "cuda-kernels").exists()  # nothing was compiled


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = run_command(argv)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: execution is allowed here")
def test_cli_refuses_cuda_execute_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOUNDARY_CUDA_CACHE_DIR", str(tmp_path / "cuda"))
    status, out, err = _cli(["matmul", "--path", "cuda", "--stages", "execute"])
    assert status == 2 and out == ""
    assert "boundary run: path cuda: executing needs an NVIDIA GPU" in err
    assert not (tmp_path / "cuda").exists()


def test_cli_compiles_and_prints_ptx_sass_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOUNDARY_CUDA_CACHE_DIR", str(tmp_path / "cuda"))
    base = ["matmul", "m=64", "kernel=naive", "--path", "cuda", "--stages", "compile"]
    status, sass, _ = _cli([*base, "--ir", "sass"])
    assert status == 0 and "Function : matmul_naive_f32" in sass
    status, ptx, _ = _cli([*base, "--ir", "ptx", "--cache", "persistent"])
    assert status == 0 and ".visible .entry matmul_naive_f32(" in ptx
    status, out, _ = _cli([*base, "--json", "--cache", "persistent"])
    run = json.loads(out)
    assert status == 0 and run["job"]["path"] == "cuda" and run["valid"] is True
    assert run["kernel_resources"][0]["name"] == "matmul_naive_f32"
    assert run["kernel_resources"][0]["registers"] > 0
    status, _, err = _cli(["matmul", "kernel=fast", "--path", "cuda", "--stages", "compile"])
    assert status == 2 and "params.kernel" in err


def test_cuda_only_options_on_a_jax_path_are_flagged() -> None:
    job = JobSpec.model_validate(
        {
            "workload": "matmul",
            "params": {"m": 16, "n": 16, "k": 16, "kernel": "naive"},
            "measure": {"samples": 2, "flush_l2": True},
        }
    )
    run = run_job(job)
    assert run.valid and run.job.path is PathId.JAX_CPU
    assert any("params.kernel" in w and "cuda path" in w for w in run.warnings)
    assert any("flush_l2" in w for w in run.warnings)


def test_workloads_without_a_kernel_refuse_the_cuda_path() -> None:
    job = JobSpec.model_validate({"workload": "ffi", "path": "cuda", "stages": ["compile"]})
    with pytest.raises(CatalogError, match="path: ffi does not run on cuda"):
        run_job(job)


def test_capabilities_are_detected() -> None:
    caps = env.cuda_capabilities()
    assert caps["cuda_compile"] is TOOLS.can_compile
    assert caps["cuda_run"] is (TOOLS.can_compile and not NO_GPU)


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_runner_child_compiles_a_cuda_job_and_refuses_to_execute_it(
    tmp_path: Path,
) -> None:
    from workers.agent.runner_pool import RunnerPool

    pool = RunnerPool({**os.environ, "BOUNDARY_CUDA_CACHE_DIR": str(tmp_path / "cuda")})
    spec = {"workload": "elementwise", "path": "cuda", "params": {"n": 100}}
    try:
        runner = await pool.get(1)
        caps = await runner.detect(1)
        assert "cuda" in caps["paths"] and caps["cuda_compile"] is True
        events: list[dict[str, Any]] = []
        compiled = await runner.run({"job": {**spec, "stages": ["compile"]}}, 120.0, events.append)
        assert compiled.result is not None and compiled.result["valid"] is True
        assert "Function : chain_fused_f32" in compiled.result["artifacts"]["sass"]
        assert "compiled" in {e["phase"] for e in events}
        if NO_GPU:
            refused = await runner.run({"job": spec}, 120.0, events.append)
            assert refused.error_kind == "path" and "NVIDIA GPU" in (refused.error or "")
    finally:
        await pool.close()


def test_an_nvcc_that_cannot_compile_is_set_aside(tmp_path: Path) -> None:
    broken = tmp_path / "nvcc"
    message = "nvcc fatal : Failed to preprocess host compiler"
    broken.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    broken.chmod(0o755)
    problem = env._nvcc_problem(str(broken))
    assert problem is not None and "Failed to preprocess host compiler" in problem
    if TOOLS.nvcc is not None:
        assert env._nvcc_problem(TOOLS.nvcc) is None
