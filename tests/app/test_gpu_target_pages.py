"""What a GPU target's compile without the hardware shows, from real compiles (JAX's CUDA
plugin for an H100, libtpu for a v6e) posted by a played worker: the memory table's
generated code and peak rows, and the GEMM autotuning warning only where XLA chose a GEMM's
configuration without measuring it."""

from __future__ import annotations

import re
from functools import cache
from html import unescape
from typing import Any

import httpx
import pytest

from tests.app.ir_runs import post_run
from workers.protocol import JobSpec, gpu_usable_bytes, parse_target
from workers.run.engine import run_job

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MATMUL = {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16"}
RUNS: dict[str, dict[str, Any]] = {
    "v6e-xla": {"workload": "matmul", "path": "jax-tpu", "target": "v6e:1x1", "params": MATMUL},
    "h100-xla": {"workload": "matmul", "path": "jax-gpu", "target": "h100:1", "params": MATMUL},
    "h100-cublas": {
        "workload": "matmul",
        "path": "jax-gpu",
        "target": "h100:1",
        "params": MATMUL,
        "compiler_options": {"xla_gpu_enable_triton_gemm": False},
    },
    "h100-pallas": {
        "workload": "matmul",
        "path": "jax-gpu",
        "target": "h100:1",
        "params": {**MATMUL, "kernel": "pallas"},
    },
}


@cache
def made(kind: str) -> dict[str, Any]:
    """One real compile per kind, made once for the module."""
    return run_job(JobSpec.model_validate(RUNS[kind])).model_dump(mode="json")


def text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:500]
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", response.text)))


def peak_row(run: dict[str, Any]) -> str:
    """The peak row as a person reads it: its size in MB, the bytes, its share of what the
    device may hold (a GPU's usable share; a TPU run posted without usable bytes: the
    chip's published HBM, as the server's table has it)."""
    memory = run["target"]["memory"]
    chip = parse_target(run["target"]["id"]).chip
    limit = gpu_usable_bytes(chip) or memory.get("usable_bytes") or chip.device_hbm_bytes
    peak = memory["peak_bytes"]
    return f"peak (XLA) {peak / 10**6:.3g} MB {peak:,} {100 * peak / limit:.3g} %"


async def test_an_h100_compile_says_its_code_size_is_not_reported_rather_than_0_bytes(
    bench_client: httpx.AsyncClient,
) -> None:
    """XLA:GPU's compile without the device leaves memory_analysis()'s generated code at
    0 (its unloaded executable never fills it in): the page showed "generated code 0
    bytes" on the H100 side, beside libtpu's real figure on the other."""
    v6e, h100 = made("v6e-xla"), made("h100-xla")
    a = await post_run(bench_client, v6e)
    b = await post_run(bench_client, h100)
    page = text(await bench_client.get(f"/compare?a={a}&b={b}"))
    side_b = page.split("Side B", 1)[1]
    assert "generated code 0 bytes" not in page
    assert "generated code not reported" in side_b
    assert (
        "XLA:GPU's compile without the device does not report the size of its generated "
        "code (its memory_analysis() leaves the field at 0), so needed leaves it out" in side_b
    )
    code = v6e["target"]["memory"]["generated_code_bytes"]
    assert code > 0 and f"generated code {code / 10**3:.3g} kB {code:,}" in page
    # The run page says the same.
    run_page = text(await bench_client.get(f"/runs/{b}"))
    assert "generated code not reported" in run_page
    assert "generated code 0 bytes" not in run_page


async def test_the_peak_row_has_its_size_and_share_of_hbm_on_both_sides(
    bench_client: httpx.AsyncClient,
) -> None:
    a = await post_run(bench_client, made("v6e-xla"))
    b = await post_run(bench_client, made("h100-xla"))
    page = text(await bench_client.get(f"/compare?a={a}&b={b}"))
    side_a, side_b = page.split("Side B", 1)
    assert peak_row(made("v6e-xla")) in side_a
    assert peak_row(made("h100-xla")) in side_b


async def test_gemm_autotuning_is_mentioned_only_where_xla_chose_a_gemm_unmeasured(
    bench_client: httpx.AsyncClient,
) -> None:
    """A Pallas kernel is Triton code of its own: XLA has no GEMM to autotune in it, so a
    warning that XLA skipped GEMM autotuning is noise there. XLA's own matmul is a GEMM
    fusion whose tiles XLA chose without timing any: that run says so, naming it."""
    pallas = text(
        await bench_client.get(f"/runs/{await post_run(bench_client, made('h100-pallas'))}")
    )
    assert "Compiled without the hardware" in pallas
    assert "autotun" not in pallas.lower()
    xla = text(await bench_client.get(f"/runs/{await post_run(bench_client, made('h100-xla'))}"))
    fusions = made("h100-xla")["hlo_summary"]["fusions"]
    [gemm] = [f["name"] for f in fusions if "dot" in f["ops"]]  # not its split-K reduce
    assert f"XLA chose the configuration of its GEMM {gemm} (Triton) without measuring it" in xla
    assert (
        "GEMM autotuning times candidate kernels on the GPU, and this compile had none, so "
        "the GEMM backend (Triton or cuBLAS) and tile sizes may differ on a real NVIDIA H100 "
        "SXM." in xla
    )
    # Without Triton GEMMs XLA calls cuBLASLt, whose algorithm it also chose unmeasured.
    cublas = text(
        await bench_client.get(f"/runs/{await post_run(bench_client, made('h100-cublas'))}")
    )
    assert "XLA chose the configuration of its GEMM __cublas$lt$matmul (cuBLASLt)" in cublas
