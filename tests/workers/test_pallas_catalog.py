"""kernel=pallas in the catalog (no jax): which jobs take it, the block sizes each compiler
gets by default, and every refusal naming its limit, as the server (422) and `boundary run`
(exit 2) both say it."""

from __future__ import annotations

from typing import Any

import pytest

from app.queue.validation import JobRefused, validate_job
from workers.catalog import CatalogError, parse_params
from workers.catalog import pallas_blocks as pb
from workers.catalog.kernels import kernel_reading, kernel_record, public_params
from workers.catalog.pallas_limits import GPU_SHARED, GPUS, H100, TPU_VMEM, Backend, default_block
from workers.catalog.target_rules import apply_target, job_kernel
from workers.protocol import JobSpec

B200 = GPUS["b200"]


def refused(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """The problems the server's validation names for `body` ([] when it is accepted)."""
    body = {"stages": ["compile"] if "target" in body else ["compile", "execute"], **body}
    try:
        validate_job(body, 2**31)
    except JobRefused as exc:
        return exc.problems
    return []


def choice_of(body: dict[str, Any]) -> Any:
    job = apply_target(JobSpec.model_validate({"stages": ["compile"], **body}))
    return job_kernel(job, parse_params(job.workload, job.params, 2**62))


# --- which jobs take kernel=pallas -----------------------------------------------------------


def test_pallas_on_a_workload_without_a_kernel_names_the_ones_with_one() -> None:
    for workload in ("reduction", "gather", "collective"):
        problems = refused(
            {"workload": workload, "path": "jax-cpu", "params": {"kernel": "pallas"}}
        )
        assert len(problems) == 1, problems
        field, message = problems[0]
        assert field == "params.kernel"
        assert "matmul, elementwise, attention, sharded-matmul" in message
        assert "jax-cpu, jax-gpu, jax-tpu" in message
    with pytest.raises(CatalogError, match="reduction has no Pallas kernel"):
        parse_params("reduction", {"block_rows": 8})  # a Pallas parameter alone too


def test_pallas_backend_is_refused_off_jax_gpu() -> None:
    for path, target in (("jax-tpu", "v6e:1x1"), ("jax-cpu", None)):
        body = {"workload": "matmul", "path": path, "params": {"kernel": "pallas"}}
        body["params"]["pallas_backend"] = "triton"
        if target:
            body["target"] = target
        [(field, message)] = refused(body)
        assert field == "params.pallas_backend"
        assert f"applies only on jax-gpu, not {path}" in message


def test_the_cuda_path_keeps_its_hand_written_kernels() -> None:
    [(field, message)] = refused(
        {"workload": "matmul", "path": "cuda", "params": {"kernel": "pallas"}}
    )
    assert field == "params.kernel" and "tiled or naive" in message
    assert refused({"workload": "matmul", "path": "cuda", "params": {"kernel": "naive"}}) == []


def test_block_sizes_without_pallas_are_refused() -> None:
    [(field, message)] = refused(
        {"workload": "matmul", "path": "jax-cpu", "params": {"block_m": 128}}
    )
    assert field == "params.block_m" and "applies only to kernel=pallas" in message


def test_every_jax_path_value_but_pallas_reads_as_xla() -> None:
    """Stored runs carry the CUDA default (`tiled`); on a JAX path it reads as xla."""
    assert kernel_reading("jax-gpu", "tiled") == "xla"
    assert kernel_reading("jax-cpu", None) == "xla"
    assert kernel_reading("jax-tpu", "pallas") == "pallas"
    assert kernel_reading("cuda", "naive") == "naive"
    params = parse_params("matmul", {"kernel": "tiled"})
    shown = public_params(params, "jax-cpu")
    assert shown["kernel"] == "xla" and "block_m" not in shown and "pallas_backend" not in shown
    assert public_params(params, "cuda")["kernel"] == "tiled"


def test_a_pallas_run_reports_the_block_sizes_it_used() -> None:
    body = {"workload": "matmul", "path": "jax-gpu", "target": "h100:1"}
    body["params"] = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16", "kernel": "pallas"}
    choice = choice_of(body)
    assert choice.backend is Backend.TRITON and choice.gpu == H100
    shown = public_params(parse_params("matmul", body["params"]), "jax-gpu")
    assert shown["kernel"] == "pallas" and shown["pallas_backend"] == "triton"
    assert (shown["block_m"], shown["block_n"], shown["block_k"]) == (0, 0, 0)  # as asked
    used = kernel_record(choice)  # the run's extra.kernel: each default resolved
    assert used["blocks"] == {"block_m": 128, "block_n": 128, "block_k": 128}
    assert used["compiler"] == "triton" and used["gpu"] == "NVIDIA H100"
    assert choice.label() == "Pallas (triton), block_m=128 block_n=128 block_k=128"
    tpu = public_params(parse_params("matmul", body["params"]), "jax-tpu")
    assert "pallas_backend" not in tpu and tpu["block_m"] == 0


def test_each_path_has_its_pallas_compiler() -> None:
    base = {"workload": "matmul", "params": {"kernel": "pallas", "dtype": "bfloat16"}}
    assert choice_of({**base, "path": "jax-cpu"}).backend is Backend.INTERPRET
    assert choice_of({**base, "path": "jax-tpu", "target": "v6e:1x1"}).backend is Backend.MOSAIC_TPU
    mosaic_gpu = {**base, "path": "jax-gpu", "target": "b200:1"}
    mosaic_gpu["params"] = {**base["params"], "pallas_backend": "mosaic-gpu"}
    found = choice_of(mosaic_gpu)
    assert found.backend is Backend.MOSAIC_GPU and found.gpu == B200
    assert found.blocks == (("block_m", 128), ("block_n", 256), ("block_k", 64))


def test_the_scale_series_is_not_offered_with_pallas() -> None:
    problems = refused(
        {
            "workload": "sharded-matmul",
            "path": "jax-cpu",
            "params": {"kernel": "pallas", "devices": 8},
            "stages": ["compile", "execute", "scale"],
        }
    )
    assert problems[0][0] == "stages" and "kernel=pallas" in problems[0][1]


# --- the block sizes each compiler gets, and the refusals ------------------------------------


def test_default_block_is_the_largest_candidate_that_divides() -> None:
    assert (default_block(1024), default_block(768), default_block(384)) == (512, 256, 128)
    assert default_block(100) == 100  # none divides: the whole dimension is one block


def test_defaults_pass_their_own_checks_on_every_compiler() -> None:
    for m, n, k in [(1024, 1024, 1024), (768, 384, 2048), (4096, 128, 512)]:
        for dtype in ("bfloat16", "float32"):
            blocks = pb.default_matmul_blocks(m, n, k, Backend.MOSAIC_TPU)
            tpu = pb.check_matmul_blocks(
                m, n, k, dtype=dtype, blocks=blocks, backend=Backend.MOSAIC_TPU
            )
            assert tpu == [], (m, n, k, dtype)
    for gpu in (H100, B200):
        for backend in (Backend.TRITON, Backend.MOSAIC_GPU):
            blocks = pb.default_matmul_blocks(1024, 1024, 1024, backend, gpu=gpu)
            said = pb.check_matmul_blocks(
                1024, 1024, 1024, dtype="bfloat16", blocks=blocks, backend=backend, gpu=gpu
            )
            assert said == [], (gpu, backend, blocks)
    # float32 Triton tiles step k by 64: 128 × 128 × 128 would need 384 KiB of shared memory.
    assert pb.default_matmul_blocks(1024, 1024, 1024, Backend.TRITON, dtype="float32").bk == 64


def test_gpu_defaults_are_smaller_than_tpu_defaults() -> None:
    """docs/pallas.md's line: 512-row Triton tiles do not fit; the GPU default is 128 at most."""
    assert pb.default_matmul_blocks(1024, 1024, 1024, Backend.MOSAIC_TPU).bm == 512
    assert pb.default_matmul_blocks(1024, 1024, 1024, Backend.TRITON).bm == 128
    assert pb.default_rows(1 << 18, Backend.MOSAIC_TPU) == 512
    assert pb.default_rows(1 << 18, Backend.TRITON) == 8
    assert pb.default_attention_blocks(1024, Backend.TRITON) == pb.AttentionBlocks(128, 128)


def test_vmem_refusal_names_the_scoped_limit_and_its_source() -> None:
    blocks = pb.MatmulBlocks(2048, 2048, 512)
    said = pb.check_matmul_blocks(
        4096, 4096, 4096, dtype="bfloat16", blocks=blocks, backend=Backend.MOSAIC_TPU
    )
    assert pb.matmul_vmem_bytes(blocks, 2) == 40 * 2**20 and TPU_VMEM.bytes == 32 * 2**20
    assert any(
        "40 MiB of VMEM" in r and "32 MiB" in r and "CompileTimeScopedVmemOom" in r for r in said
    )


def test_shared_memory_refusal_names_the_gpu_limit_and_its_source() -> None:
    blocks = pb.MatmulBlocks(128, 128, 256)
    assert pb.matmul_shared_bytes(blocks, 2, Backend.TRITON, H100) == 393216  # XLA says the same
    said = pb.check_matmul_blocks(
        1024, 1024, 1024, dtype="bfloat16", blocks=blocks, backend=Backend.TRITON, gpu=B200
    )
    assert any("B200" in r and "227 KiB" in r and "target description" in r for r in said)
    assert GPU_SHARED == 227 * 1024


def test_block_refusals_through_the_server_name_the_field() -> None:
    body = {"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1"}
    body["params"] = {"m": 1000, "kernel": "pallas", "block_m": 512}
    [(field, message)] = refused(body)
    assert field == "params.block_m"
    assert "block_m=512 does not divide m=1000" in message
    tpu_lanes = {**body, "params": {"kernel": "pallas", "dtype": "bfloat16", "block_m": 8}}
    assert "neither a multiple of 16" in refused(tpu_lanes)[0][1]  # bf16: 16 rows a register


def test_float16_on_v6e_and_float32_on_mosaic_gpu_are_refused_with_a_reason() -> None:
    tpu = {"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1"}
    tpu["params"] = {"kernel": "pallas", "dtype": "float16"}
    assert "Invalid vector type for load" in refused(tpu)[0][1]
    interpret = {
        "workload": "matmul",
        "path": "jax-cpu",
        "params": {"kernel": "pallas", "dtype": "float16"},
    }
    assert refused(interpret) == []  # the interpreter runs it
    gpu = {"workload": "matmul", "path": "jax-gpu", "target": "b200:1"}
    gpu["params"] = {"kernel": "pallas", "pallas_backend": "mosaic-gpu"}  # float32 by default
    assert "bfloat16 or float16" in refused(gpu)[0][1]


def test_triton_tiles_that_would_spill_are_refused() -> None:
    said = pb.check_matmul_blocks(
        1024,
        1024,
        1024,
        dtype="bfloat16",
        blocks=pb.MatmulBlocks(256, 256, 32),
        backend=Backend.TRITON,
    )
    assert any("registers" in r and "spill" in r for r in said)
    rows = pb.check_elementwise_block(1 << 18, dtype="float32", rows=64, backend=Backend.TRITON)
    assert any("spill" in r for r in rows)


def test_mosaic_gpu_takes_jaxs_tile_shapes() -> None:
    said = pb.check_matmul_blocks(
        1024, 1024, 1024, dtype="bfloat16", blocks=pb.MatmulBlocks(64, 128, 128),
        backend=Backend.MOSAIC_GPU, gpu=B200,
    )  # fmt: skip
    assert any("block_m=64" in r for r in said) and any("block_k=128" in r for r in said)
    elementwise = pb.check_elementwise_block(
        1 << 18, dtype="float32", rows=8, backend=Backend.MOSAIC_GPU
    )
    assert "pallas_backend=triton" in elementwise[0]


def test_attention_refusals_name_what_the_shipped_kernels_cannot_do() -> None:
    blocks = pb.default_attention_blocks(1024, Backend.MOSAIC_TPU)
    assert blocks == pb.AttentionBlocks(512, 512)
    assert (
        pb.check_attention_blocks(
            1024, 128, dtype="bfloat16", blocks=blocks, backend=Backend.MOSAIC_TPU
        )
        == []
    )
    on_b200 = pb.check_attention_blocks(
        1024,
        128,
        dtype="float16",
        blocks=pb.AttentionBlocks(128, 128),
        backend=Backend.MOSAIC_GPU,
        gpu=B200,
    )
    assert any("sm_100a" in r and "wgmma" in r for r in on_b200)
    bf16 = pb.check_attention_blocks(
        1024, 128, dtype="bfloat16", blocks=pb.AttentionBlocks(128, 128), backend=Backend.MOSAIC_GPU
    )
    assert any("float16 only" in r for r in bf16)


def test_sharded_blocks_are_checked_against_each_devices_shard() -> None:
    """k sharded 8 ways: each device's kernel sees k / 8, and the blocks must divide that."""
    body = {"workload": "sharded-matmul", "path": "jax-tpu", "target": "v6e:2x4"}
    body["params"] = {"m": 1024, "n": 1024, "k": 1024, "sharding": "tensor", "kernel": "pallas"}
    assert dict(choice_of(body).blocks)["block_k"] == 128  # 1024 / 8 = 128 per device
    too_big = {**body, "params": {**body["params"], "block_k": 256}}
    assert "does not divide k=128" in refused(too_big)[0][1]
