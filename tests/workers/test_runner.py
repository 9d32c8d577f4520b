"""The runner child process: warm JAX, jobs through the real engine, limits and death."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from workers.agent.runner import HANG_FILE_ENV, TEST_HOOKS_ENV
from workers.agent.runner_pool import RunnerPool
from workers.agent.runner_process import RunnerFailed

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOB: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 32, "n": 32, "k": 32},
    "measure": {"samples": 3},
}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_runner_detects_runs_and_reports_progress(tmp_path: Path) -> None:
    pool = RunnerPool({**os.environ, "BOUNDARY_CACHE_DIR": str(tmp_path)})
    try:
        runner = await pool.get(1)
        caps = await runner.detect(8)
        assert caps["platform"] == "cpu"
        # The cuda path is offered (compile only) exactly where a CUDA compiler was found.
        assert caps["paths"] == ["jax-cpu"] + (["cuda"] if caps["cuda_compile"] else [])
        assert caps["cuda_run"] is False
        assert caps["device_count"] >= 1 and caps["max_virtual_devices"] == 8
        events: list[dict[str, Any]] = []
        outcome = await runner.run({"job": JOB}, 60.0, events.append)
        assert outcome.result is not None and outcome.result["valid"] is True
        assert outcome.run_s is not None and outcome.run_s > 0
        assert {"compiled", "sampling"} <= {e["phase"] for e in events}
        # The runner stays warm: the same process takes the next job.
        again = await pool.get(1)
        assert again is runner
        bad = await runner.run({"job": {**JOB, "workload": "nope"}}, 60.0, events.append)
        assert bad.result is None and bad.error_kind == "catalog"
        gpu = await runner.run({"job": {**JOB, "path": "jax-gpu"}}, 60.0, events.append)
        assert gpu.error_kind == "path" and "gpu" in (gpu.error or "")
    finally:
        await pool.close()


async def test_a_runner_per_device_count() -> None:
    pool = RunnerPool()
    try:
        runner = await pool.get(4)
        caps = await runner.detect(8)
        assert caps["device_count"] == 4
    finally:
        await pool.close()


async def test_a_hung_job_is_killed_at_its_limit_and_a_fresh_runner_follows(
    tmp_path: Path,
) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    pool = RunnerPool({**os.environ, TEST_HOOKS_ENV: "1", HANG_FILE_ENV: str(hang)})
    try:
        runner = await pool.get(1)
        started = time.monotonic()
        with pytest.raises(RunnerFailed, match=r"past its time limit of 1\.5 s") as failed:
            await runner.run({"job": JOB}, 1.5, lambda e: None)
        assert time.monotonic() - started < 10
        assert "test hook: hanging" in failed.value.stderr_tail
        assert runner.pid is not None and not alive(runner.pid)
        pool.forget(runner)
        fresh = await pool.get(1)
        assert fresh is not runner
        outcome = await fresh.run({"job": JOB}, 60.0, lambda e: None)
        assert outcome.result is not None
    finally:
        await pool.close()


async def test_the_hang_hook_needs_the_test_hooks_switch(tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    env = {k: v for k, v in os.environ.items() if k != TEST_HOOKS_ENV}
    pool = RunnerPool({**env, HANG_FILE_ENV: str(hang)})
    try:
        runner = await pool.get(1)
        outcome = await runner.run({"job": JOB}, 60.0, lambda e: None)
        assert outcome.result is not None and hang.exists()
    finally:
        await pool.close()


async def test_a_crashed_runner_is_reported_with_its_stderr(tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    pool = RunnerPool({**os.environ, TEST_HOOKS_ENV: "1", HANG_FILE_ENV: str(hang)})
    try:
        runner = await pool.get(1)
        assert runner.pid is not None
        job = asyncio.create_task(runner.run({"job": JOB}, 60.0, lambda e: None))
        while hang.exists():
            await asyncio.sleep(0.05)
        os.kill(runner.pid, signal.SIGKILL)  # as the out-of-memory killer would
        with pytest.raises(RunnerFailed, match="killed by SIGKILL") as failed:
            await job
        assert "test hook: hanging" in failed.value.stderr_tail
    finally:
        await pool.close()


def test_a_runner_dies_with_its_parent_even_on_sigkill(tmp_path: Path) -> None:
    parent = textwrap.dedent(
        """
        import asyncio, sys
        from workers.agent.runner_pool import RunnerPool

        async def main():
            pool = RunnerPool()
            runner = await pool.get(1)
            print(runner.pid, flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        runner_pid = int(proc.stdout.readline())
        assert alive(runner_pid)
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 10
        while alive(runner_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(runner_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
