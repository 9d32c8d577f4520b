"""The server and a worker that holds the chip, end to end on the chip's host over a unix
socket: jobs through `boundary run --server`, MCP and the API (timed, profiled, and a
compile for another chip without it), the pages of the chip's runs fetched over the
socket, and a worker killed mid-job."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.device.conftest import Chip, ChipServer, stats
from tests.servers import ROOT

pytestmark = pytest.mark.device


def matmul(chip: Chip, n: int, small: int = 256, **extra: Any) -> dict[str, Any]:
    size = chip.size(n, small)
    return {
        "workload": "matmul",
        "path": chip.path,
        "params": {"m": size, "n": size, "k": size, "dtype": "bfloat16"},
        **extra,
    }


def test_boundary_run_reaches_the_chip_over_the_socket(
    chip: Chip, chip_server: ChipServer, record: Callable[..., None]
) -> None:
    size = str(chip.size(4096, 256))
    ran = chip_server.boundary(
        "run", "matmul", f"m={size}", f"n={size}", f"k={size}", "dtype=bfloat16",
        "--path", chip.path, "--samples", "20", "--json",
        "--server", f"unix:{chip_server.socket}",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    run = json.loads(ran.stdout)
    medians_us = {k: v * 1e6 for k, v in stats(run).items()}
    device = run["environment"]["device_kind"]
    record("boundary run --server unix:", valid=run["valid"], device=device, medians_us=medians_us)
    assert run["valid"]
    if chip.on_tpu:
        assert run["environment"]["device_kind"] == "TPU v5 lite"
        assert "device-time" in stats(run)


def test_mcp_runs_on_the_chip_and_compiles_for_another(
    chip: Chip, chip_server: ChipServer, record: Callable[..., None]
) -> None:
    from mcp import Client, StdioServerParameters

    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--server", f"unix:{chip_server.socket}"],
        cwd=str(ROOT),
        env={**os.environ, "BOUNDARY_JAX_PLATFORMS": "cpu"},
    )
    size = chip.size(2048, 256)
    timed = {"workload": "matmul", "path": chip.path, "timeout_s": 400,
             "params": {"m": size, "n": size, "k": size, "dtype": "bfloat16"},
             "measure": {"samples": 10}}  # fmt: skip
    compiled = {"workload": "matmul", "target": "v6e:1x1", "timeout_s": 400,
                "params": {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16"}}  # fmt: skip

    async def session() -> list[dict[str, Any]]:
        async with Client(command) as client:
            answers = []
            for tool, arguments in (("run", timed), ("compile", compiled)):
                result = await client.call_tool(tool, arguments)
                text: str = result.content[0].text  # type: ignore[union-attr]
                assert not result.is_error, text
                answers.append(json.loads(text))
            return answers

    ran, compiled_answer = anyio.run(session)
    record("mcp", run=ran, compile=compiled_answer)
    assert ran["valid"] is True
    assert compiled_answer["target"] == "v6e:1x1" and compiled_answer["valid"] is True


def test_the_chips_runs_publish_and_their_pages_render_over_the_socket(
    chip: Chip, chip_server: ChipServer, record: Callable[..., None]
) -> None:
    profiled = chip_server.run(matmul(chip, 2048, measure={"samples": 10, "profile": True}))
    compiled = chip_server.run(
        {
            "workload": "matmul",
            "path": "jax-tpu",
            "target": "v6e:1x1",
            "stages": ["compile"],
            "params": {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16"},
        }
    )
    run, target_run = profiled["run"], compiled["run"]
    record(
        "pages",
        profiled=profiled["id"],
        compiled=compiled["id"],
        profile=bool(run.get("profile")),
        compile_worker=compiled.get("worker_name"),
    )
    assert profiled["status"] == "done" and run["valid"], profiled.get("reason")
    assert run["profile"] is not None
    assert compiled["status"] == "done" and target_run["target"]["deviceless"] is True
    pages = {
        "run": f"/runs/{profiled['id']}",
        "memory": f"/runs/{profiled['id']}/memory",
        "compare": f"/compare?a={profiled['id']}&b={compiled['id']}",
    }
    for name, address in pages.items():
        page = chip_server.get(address)
        assert page.status_code == 200, (name, page.text[:500])
        assert "</html>" in page.text, name
    if chip.on_tpu:
        assert "TPU v5 lite" in chip_server.get(pages["run"]).text


def test_a_worker_killed_mid_job_gives_the_job_back_and_the_chip_free(
    chip: Chip, chip_server: ChipServer, record: Callable[..., None]
) -> None:
    long = matmul(chip, 8192, small=1024, measure={"samples": 1000})  # within the 2 GiB cap
    job_id = chip_server.submit(long)
    deadline_s = 300.0
    start = time.monotonic()
    while chip_server.get(f"/api/v1/jobs/{job_id}").json()["status"] != "running":
        assert time.monotonic() - start < deadline_s, "the job never started"
        time.sleep(0.2)
    time.sleep(3.0 if chip.on_tpu else 0.5)  # mid-job: compiled, sampling
    os.killpg(chip_server.worker.pid, signal.SIGKILL)
    chip_server.worker.wait(timeout=60)
    chip_server.start_worker()  # it can open the chip only once the killed runner let go
    job = chip_server.wait(job_id)
    listed = chip_server.get("/api/v1/jobs").json()["data"]
    record("killed worker", job=job_id, status=job["status"], attempts=job["attempts"])
    assert job["status"] == "done" and job["run"]["valid"], job.get("reason")
    assert job["attempts"] == 2
    assert [j["id"] for j in listed].count(job_id) == 1
