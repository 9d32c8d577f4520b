"""The Pallas kernels: checked in interpret mode on the CPU like any workload (and shown as
no speed), and refused by the real compilers exactly where the catalog's limits say."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from workers.catalog.kernels import INTERPRET_WARNING, KernelChoice
from workers.catalog.pallas_blocks import MatmulBlocks, matmul_shared_bytes, matmul_vmem_bytes
from workers.catalog.pallas_limits import GPUS, Backend
from workers.compiler.jaxtyped import shape_dtype_struct
from workers.pallas.lowering import lowering_for
from workers.pallas.matmul import mosaic_gpu_matmul, tpu_matmul, triton_matmul
from workers.protocol import JobSpec, RunResult, parse_target
from workers.run.engine import run_job
from workers.xla_targets.topology import target_devices


def interpret(workload: str, params: dict[str, object]) -> RunResult:
    job = JobSpec.model_validate(
        {"workload": workload, "params": {**params, "kernel": "pallas"}, "measure": {"samples": 3}}
    )
    return run_job(job)


@pytest.mark.parametrize(
    ("workload", "params"),
    [
        ("matmul", {"m": 256, "n": 128, "k": 512, "block_k": 128}),  # four k steps summed
        ("matmul", {"m": 256, "n": 256, "k": 256, "dtype": "bfloat16"}),
        ("elementwise", {"n": 1 << 16, "ops": 8}),
        ("attention", {"batch": 1, "heads": 2, "seq_len": 256, "head_dim": 128, "causal": True}),
    ],
)
def test_interpret_mode_is_checked_against_float64_and_shows_no_speed(
    workload: str, params: dict[str, object]
) -> None:
    run = interpret(workload, params)
    assert run.valid and run.correctness is not None and run.correctness.passed
    assert run.correctness.error is not None and run.correctness.error < run.correctness.tolerance
    assert run.warnings[0] == INTERPRET_WARNING
    assert run.params["kernel"] == "pallas"
    for m in run.measurements:
        assert m.samples_s == [] and m.stats is None and m.note is not None
        assert INTERPRET_WARNING in m.note
    assert run.rates is not None and run.rates.flops_per_s is None and run.rates.bytes_per_s is None
    assert run.stage_seconds.warm_up is None
    assert "pallas_call" in (run.artifacts.jaxpr or "")  # the kernel, not XLA's dot
    assert run.source is not None and run.source.path.startswith("workers/pallas/")


def test_an_interpreted_kernel_that_computes_wrongly_fails_its_check() -> None:
    """The check can fail: the same run judged as if every output were 1% off."""
    from workers.measure.faults import perturbed

    with perturbed(0.01):
        run = interpret("matmul", {"m": 128, "n": 128, "k": 128, "precision": "highest"})
    assert run.correctness is not None and not run.correctness.passed
    assert not run.valid


@pytest.mark.slow
def test_boundary_run_checks_the_sharded_kernel_on_eight_cpu_devices() -> None:
    """`boundary run` starts JAX with 8 virtual devices; the kernel runs on each shard inside
    shard_map, the all-reduce written out, and the whole product is checked."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "run", "sharded-matmul", "kernel=pallas",
         "sharding=tensor", "devices=8", "m=256", "n=256", "k=1024", "--samples", "2", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout)
    assert run["correctness"]["passed"] and run["valid"]
    assert run["warnings"][0] == INTERPRET_WARNING
    assert run["extra"]["kernel"]["blocks"]["block_k"] == 128  # 1024 / 8 devices, whole
    assert "all-reduce" in run["artifacts"]["hlo"]  # the psum the kernel's layout writes out


# --- the compilers refuse where the catalog's limits say --------------------------------------


def _lower(fn: object, target: str, shape: tuple[int, int], dtype: object) -> object:
    device = target_devices(parse_target(target))[0]
    arg = shape_dtype_struct(shape, dtype, sharding=jax.sharding.SingleDeviceSharding(device))
    return jax.jit(fn).lower(arg, arg)  # type: ignore[arg-type]


@pytest.mark.slow
def test_libtpu_refuses_blocks_over_the_scoped_vmem_with_our_figure() -> None:
    blocks = MatmulBlocks(2048, 2048, 512)
    fn = tpu_matmul((4096, 4096, 4096), jnp.bfloat16, blocks, None, False)
    lowered = _lower(fn, "v6e:1x1", (4096, 4096), jnp.bfloat16)
    with pytest.raises(Exception, match=r"CompileTimeScopedVmemOom") as raised:
        lowered.compile()  # type: ignore[attr-defined]
    found = re.search(r"size ([\d.]+)M and limit ([\d.]+)M", str(raised.value))
    assert found is not None
    assert float(found.group(1)) == matmul_vmem_bytes(blocks, 2) / 2**20  # 40.00M
    assert float(found.group(2)) == 32.0


@pytest.mark.slow
def test_xla_refuses_triton_tiles_over_shared_memory_with_our_figure() -> None:
    blocks = MatmulBlocks(128, 128, 256)
    fn = triton_matmul((1024, 1024, 1024), jnp.bfloat16, blocks, None)
    lowered = _lower(fn, "h100:1", (1024, 1024), jnp.bfloat16)
    with pytest.raises(Exception, match="Shared memory size limit exceeded") as raised:
        lowered.compile()  # type: ignore[attr-defined]
    ours = matmul_shared_bytes(blocks, 2, Backend.TRITON, GPUS["h100"])
    assert f"requested {ours}" in str(raised.value)
    assert "available: 232448" in str(raised.value)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["h100", "b200"])
def test_mosaic_gpu_counts_the_shared_memory_we_count(model: str) -> None:
    from jax.experimental.mosaic.gpu import core as mgpu_core

    gpu = GPUS[model]
    blocks = MatmulBlocks(128, 128, 64)
    choice = KernelChoice("pallas", Backend.MOSAIC_GPU, gpu, ())
    device = target_devices(parse_target(f"{model}:1"))[0]
    arg = shape_dtype_struct(
        (1024, 1024), jnp.bfloat16, sharding=jax.sharding.SingleDeviceSharding(device)
    )
    with (
        lowering_for(choice, None, device),
        mgpu_core.artificial_shared_memory_limit(1),  # makes it say what it needs
        pytest.raises(Exception, match=r"smem_bytes=(\d+)") as raised,
    ):
        jax.jit(mosaic_gpu_matmul(blocks, gpu)).lower(arg, arg)
    found = re.search(r"smem_bytes=(\d+)", str(raised.value))
    assert found is not None
    assert int(found.group(1)) == matmul_shared_bytes(blocks, 2, Backend.MOSAIC_GPU, gpu)


def test_the_servers_half_of_the_gate_keeps_an_interpreted_run_as_published() -> None:
    """Interpret mode passes the server's gate unchanged: its lease check finds the job it
    leased (parameters in the same normal form) and re-gating keeps it valid, timeless."""
    from app.dispatch.results import lease_problems, prepare
    from workers.protocol.gate import gate

    run = interpret("matmul", {"m": 128, "n": 128, "k": 256, "block_k": 128})
    assert lease_problems(run.job.model_dump(mode="json"), run) == []
    assert gate(run) == run
    stored = prepare(
        run, artifact_max_bytes=1 << 22, inline_bytes=1 << 16, pipeline_max_bytes=1 << 24
    ).run
    assert stored.valid and stored.warnings[0] == INTERPRET_WARNING
    assert all(m.samples_s == [] and m.stats is None for m in stored.measurements)
    assert stored.extra["kernel"]["blocks"] == {"block_m": 128, "block_n": 128, "block_k": 128}
