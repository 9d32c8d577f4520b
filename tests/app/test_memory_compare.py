"""Two compiled runs' peaks side by side on the compare page: real compiles of one bf16
program for a TPU v6e chip and an H100 (neither here), posted by a played worker; the
peaks by kind, by source line and by instruction, and the biggest difference in words.
The sentence itself is checked on made-up reports for both of its forms."""

from __future__ import annotations

import re
from functools import cache
from html import unescape
from typing import Any

import httpx
import pytest

from app.pages.compare.memory_peaks import Side, aligned, headline, peaks_compared
from tests.app.ir_runs import post_run
from workers.protocol import JobSpec, MemoryBuffer, MemoryReport
from workers.run.engine import run_job

pytestmark = pytest.mark.anyio

BF16 = {"workload": "matmul", "params": {"m": 1000, "n": 1000, "k": 1000, "dtype": "bfloat16"}}


@cache
def compiled(path: str, target: str) -> dict[str, Any]:
    spec = {**BF16, "path": path, "target": target, "stages": ["compile"], "dumps": "later"}
    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


async def test_a_v6e_and_an_h100_compile_line_up_their_peaks(
    bench_client: httpx.AsyncClient,
) -> None:
    a = await post_run(bench_client, compiled("jax-tpu", "v6e:1x1"))
    b = await post_run(bench_client, compiled("jax-gpu", "h100:1"))
    page = await bench_client.get(f"/compare?a={a}&b={b}")
    assert page.status_code == 200
    section = page.text.split('id="compare-memory-h"', 1)[1].split("</section>", 1)[0]
    words = text(section)
    # bf16 [1000, 1000] is no multiple of v6e's (16, 128) tiles: its buffers are padded.
    assert re.search(
        r"At the peak, v6e:1x1 holds [\d.]+ [kM]B for .* padded\) where h100:1 holds", words
    )
    assert f'href="/runs/{a}/memory"' in section and f'href="/runs/{b}/memory"' in section
    assert "By source line" in words and "By instruction" in words
    assert "matmul.py:" in words  # the output lines up by the catalog's own line
    twin = (await bench_client.get(f"/compare.json?a={a}&b={b}")).json()
    assert twin["peaks"]["headline"].startswith("At the peak, v6e:1x1 holds")


def report(*buffers: tuple[str, int, int, str | None]) -> MemoryReport:
    """A made-up report whose buffers are all live at the peak: (instruction, bytes,
    logical bytes, source)."""
    made = [
        MemoryBuffer(bytes=n, logical_bytes=logical, kind="temporary", instructions=[name],
                     source=source, live=[0, 1], live_at_peak=True)
        for name, n, logical, source in buffers
    ]  # fmt: skip
    total = sum(b.bytes for b in made)
    curve = [[0, total], [1, total]]
    kinds = {"temporary": total}
    return MemoryReport(
        peak_bytes=total, peak_step=0, steps=2, buffers=made, by_kind=kinds, timeline=curve
    )


def test_the_sentence_names_what_only_one_side_holds_and_its_padding() -> None:
    a = Side("A", "v6e:1x1", "a", report(("fusion.48", 1_200_000_000, 1_000_000_000, "m.py:7")))
    b = Side("B", "h100:1", "b", report(("gemm.2", 10_000, 10_000, "m.py:9")))
    rows = aligned(a, b, lambda v: v.source or "")
    assert headline(a, b, rows) == (
        "At the peak, v6e:1x1 holds 1.2 GB of padded fusion.48 (m.py:7) that h100:1 does not."
    )
    same = Side("B", "h100:1", "b", report(("gemm.3", 400_000_000, 400_000_000, "m.py:7")))
    assert headline(a, same, aligned(a, same, lambda v: v.source or "")) == (
        "At the peak, v6e:1x1 holds 1.2 GB for m.py:7 (fusion.48, padded) where h100:1 holds "
        "400 MB."
    )


def test_a_side_without_a_report_is_said_not_skipped() -> None:
    with_report = {"id": "a", "target": "v6e:1x1", "run": None}
    assert peaks_compared(with_report, {"id": "b", "target": "h100:1", "run": None}) is None
