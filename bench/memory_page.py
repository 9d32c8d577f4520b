"""The memory page of a large program, timed server-side (bench/memory_report.py --render).

A chain of 1,000 small matrix products with a tanh each (about 11,000 HLO instructions
once optimized for this CPU) is compiled through the worker's own dump-and-read path; its
report, HLO and memory_analysis() go into a real CPU run of the catalog's matmul, posted
by a played worker into an in-process app. Then `/runs/{id}/memory` (every listed buffer),
the run page with its Memory section, and the API's JSON are each fetched `rounds` times
through ASGI, after one untimed fetch: the medians are what the server spends on them, in
wall seconds and in CPU seconds of this process (on a loaded machine the second says more).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

LINKS = 1_000


def chain(x: Any, ws: Any) -> Any:
    import jax.numpy as jnp

    sums = []
    for i in range(LINKS):
        x = jnp.tanh(x @ ws[i])
        if i % 50 == 0:
            sums.append(x.sum())
    return x, jnp.stack(sums)


def large_run() -> tuple[dict[str, Any], int]:
    """A CPU run carrying the large program's report, and its instruction count."""
    import jax
    import jax.numpy as jnp

    from workers.compiler.analysis import memory_analysis
    from workers.compiler.memory_dump import dump_folder, dump_options, read_plan, report_of
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    x = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    ws = jax.ShapeDtypeStruct((LINKS, 64, 64), jnp.float32)
    lowered = jax.jit(chain).lower(x, ws)
    with dump_folder() as folder:
        compiled = lowered.compile(compiler_options=dump_options(folder))
        plan = read_plan(folder)
    hlo = compiled.as_text()
    report = report_of(plan, hlo, vmem=False)
    assert report is not None
    spec = {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "measure": {"samples": 3}}
    small = run_job(JobSpec.model_validate(spec))
    run = small.model_copy(
        update={
            "artifacts": small.artifacts.model_copy(update={"hlo": hlo}),
            "memory_analysis": memory_analysis(compiled),
            "memory_report": report,
        }
    )
    instructions = sum(1 for line in hlo.splitlines() if " = " in line)
    return run.model_dump(mode="json"), instructions


async def measure(rounds: int) -> dict[str, Any]:
    import httpx

    from app.main import create_app
    from app.settings import Settings
    from tests.app.bench_fakes import WORKER_TOKEN, FakeWorker

    result, instructions = large_run()
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(
            DB=Path(scratch) / "bench.sqlite3", WORKER_TOKEN=WORKER_TOKEN,
            ARTIFACT_MAX_BYTES=64 * 1024 * 1024,
        )  # fmt: skip
        transport = httpx.ASGITransport(app=create_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            worker = FakeWorker(client)
            await worker.register()
            assert (await client.post("/api/v1/jobs", json=result["job"])).status_code == 202
            grant = await worker.lease()
            assert grant is not None
            posted = await worker.finish(grant, **{**result, "job": grant["spec"]})
            assert posted.status_code == 200, posted.text
            job = grant["job_id"]
            urls = {
                "memory page": f"/runs/{job}/memory",
                "run page": f"/runs/{job}",
                "API": f"/api/v1/runs/{job}/memory",
            }
            times: dict[str, tuple[float, float]] = {}
            for name, url in urls.items():
                assert (await client.get(url)).status_code == 200  # untimed first fetch
                wall, cpu = [], []
                for _ in range(rounds):
                    started, used = time.perf_counter(), time.process_time()
                    answer = await client.get(url)
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - used)
                    assert answer.status_code == 200
                times[name] = (statistics.median(wall), statistics.median(cpu))
            report = (await client.get(urls["API"])).json()
    return {"instructions": instructions, "times": times, "report": report}


def render(rounds: int) -> None:
    """Part 2 of bench/memory_report.py: prints the medians against the 300 ms goal."""
    found = asyncio.run(measure(rounds))
    report = found["report"]
    print(
        f"a program of {found['instructions']:,} HLO instructions ({report['steps']:,} steps "
        f"scheduled, {len(report['buffers'])} buffers listed + {report['other']['count']:,} "
        f"counted, {len(report['timeline']):,} curve points); medians of {rounds}:"
    )
    for name, (wall, cpu) in found["times"].items():
        print(f"  {name}: {1000 * wall:.0f} ms wall, {1000 * cpu:.0f} ms CPU (goal < 300 ms)")
