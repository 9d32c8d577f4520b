"""Pallas kernels compiled for TPU v6e, H100 and B200 on this machine, which has none of
them: the issue's commands as a person types them (`boundary run … --json`), and what
each artifact holds, down to TPU bundles and SASS."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from typing import Any

import pytest

from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

MATMUL = ["matmul", "m=1024", "n=1024", "k=1024", "dtype=bfloat16"]


@cache
def boundary_run(*argv: str) -> dict[str, Any]:
    """`boundary run ARGV --json` in its own process: the run it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "run", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run: dict[str, Any] = json.loads(done.stdout)
    return run


def test_a_tpu_pallas_matmul_has_its_mosaic_and_bundles_with_mxu_pushes() -> None:
    run = boundary_run(*MATMUL, "kernel=pallas", "--path", "jax-tpu", "--target", "v6e:1x1")
    artifacts = run["artifacts"]
    assert "tpu.matmul" in artifacts["mosaic"]
    assert "memref<512x512xbf16, #tpu.memory_space<vmem>>" in artifacts["mosaic"]
    assert re.search(r"\bvmatpush\S*\.mxu\d", artifacts["bundles"])
    assert 'custom_call_target="tpu_custom_call"' in artifacts["hlo"]
    [schedule] = run["target"]["kernels"]
    assert schedule["kernel"].startswith("boundary_matmul")
    assert schedule["mxu_pushes"] > 0 and schedule["bundles"] >= schedule["non_empty_bundles"] > 0
    # Three double-buffered 512² bf16 windows and the f32 accumulator, and Mosaic's own scratch.
    assert schedule["vmem_bytes"] >= 3 * 2 * 512 * 512 * 2 + 512 * 512 * 4
    assert f"{schedule['bundles']} bundles" in artifacts["bundles"].split("\n", 2)[1]
    assert "dump process kept between compiles" in run["target"]["dump"]
    assert run["extra"]["kernel"]["blocks"]["block_m"] == 512
    assert run["params"]["block_m"] == 0 and "pallas_backend" not in run["params"]
    assert run["measurements"] == [] and run["warnings"][0].startswith("Compiled without")


def test_a_triton_matmul_for_h100_has_its_triton_and_ptx_with_wgmma() -> None:
    run = boundary_run(*MATMUL, "kernel=pallas", "--path", "jax-gpu", "--target", "h100:1")
    artifacts = run["artifacts"]
    assert "tt.dot" in artifacts["triton"] and "tt.func" in artifacts["triton"]
    assert ".target sm_90a" in artifacts["ptx"] and "wgmma.mma_async" in artifacts["ptx"]
    assert "HGMMA" in artifacts["sass"]
    [kernel] = [r for r in run["kernel_resources"] if r["name"] == "boundary_matmul"]
    assert kernel["arch"] == "sm_90a" and 0 < kernel["registers"] <= 255
    assert kernel["spill_store_bytes"] == 0


def test_a_mosaic_gpu_matmul_for_b200_uses_tcgen05() -> None:
    run = boundary_run(
        *MATMUL, "kernel=pallas", "pallas_backend=mosaic-gpu", "--path", "jax-gpu",
        "--target", "b200:1",
    )  # fmt: skip
    artifacts = run["artifacts"]
    assert "mosaic_gpu" in artifacts["mosaic_gpu"] and "func.func" in artifacts["mosaic_gpu"]
    assert "tcgen05.mma" in artifacts["ptx"] and ".target sm_100a" in artifacts["ptx"]
    assert "UTCHMMA" in artifacts["sass"]
    assert run["params"]["pallas_backend"] == "mosaic-gpu"
    assert "Mosaic GPU's PTX" in run["target"]["dump"]


def test_jax_cpu_pallas_passes_its_check_in_interpret_mode_with_no_speed() -> None:
    run = boundary_run("matmul", "kernel=pallas")
    assert run["valid"] and run["correctness"]["passed"]
    assert run["warnings"][0] == "Pallas interpret mode: checked on the CPU, no kernel speed"
    assert all(m["samples_s"] == [] and m["stats"] is None for m in run["measurements"])
    assert run["rates"]["flops_per_s"] is None


def test_a_plain_xla_matmul_for_b200_now_has_sass_with_registers() -> None:
    run = boundary_run("matmul", "--path", "jax-gpu", "--target", "b200:1")
    assert run["params"]["kernel"] == "xla"
    sass = run["artifacts"]["sass"]
    assert sass and "// ===== kernel" in sass and re.search(r"\bHMMA\b|\bUTCHMMA\b", sass)
    assert run["kernel_resources"] and all(r["arch"] == "sm_100a" for r in run["kernel_resources"])
    assert {r["name"] for r in run["kernel_resources"]} <= set(
        re.findall(r"^\.visible \.entry (\w+)", run["artifacts"]["ptx"], re.MULTILINE)
    )


def test_a_plain_xla_tpu_program_gets_bundles_too() -> None:
    """So XLA's kernel and a Pallas kernel compare bundle for bundle."""
    run = boundary_run(*MATMUL, "--path", "jax-tpu", "--target", "v6e:1x1")
    assert run["artifacts"]["mosaic"] is None
    assert run["artifacts"]["bundles"] and run["target"]["kernels"]
    assert any(k["mxu_ops"] > 0 for k in run["target"]["kernels"])


def test_the_pipeline_has_each_tpu_kernels_passes_and_the_bundles_it_has_without() -> None:
    """With `--pipeline` the dump child dumps every pass; without, only the passes its
    bundles and schedule summary are read from (workers/xla_targets/tpu_dump.py): the
    two must agree on those to the byte."""
    body: dict[str, Any] = {
        "workload": "matmul",
        "path": "jax-tpu",
        "target": "v6e:1x1",
        "params": {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16", "kernel": "pallas"},
    }
    run = run_job(JobSpec.model_validate({**body, "measure": {"pipeline": True}}))
    lean = run_job(JobSpec.model_validate(body))
    assert lean.kernel_pipelines == {}
    assert lean.artifacts.bundles is not None and lean.artifacts.bundles == run.artifacts.bundles
    assert lean.target is not None and run.target is not None
    assert lean.target.kernels == run.target.kernels and lean.target.kernels[0].vmem_bytes
    [(name, capture)] = run.kernel_pipelines.items()
    assert name == "boundary_matmul"
    pipelines = [s.pipeline for s in capture.steps]
    assert pipelines[0] == "mosaic" and "llo" in pipelines
    passes = [s.changed for s in capture.steps]
    assert passes[0] == "original" and any("apply-vector-layout" in p for p in passes)
    assert passes[-1] == "final_bundles"
    # Mosaic's passes keep the kernel body's Python lines.
    body = workers_line_of("_tpu_kernel", "acc_ref[...] +=")
    assert any(f'matmul.py":{body}:' in snapshot for snapshot in capture.snapshots)
    assert run.pipeline is not None and run.pipeline.steps  # XLA's own passes, as before


def workers_line_of(function: str, text: str) -> int:
    """The line of `text` inside `function` of workers/pallas/matmul.py."""
    import inspect

    from workers.pallas import matmul

    lines, first = inspect.getsourcelines(getattr(matmul, function))
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_one_process_compiles_mosaic_gpu_for_h100_then_b200() -> None:
    """Mosaic GPU builds one GPU architecture per process: the second job runs in a fresh
    one and still gets its own architecture's kernel."""
    from workers.pallas import lowering

    runs = []
    for target in ("h100:1", "b200:1"):
        job = JobSpec.model_validate(
            {
                "workload": "matmul",
                "path": "jax-gpu",
                "target": target,
                "params": {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16", "kernel": "pallas",
                           "pallas_backend": "mosaic-gpu"},
            }
        )  # fmt: skip
        runs.append(run_job(job))
    assert ".target sm_90a" in (runs[0].artifacts.ptx or "")
    assert "wgmma" in (runs[0].artifacts.ptx or "")
    assert ".target sm_100a" in (runs[1].artifacts.ptx or "")
    assert "tcgen05" in (runs[1].artifacts.ptx or "")
    assert lowering.arch_conflict(None) is None
