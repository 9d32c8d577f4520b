"""Pallas on the pages, from real runs (libtpu, the CUDA plugin, the interpreter), posted by
a played worker: the kernel panel, the kernels' own IR with lines linked to the kernel
body, TPU bundles, each kernel's passes step by step, a CPU run that shows no speed, and
XLA against Pallas on one target."""

from __future__ import annotations

import re
from functools import cache
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.ir_runs import post_run
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TPU_MATMUL = {
    "workload": "matmul",
    "path": "jax-tpu",
    "target": "v6e:1x1",
    "params": {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16"},
}


@cache
def made(kind: str) -> dict[str, Any]:
    """One real run per kind, made once for the module."""
    spec: dict[str, Any] = {
        "tpu-pallas": {
            **TPU_MATMUL,
            "params": {**TPU_MATMUL["params"], "kernel": "pallas"},
            "measure": {"pipeline": True},
        },
        "tpu-xla": TPU_MATMUL,
        "h100-triton": {
            "workload": "matmul",
            "path": "jax-gpu",
            "target": "h100:1",
            "params": {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16", "kernel": "pallas"},
        },
        "cpu-interpret": {
            "workload": "elementwise",
            "params": {"n": 1 << 14, "ops": 4, "kernel": "pallas"},
            "measure": {"samples": 5},
        },
    }[kind]
    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")


def text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:500]
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", response.text)))


async def test_a_tpu_pallas_run_shows_its_kernel_schedule_and_ir(
    bench_client: httpx.AsyncClient,
) -> None:
    job = await post_run(bench_client, made("tpu-pallas"))
    page = text(await bench_client.get(f"/runs/{job}"))
    assert "A Pallas kernel: Boundary's own kernel (workers/pallas/matmul.py)" in page
    assert "blocks block_m=512 block_n=512 block_k=512" in page
    schedule = made("tpu-pallas")["target"]["kernels"][0]
    assert re.search(rf"boundary_matmul\S*\s+{schedule['bundles']:,}\s+", page)
    assert "a count of VLIW bundles, not a time" in page
    for name in ("mosaic", "bundles"):
        assert f"/runs/{job}/ir/{name}" in (await bench_client.get(f"/runs/{job}")).text
    mosaic = (await bench_client.get(f"/runs/{job}/ir/mosaic")).text
    assert "tpu.matmul" in unescape(mosaic)
    # Each Mosaic line links to the kernel body: the jnp.dot line of the TPU kernel.
    line = _line_of("workers/pallas/matmul.py", "acc_ref[...] += jnp.dot(")
    assert f'data-src="{line}"' in mosaic
    assert "workers/pallas/matmul.py, from line 1" in mosaic  # the kernel module beside it
    bundles = unescape((await bench_client.get(f"/runs/{job}/ir/bundles?q=vmatpush")).text)
    assert "vmatpush" in bundles and "matching" in bundles.lower()


def _line_of(path: str, needle: str) -> int:
    lines = Path(path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


async def test_each_kernel_pass_is_a_step_with_its_diff_and_source_links(
    bench_client: httpx.AsyncClient,
) -> None:
    job = await post_run(bench_client, made("tpu-pallas"))
    overview = text(await bench_client.get(f"/runs/{job}/pipeline"))
    assert "Each Pallas kernel's own passes" in overview and "boundary_matmul" in overview
    base = f"/runs/{job}/pipeline/kernels/boundary_matmul"
    page = (await bench_client.get(base)).text
    assert '<p class="pipeline-name"><strong>mosaic</strong></p>' in page
    assert '<p class="pipeline-name"><strong>llo</strong></p>' in page
    step = re.search(r'href="[^"]+\?step=(\d+)#diff">(post-apply-vector-layout[^<]*)<', page)
    assert step is not None, "a Mosaic pass that changed the kernel links to its diff"
    diff = await bench_client.get(f"{base}?step={step.group(1)}")
    assert 'class="d-add"' in diff.text and f"What {step.group(2)} changed" in text(diff)
    ir = (await bench_client.get(f"{base}/steps/{step.group(1)}")).text
    assert 'data-src="' in ir  # lines linked to the kernel body's source lines
    raw = await bench_client.get(f"{base}/steps/{step.group(1)}.txt")
    assert raw.status_code == 200 and "func.func" in raw.text
    missing = await bench_client.get(f"/runs/{job}/pipeline/kernels/no_such_kernel")
    assert missing.status_code == 404


async def test_a_gpu_run_lists_each_kernels_registers_and_spills(
    bench_client: httpx.AsyncClient,
) -> None:
    job = await post_run(bench_client, made("h100-triton"))
    page = text(await bench_client.get(f"/runs/{job}"))
    assert "compiled by Triton" in page
    kernel = next(
        r for r in made("h100-triton")["kernel_resources"] if r["name"] == "boundary_matmul"
    )
    assert re.search(rf"boundary_matmul\s+sm_90a\s+{kernel['registers']}\s+0\s+0", page)
    sass = (await bench_client.get(f"/runs/{job}/ir/sass")).text
    assert "HGMMA" in sass and 'list="sass-terms"' in sass
    triton = unescape((await bench_client.get(f"/runs/{job}/ir/triton")).text)
    assert "tt.dot" in triton


async def test_ir_that_maps_to_no_source_line_gets_the_whole_width(
    bench_client: httpx.AsyncClient,
) -> None:
    """SASS and PTX name no line of the kernel's Python source: that source, shown beside
    them from its docstring on, took half the width (and came first on a phone)."""
    job = await post_run(bench_client, made("h100-triton"))
    for name in ("sass", "ptx"):
        html = (await bench_client.get(f"/runs/{job}/ir/{name}")).text
        assert 'class="ir-source"' not in html and "ir-panes with-source" not in html
        assert (
            f"No line of the {name} text maps to a line of workers/pallas/matmul.py, so that "
            "source is not shown beside it." in text_of(html)
        )
    # Triton's IR names lines of the kernel: it keeps the source beside it.
    triton = (await bench_client.get(f"/runs/{job}/ir/triton")).text
    assert 'class="ir-source"' in triton and "No line of the" not in triton


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html)))


async def test_an_interpreted_run_is_checked_and_shows_no_speed(
    bench_client: httpx.AsyncClient,
) -> None:
    run = made("cpu-interpret")
    job = await post_run(bench_client, run)
    page = text(await bench_client.get(f"/runs/{job}"))
    assert "Pallas interpret mode: checked on the CPU, no kernel speed" in page
    assert "Correct within tolerance" in page and "its times are no kernel's speed" in page
    assert "Withheld: Pallas interpret mode" in page and "times withheld" in page
    assert not re.search(r"\d+(\.\d+)? ?[GMT]FLOP/s", page)
    samples = (await bench_client.get(f"/runs/{job}/samples.csv")).text.strip().splitlines()
    assert len(samples) == 1  # the header alone: not one time


async def test_xla_against_pallas_on_one_target_compares_compiler_output_only(
    bench_client: httpx.AsyncClient,
) -> None:
    a = await post_run(bench_client, made("tpu-xla"))
    b = await post_run(bench_client, made("tpu-pallas"))
    response = await bench_client.get(f"/compare?a={a}&b={b}")
    page = text(response)
    assert "one variable changed (implementation)" in page
    assert "XLA's own kernels" in page and "A Pallas kernel" in page
    assert "TPU bundles per kernel" in page
    for run in (made("tpu-xla"), made("tpu-pallas")):
        first = run["target"]["kernels"][0]
        assert f"{first['bundles']:,}" in page
    assert 'custom_call_target="tpu_custom_call"' in page  # the HLO diff: a custom call …
    assert "fusion" in page  # … where XLA has its fusion
    assert "no execution ratio exists" in page
    twin = (await bench_client.get(f"/compare.json?a={a}&b={b}")).json()
    assert twin["result"]["ratio"] is None
    implementations = [
        e for e in twin["guard"]["experimental"] if e["variable"] == "implementation"
    ]
    assert implementations == [
        {
            "variable": "implementation",
            "a": "XLA",
            "b": "Pallas (mosaic-tpu), block_m=512 block_n=512 block_k=512",
        }
    ]
    record = await bench_client.get(f"/compare/decision.md?a={a}&b={b}")
    assert record.status_code == 422  # no decision record without execution
