"""What the HLO diff of two large programs costs, first and again: the first request to
`GET /api/v1/compare/hlo-diff` (the server reads both stored texts; a child process forked
for the diff pairs them and builds the report) against a repeated one (the same pair,
answered from the cache), as a ratio.

The two programs are synthesized (tests/app/hlo_modules.py `large`): `--layers` fused
layers of five top-level instructions each, 10,000 and more at the default, with every
instruction renamed on side B, every tenth layer laid out differently, every hundredth
fusion split in two and an all-reduce added every five hundred layers. Both are posted as
runs through the worker API of an in-process server, as a worker posts them. Python's
cycle collector stays on in the server, as always; the time it took there during the first
request is measured beside it (an observer, `gc.callbacks`, which changes nothing), and so
is the CPU time of the server and the diff's child, which other programs on a shared
machine disturb less than the clock.

    .venv/bin/python bench/hlo_diff.py [--layers 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MAX = 64 * 1024 * 1024
"""The server's stored-text cap here, above the programs' size: the default (4 MiB) would
cut a larger pair, which is then diffed only as far as it goes."""


async def _post(client: Any, worker: Any, hlo: str) -> str:
    from tests.app.bench_fakes import MATMUL

    queued = await client.post("/api/v1/jobs", json=MATMUL)
    assert queued.status_code == 202, queued.text
    grant = await worker.lease()
    assert grant is not None
    posted = await worker.finish(grant, artifacts={"hlo": hlo})
    assert posted.status_code == 200, posted.text
    return str(grant["job_id"])


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the diffs')."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Collector:
    """CPU seconds the cycle collector took, and its full collections, while `on`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self.on = False
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._started = time.process_time()
            return
        self.seconds += time.process_time() - self._started
        self.full += info["generation"] == 2


async def measure(layers: int, repeats: int) -> dict[str, Any]:
    """Seconds of the first request and the median of `repeats` repeated ones."""
    import httpx

    from app.ir.hlo_diff import diff_modules
    from app.main import create_app
    from app.settings import Settings
    from tests.app.bench_fakes import WORKER_TOKEN, FakeWorker
    from tests.app.hlo_modules import large

    text_a, text_b = large(layers), large(layers, variant=True)
    started = time.perf_counter()
    direct = diff_modules(text_a, text_b)
    matcher_s = time.perf_counter() - started
    instructions = (len(direct.a.units), len(direct.b.units))
    del direct  # not kept while the server works: it would double the heap the collector walks
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(
            DB=Path(scratch) / "bench.sqlite3", WORKER_TOKEN=WORKER_TOKEN, ARTIFACT_MAX_BYTES=MAX
        )
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            worker = FakeWorker(client)
            await worker.register()
            a, b = await _post(client, worker, text_a), await _post(client, worker, text_b)
            url = f"/api/v1/compare/hlo-diff?a={a}&b={b}"
            collector = Collector()
            gc.callbacks.append(collector)
            collector.on = True
            started, cpu = time.perf_counter(), _cpu()
            first = await client.get(url)
            first_s, first_cpu = time.perf_counter() - started, _cpu() - cpu
            collector.on = False
            gc.callbacks.remove(collector)
            assert first.status_code == 200, first.text
            again: list[float] = []
            for _ in range(repeats):
                started = time.perf_counter()
                answer = await client.get(url)
                again.append(time.perf_counter() - started)
                assert answer.status_code == 200
    summary = first.json()["summary"]
    return {
        "instructions": instructions,
        "lines": (text_a.count("\n"), text_b.count("\n")),
        "matcher_s": matcher_s,
        "first_s": first_s,
        "first_cpu_s": first_cpu,
        "collector_s": collector.seconds,
        "full_collections": collector.full,
        "again_s": statistics.median(again),
        "summary": summary,
        "bytes": len(first.content),
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    r = asyncio.run(measure(args.layers, args.repeats))
    (na, nb), (la, lb) = r["instructions"], r["lines"]
    print(f"programs: {na:,} and {nb:,} paired instructions ({la:,} and {lb:,} lines of HLO)")
    print(f"outcome: {r['summary']} ({r['bytes']:,} bytes of JSON)")
    print(f"matcher alone (diff_modules):     {r['matcher_s']:.3f} s")
    print(
        f"first request (read, diff, JSON):  {r['first_s']:.3f} s "
        f"({r['first_cpu_s']:.3f} s of CPU with the diff's child; the server's cycle "
        f"collector {r['collector_s']:.3f} s, {r['full_collections']} full collections)"
    )
    print(f"repeated request (cached, median of {r['repeats']}): {r['again_s']:.3f} s")
    print(f"first ÷ repeated: {r['first_s'] / r['again_s']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
