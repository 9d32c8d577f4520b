"""A check at the arithmetic the device ran the program's products at.

The worker reads the precision written into the lowered program (never a job's word for
it), and the server recomputes the arithmetic of a catalog workload from its precision and
path, and bounds an upload's to what the path's platform has: a TPU's one bfloat16 pass
allows 2 % on a float32 result, a CPU's float32 products 1e-4, and `check=strict` keeps
1e-4 everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from workers.catalog.arithmetic import Arithmetic, arithmetic_of, coarsest, result_tolerance
from workers.catalog.exported import ExportedParams
from workers.catalog.matmul import MatmulParams
from workers.catalog.rule_correctness import server_correctness
from workers.compiler.precision import program_arithmetic
from workers.protocol import Correctness, JobSpec, PathId, ResultCheck

F32 = jnp.ones((32, 32), jnp.float32)


def lowered(precision: object, dtype: object = jnp.float32) -> object:
    x = jnp.ones((32, 32), dtype)
    return jax.jit(lambda a, b: jnp.tanh(a @ b) @ jnp.matmul(a, b, precision=precision)).lower(x, x)


@pytest.mark.parametrize(
    ("precision", "tpu", "gpu", "cpu"),
    [
        (None, "bf16x1", "tf32", "float32"),
        ("high", "bf16x1", "tf32", "float32"),  # the other product is DEFAULT: the coarsest
        ("highest", "bf16x1", "tf32", "float32"),
    ],
)
def test_the_coarsest_product_of_the_program_sets_its_arithmetic(
    precision: str | None, tpu: str, gpu: str, cpu: str
) -> None:
    low = lowered(precision)
    assert program_arithmetic(low, "tpu") == tpu
    assert program_arithmetic(low, "gpu") == gpu
    assert program_arithmetic(low, "cpu") == cpu


def test_precision_and_algorithms_are_read_from_the_program() -> None:
    def one(precision: object) -> Arithmetic | None:
        low = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision)).lower(F32, F32)
        return program_arithmetic(low, "tpu")

    assert one("highest") is Arithmetic.BF16X6
    assert one("high") is Arithmetic.BF16X3
    assert one(jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3) is Arithmetic.BF16X3
    assert one(jax.lax.DotAlgorithmPreset.BF16_BF16_F32) is Arithmetic.BF16X1
    # No float32 contraction: nothing for the platform to round.
    assert program_arithmetic(jax.jit(jnp.sum).lower(F32), "tpu") is None
    bf16 = jnp.ones((8, 8), jnp.bfloat16)
    assert program_arithmetic(jax.jit(jnp.matmul).lower(bf16, bf16), "tpu") is None


def test_an_exported_programs_precision_is_its_own() -> None:
    """`default_matmul_precision` cannot change an exported program: its precision is in
    its StableHLO, and that is what is read."""
    exported = jax.export.export(jax.jit(jnp.matmul), platforms=["cpu", "tpu"])(F32, F32)
    restored = jax.export.deserialize(exported.serialize())
    with jax.default_matmul_precision("highest"):
        low = jax.jit(restored.call).lower(F32, F32)
    assert program_arithmetic(low, "tpu") is Arithmetic.BF16X1


def test_tolerances_follow_the_arithmetic() -> None:
    assert coarsest([Arithmetic.FLOAT32, Arithmetic.BF16X1, Arithmetic.TF32]) is Arithmetic.BF16X1
    assert coarsest([]) is None
    assert arithmetic_of("tpu", "default") is Arithmetic.BF16X1
    assert arithmetic_of("cpu", "default") is Arithmetic.FLOAT32
    assert result_tolerance("float32", Arithmetic.BF16X1, 1e-4) == 2e-2
    assert result_tolerance("float32", Arithmetic.FLOAT32, 1e-4) == 1e-4
    assert result_tolerance("bfloat16", Arithmetic.FLOAT32, 2e-2) == 2e-2
    assert result_tolerance("int32", Arithmetic.BF16X1, 0.0) == 0.0
    matmul = MatmulParams(m=64, n=64, k=64)
    assert matmul.tolerance_at(Arithmetic.FLOAT32) == pytest.approx(1e-5)
    assert matmul.tolerance_at(Arithmetic.BF16X1) == 1e-2
    assert matmul.tolerance() == 1e-2  # unknown: what any platform does at DEFAULT


def verdict(error: float, arithmetic: str | None, tolerance: float = 0.5) -> Correctness:
    """A worker's verdict on one float32 result, claiming `arithmetic` and `tolerance`."""
    result = ResultCheck(name="out0", passed=True, error=error, tolerance=tolerance)
    return Correctness(
        passed=True, error=error, tolerance=tolerance, arithmetic=arithmetic, results=[result]
    )


def test_the_server_recomputes_a_catalog_workloads_arithmetic() -> None:
    params = MatmulParams(m=64, n=64, k=64)
    on_tpu = server_correctness(verdict(5e-3, "float32"), params, None, PathId.JAX_TPU)
    assert (on_tpu.arithmetic, on_tpu.tolerance, on_tpu.passed) == ("bf16x1", 1e-2, True)
    assert on_tpu.arithmetic_words == "one bfloat16 pass per float32 product"
    # The same error on a CPU, whose DEFAULT products are float32, fails, whatever was posted.
    on_cpu = server_correctness(verdict(5e-3, "bf16x1"), params, None, PathId.JAX_CPU)
    assert (on_cpu.arithmetic, on_cpu.passed) == ("float32", False)
    assert on_cpu.tolerance == pytest.approx(1e-5)


def test_the_server_bounds_an_uploads_arithmetic_to_its_platforms() -> None:
    params = ExportedParams(artifact="0" * 64)
    dtypes = {"out0": "float32"}
    kept = server_correctness(verdict(6e-3, "bf16x1"), params, dtypes, PathId.JAX_TPU)
    assert (kept.arithmetic, kept.tolerance, kept.passed) == ("bf16x1", 2e-2, True)
    # A TPU has no TF32, a CPU no bfloat16 pass: the claim is dropped and no allowance made.
    for path, claimed in ((PathId.JAX_TPU, "tf32"), (PathId.JAX_CPU, "bf16x1")):
        dropped = server_correctness(verdict(6e-3, claimed), params, dtypes, path)
        assert (dropped.arithmetic, dropped.tolerance, dropped.passed) == (None, 1e-4, False)
    strict = ExportedParams(artifact="0" * 64, check="strict")
    held = server_correctness(verdict(6e-3, "bf16x1"), strict, dtypes, PathId.JAX_TPU)
    assert (held.arithmetic, held.tolerance, held.passed) == ("bf16x1", 1e-4, False)


def test_a_cpu_run_is_checked_at_float32() -> None:
    from workers.run.engine import run_job

    job = JobSpec.model_validate(
        {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "measure": {"samples": 3}}
    )
    run = run_job(job)
    assert run.correctness is not None and run.correctness.passed
    assert run.correctness.arithmetic == "float32"
    assert run.correctness.tolerance == pytest.approx(1e-5)
