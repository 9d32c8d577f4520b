"""A run page opens with a short table of contents whose every link lands on a section of
the page (plain anchors: it works without JavaScript), and a compile-only run's
reproduce command carries no sampling options it never used."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.app.bench_fakes import MATMUL, FakeWorker, run_result

pytestmark = pytest.mark.anyio


async def _run_page(client: httpx.AsyncClient, spec: dict[str, object], timed: bool) -> str:
    worker = FakeWorker(client)
    await worker.register()
    assert (await client.post("/api/v1/jobs", json=spec)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    result = run_result(grant["spec"])
    if not timed:
        result.update(measurements=[], correctness=None)
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": result}
    assert (await worker.post("result", body)).status_code == 200
    return (await client.get(f"/runs/{grant['job_id']}")).text


def _nav(page: str) -> list[tuple[str, str]]:
    nav = page.split('<nav class="run-nav"', 1)[1].split("</nav>", 1)[0]
    return re.findall(r'<a href="#([^"]+)">([^<]+)</a>', nav)


async def test_every_link_of_the_table_of_contents_lands_on_its_section(
    bench_client: httpx.AsyncClient,
) -> None:
    page = await _run_page(bench_client, MATMUL, timed=True)
    links = _nav(page)
    names = [name for _, name in links]
    assert names[0] == "summary" and names[-1] == "reproduce" and "samples" in names
    for anchor, _ in links:
        assert f'id="{anchor}"' in page, anchor


async def test_a_compile_only_runs_page_offers_no_samples_and_reproduces_without_them(
    bench_client: httpx.AsyncClient,
) -> None:
    page = await _run_page(bench_client, {**MATMUL, "stages": ["compile"]}, timed=False)
    assert "samples" not in [name for _, name in _nav(page)]
    command = page.split('id="repro-h"', 1)[1].split("</code>", 1)[0]
    assert "--stages compile" in command
    assert "--samples" not in command and "--mode" not in command
