"""The HLO diff under load, against a real server process: `pairs` diffs of two ~4 MiB
modules asked for at once, while the server's memory is sampled and /healthz is timed from
another process; then the server left alone for `settle_s` to see whether it gives the
memory back.

The modules are tests/app/hlo_modules.py's `large(3000)` against its variant (4.17 MB of
text each, under the default storage cap of 4 MiB, 15,000 paired instructions), each pair
with its own module name so that no two pairs share a cache entry. All runs are posted
through the worker API first, as a worker posts them. The server's memory is that of its
process and every process under it (the diffs' children) as the sum of their proportional
set sizes (a page a forked child shares with the server counts once), sampled every 0.1 s,
with the server process's own resident size beside it; "idle" is that figure once the
runs are stored and the server has been quiet for a few seconds. Last, `pairs` requests for one
more pair, all at once, show whether identical requests share one computation.

    .venv/bin/python bench/hlo_diff_load.py [--pairs 20] [--layers 3000] [--settle-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from netload import HOST, free_port, healthz, serve  # noqa: E402

MB = 1e6
QUIET_S = 5.0
"""How long the server is left alone after the runs are posted before its idle size is read."""


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pss(pid: int) -> int:
    """The proportional set size of process `pid`: its resident pages, each page it shares
    with other processes divided among them."""
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
        return next(int(x.split()[1]) * 1024 for x in rollup if x.startswith("Pss:"))


def tree_memory(pid: int) -> int:
    """The memory of process `pid` and every process under it: the sum of their
    proportional set sizes, so a page a forked child still shares with the server counts
    once (summed RSS would count it in both)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += pss(p)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


@dataclass
class Sampler:
    """The server's memory with its children (`tree_memory`) and its own resident size,
    every `every_s`, with the time of each sample."""

    pid: int
    every_s: float = 0.1
    samples: list[tuple[float, int]] = field(default_factory=list)
    alone: list[int] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), tree_memory(self.pid)))
            self.alone.append(rss(self.pid))
            await asyncio.sleep(self.every_s)

    def peak(self, since: float, until: float) -> tuple[int, int]:
        """The highest sample in [since, until], with its children and alone."""
        kept = [k for k, (t, _) in enumerate(self.samples) if since <= t <= until]
        return max(self.samples[k][1] for k in kept), max(self.alone[k] for k in kept)


def pair_texts(index: int, layers: int) -> tuple[str, str]:
    """Pair `index`'s two modules: the large module and its variant, named for the pair."""
    from tests.app.hlo_modules import large

    head = "HloModule jit_large,"
    own = f"HloModule jit_large_{index},"
    return large(layers).replace(head, own, 1), large(layers, variant=True).replace(head, own, 1)


async def post_pairs(client: httpx.AsyncClient, count: int, layers: int) -> list[tuple[str, str]]:
    """`count` pairs of runs posted through the worker API: their job ids."""
    from tests.app.bench_fakes import MATMUL, FakeWorker

    worker = FakeWorker(client)
    await worker.register()
    pairs: list[tuple[str, str]] = []
    for index in range(count):
        ids: list[str] = []
        for text in pair_texts(index, layers):
            queued = await client.post("/api/v1/jobs", json=MATMUL)
            assert queued.status_code == 202, queued.text
            grant = await worker.lease()
            assert grant is not None
            posted = await worker.finish(grant, artifacts={"hlo": text})
            assert posted.status_code == 200, posted.text
            ids.append(str(grant["job_id"]))
        pairs.append((ids[0], ids[1]))
    return pairs


async def ask(client: httpx.AsyncClient, pair: tuple[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    r = await client.get(f"/api/v1/compare/hlo-diff?a={pair[0]}&b={pair[1]}")
    return r.status_code, time.perf_counter() - started


async def probe(port: int) -> None:
    """/healthz every 0.1 s until stdin closes: one JSON line (monotonic start, status,
    seconds) each, on stdout."""
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)
    while not closed.done():
        started = time.monotonic()
        try:
            status, seconds = await asyncio.wait_for(healthz(port), 30)
        except (OSError, TimeoutError):
            status, seconds = 0, time.monotonic() - started
        print(json.dumps([started, status, seconds]), flush=True)
        await asyncio.sleep(0.1)


def start_probe(port: int) -> subprocess.Popen[str]:
    """`probe` in a process of its own (its own event loop: this one's load does not delay
    the timing)."""
    command = [sys.executable, __file__, "--probe", str(port)]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    return subprocess.Popen(command, text=True, **pipes)  # type: ignore[call-overload]


def probe_results(probe: subprocess.Popen[str]) -> list[tuple[float, int, float]]:
    out, _ = probe.communicate("", timeout=60)
    return [tuple(json.loads(line)) for line in out.splitlines()]  # type: ignore[misc]


async def quiet_size(sampler: Sampler) -> int:
    """The server's size once it has been left alone for QUIET_S."""
    await asyncio.sleep(QUIET_S)
    return sampler.samples[-1][1]


async def settle(sampler: Sampler, idle: int, settle_s: float) -> float | None:
    """Seconds after the load until the server is back within 50 MB of `idle` (and stays
    so to the end of `settle_s`); None if it never is."""
    ended = time.monotonic()
    await asyncio.sleep(settle_s)
    after = [(t - ended, b) for t, b in sampler.samples if t >= ended]
    back: float | None = None
    for t, b in after:
        if b > idle + 50 * MB:
            back = None
        elif back is None:
            back = t
    return back


@dataclass
class Load:
    """What one load did to the server."""

    idle: int
    idle_alone: int
    peak: int
    peak_alone: int
    back_s: float | None
    at_end: int
    answers: list[tuple[int, float]]
    seconds: float
    healthz_during: list[float]
    healthz_after: list[float]


async def load(client: httpx.AsyncClient, pid: int, port: int, pairs: list[tuple[str, str]],
               settle_s: float) -> Load:  # fmt: skip
    """Every pair's diff asked for at once, then `settle_s` of quiet."""
    sampler = Sampler(pid)
    sampling = asyncio.create_task(sampler.run())
    idle = await quiet_size(sampler)
    idle_alone = sampler.alone[-1]
    prober = start_probe(port)
    started = time.monotonic()
    answers = await asyncio.gather(*(ask(client, p) for p in pairs))
    ended = time.monotonic()
    back_s = await settle(sampler, idle, settle_s)
    sampling.cancel()
    probes = probe_results(prober)
    peak, alone = sampler.peak(started, ended)
    return Load(
        idle=idle,
        idle_alone=idle_alone,
        peak=peak,
        peak_alone=alone,
        back_s=back_s,
        at_end=sampler.samples[-1][1],
        answers=answers,
        seconds=ended - started,
        healthz_during=[s for t, c, s in probes if started <= t <= ended],
        healthz_after=[s for t, c, s in probes if t > ended],
    )


async def measure(pairs: int, layers: int, settle_s: float) -> dict[str, Any]:
    from tests.app.bench_fakes import WORKER_TOKEN

    port = free_port()
    with (
        tempfile.TemporaryDirectory() as scratch,
        serve(port, Path(scratch), WORKER_TOKEN=WORKER_TOKEN, SUBMIT_RATE="100000") as proc,
    ):
        timeout, limits = httpx.Timeout(900.0), httpx.Limits(max_connections=pairs + 5)
        base = f"http://{HOST}:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as client:
            started_rss = tree_memory(proc.pid)
            ids = await post_pairs(client, pairs + 1, layers)
            found = await load(client, proc.pid, port, ids[:pairs], settle_s)
            shared_started = time.perf_counter()
            shared = await asyncio.gather(*(ask(client, ids[pairs]) for _ in range(pairs)))
            shared_s = time.perf_counter() - shared_started
            again = await ask(client, ids[pairs])
    return {
        "started": started_rss,
        "load": found,
        "shared_s": shared_s,
        "shared": sorted({c for c, _ in shared}),
        "again_s": again[1],
    }


def _ms(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    return f"median {statistics.median(seconds) * 1e3:.0f} ms, max {max(seconds) * 1e3:.0f} ms"


def report(r: dict[str, Any], pairs: int) -> None:
    found: Load = r["load"]
    codes = sorted({c for c, _ in found.answers})
    seconds = [s for _, s in found.answers]
    back = "never" if found.back_s is None else f"{found.back_s:.1f} s"
    print(f"server at start: {r['started'] / MB:.0f} MB; idle with the runs stored: "
          f"{found.idle / MB:.0f} MB")  # fmt: skip
    print(f"{pairs} diffs at once: {codes}, answered in {min(seconds):.1f} to "
          f"{max(seconds):.1f} s; peak {found.peak / MB:.0f} MB "
          f"({(found.peak - found.idle) / MB:+.0f} MB over idle; the server process's own "
          f"resident size {found.idle_alone / MB:.0f} MB idle, {found.peak_alone / MB:.0f} MB "
          f"at most)")  # fmt: skip
    print(f"back within 50 MB of idle {back} after the last answer; "
          f"{(found.at_end - found.idle) / MB:+.0f} MB over idle after that quiet")  # fmt: skip
    print(f"/healthz while they ran: {len(found.healthz_during)} probes, "
          f"{_ms(found.healthz_during)}; after: {_ms(found.healthz_after)}")  # fmt: skip
    print(f"{pairs} identical requests at once: {r['shared']} in {r['shared_s']:.1f} s; "
          f"the same again (cached) {r['again_s'] * 1e3:.0f} ms")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--layers", type=int, default=3000)
    parser.add_argument("--settle-s", type=float, default=60.0)
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        asyncio.run(probe(args.probe))
        return 0
    report(asyncio.run(measure(args.pairs, args.layers, args.settle_s)), args.pairs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
