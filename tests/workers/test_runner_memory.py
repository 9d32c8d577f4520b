"""Worker memory bounded by what a job may use: the catalog's peak estimate refuses a job
over the cap (the API: 422; `boundary run`: exit 2), naming the estimate and the cap; a
real runner past BOUNDARY_RUNNER_MAX_MEMORY is killed (or its allocation fails inside the
job) and the job fails saying so; a runner that keeps too much after a job is replaced.

Before: the 2 GiB cap counted inputs only, so `shape-sweep` with count=512, max_size=8192,
features=512, out_features=512, bucketing=multiple:7 (about 1 GB of inputs) took a runner
to 12.5 GB, and the runner kept 5.1 GB afterwards."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.workers.test_agent_e2e import Cluster, cluster  # noqa: F401 - the fixture
from workers.agent.memory import MemoryPolicy, MemoryWatch, default_max_memory, read_status
from workers.agent.runner_pool import RunnerPool
from workers.agent.runner_process import Runner, RunnerFailed
from workers.catalog import CatalogError, check_peak, parse_params
from workers.cli.run import run_command
from workers.protocol import JobSpec

MiB = 2**20
GiB = 2**30
SWEEP = {
    "count": 512,
    "max_size": 8192,
    "features": 512,
    "out_features": 512,
    "bucketing": "multiple:7",
}
BIG: dict[str, Any] = {  # about 1.2 GB at its peak: under the job cap, over a small limit
    "workload": "elementwise",
    "path": "jax-cpu",
    "params": {"n": 2**25},
    "measure": {"samples": 2},
}
SMALL: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 32, "n": 32, "k": 32},
    "measure": {"samples": 3},
}


def test_the_issues_sweep_is_refused_by_its_peak_naming_estimate_and_cap() -> None:
    params = parse_params("shape-sweep", SWEEP)
    assert params.input_bytes() < 2 * GiB  # what the cap counted before
    job = JobSpec.model_validate({"workload": "shape-sweep", "params": SWEEP})
    with pytest.raises(CatalogError) as caught:
        check_peak(params, job, 2 * GiB)
    assert caught.value.field == "params"
    assert str(caught.value) == (
        "params: the job needs about 11.8 GB at its peak (the correctness check; float64 "
        "outputs alone 6.17 GB), over this server's limit of 2.15 GB (2,147,483,648 bytes), "
        "set by BOUNDARY_MAX_JOB_BYTES. Compiled for a target without running (a target, "
        "stages compile only) the job places no array, has no such limit, and shows whether "
        "the program fits the chip"
    )


def test_a_job_that_only_compiles_is_not_counted() -> None:
    params = parse_params("shape-sweep", SWEEP)
    job = JobSpec.model_validate(
        {"workload": "shape-sweep", "params": SWEEP, "stages": ["compile"]}
    )
    check_peak(params, job, 2 * GiB)


def test_defaults_stay_far_under_the_cap() -> None:
    from workers.catalog import WORKLOADS

    for name, cls in WORKLOADS.items():
        if name != "exported":
            assert cls.model_validate({}).peak().total < 256 * MiB, name


@pytest.mark.anyio
async def test_the_api_refuses_the_sweep_with_422(bench_client: httpx.AsyncClient) -> None:
    job = {"workload": "shape-sweep", "path": "jax-cpu", "params": SWEEP}
    r = await bench_client.post("/api/v1/jobs", json=job)
    assert r.status_code == 422  # before: 202
    (problem,) = r.json()["detail"]
    assert problem["field"] == "params"
    assert "about 11.8 GB at its peak" in problem["message"]
    assert "over this server's limit of 2.15 GB (2,147,483,648 bytes)" in problem["message"]


def test_boundary_run_refuses_the_sweep_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["shape-sweep", *(f"{k}={v}" for k, v in SWEEP.items())]
    assert run_command(argv) == 2
    err = capsys.readouterr().err
    assert "about 11.8 GB at its peak" in err and "limit of 2.15 GB (2,147,483,648 bytes)" in err


def test_the_runners_default_limit_is_the_job_cap_and_the_runtime() -> None:
    assert default_max_memory(2 * GiB) == int(3.5 * GiB)
    policy = MemoryPolicy.from_env({"JAX_PLATFORMS": "cpu"}, 2 * GiB)
    assert policy.max_memory == int(3.5 * GiB) and policy.limit_data
    assert not MemoryPolicy.from_env({"JAX_PLATFORMS": "cuda,cpu"}, 2 * GiB).limit_data
    with pytest.raises(ValueError, match="BOUNDARY_RUNNER_MAX_MEMORY: expected a positive"):
        MemoryPolicy.from_env({"BOUNDARY_RUNNER_MAX_MEMORY": "²"}, 2 * GiB)


MAPS_A_FILE = """
import mmap, sys
with open(sys.argv[1], "rb") as f:
    view = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    total = sum(view[i] for i in range(0, len(view), 4096))  # fault every page in
    print(total, flush=True)
    sys.stdin.read()
"""


@pytest.mark.anyio
@pytest.mark.parametrize("private", [True, False])
async def test_the_watch_counts_private_memory_where_rlimit_data_bounds_it(
    tmp_path: Path, private: bool
) -> None:
    """A child that maps 256 MiB of a file holds it resident, as a runner holds the
    jaxlib code its first compile maps in: clean pages the kernel can drop, which
    RLIMIT_DATA does not count. Counting private memory (CPU runners), the watch leaves
    it alone; counting resident memory (elsewhere), it kills it."""
    data = tmp_path / "mapped.bin"
    data.write_bytes(b"\x01" * (256 * MiB))
    child = subprocess.Popen(
        [sys.executable, "-c", MAPS_A_FILE, str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        assert line.strip() == str(256 * MiB // 4096).encode()
        found = read_status(child.pid)
        assert found["rss"] - found["private"] >= 256 * MiB  # the file's pages, resident
        watch = MemoryWatch(child.pid, found["private"] + 64 * MiB, 0.02, private=private)
        watch.start()
        await asyncio.sleep(0.3)
        await watch.stop()
        if private:
            assert watch.overrun is None and child.poll() is None
            assert watch.peak >= 256 * MiB  # the peak it reports is still resident memory
        else:
            assert watch.overrun is not None and watch.overrun.reached >= 256 * MiB
            assert child.wait(5) < 0  # killed
            assert "used" in watch.overrun.reason() and "private" not in watch.overrun.reason()
    finally:
        child.kill()
        child.wait()


@pytest.fixture
async def runner() -> AsyncIterator[Runner]:
    """A warm runner child of its own (real JAX), killed after the test."""
    pool = RunnerPool()
    try:
        yield await pool.get(1)
    finally:
        await pool.close()


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_runner_past_its_limit_is_killed_and_the_job_fails_saying_so(
    runner: Runner,
) -> None:
    limit = runner.ready_rss + 500 * MiB
    policy = MemoryPolicy(max_memory=limit, keep_bytes=GiB, limit_data=False)
    with pytest.raises(RunnerFailed) as failed:
        await runner.run({"job": BIG}, 120.0, lambda e: None, policy)
    assert "over the runner's limit of" in str(failed.value)
    assert "(BOUNDARY_RUNNER_MAX_MEMORY); the runner was killed" in str(failed.value)
    assert not runner.alive


@pytest.mark.anyio
@pytest.mark.slow
async def test_under_rlimit_data_the_allocation_fails_inside_the_job(runner: Runner) -> None:
    policy = MemoryPolicy(max_memory=runner.ready_rss + 500 * MiB, keep_bytes=GiB)
    outcome = await runner.run({"job": BIG}, 120.0, lambda e: None, policy)
    assert outcome.result is None and outcome.replace and outcome.error_kind == "memory"
    assert "the job passed the runner's memory limit of" in (outcome.error or "")
    assert runner.alive  # it reported the failure itself; the agent replaces it
    small = await runner.run({"job": SMALL}, 60.0, lambda e: None)
    assert small.result is not None  # its limit was lifted again after the job


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_runner_that_keeps_too_much_after_a_job_is_told_apart(runner: Runner) -> None:
    roomy = MemoryPolicy(max_memory=4 * GiB, keep_bytes=GiB)
    outcome = await runner.run({"job": SMALL}, 60.0, lambda e: None, roomy)
    assert outcome.result is not None
    assert not runner.keeps_too_much(roomy)
    assert runner.pid is not None
    rss = read_status(runner.pid)["rss"]
    strict = MemoryPolicy(max_memory=4 * GiB, keep_bytes=max(1, rss - runner.ready_rss - MiB))
    assert runner.keeps_too_much(strict)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_fails_a_job_past_the_limit_and_runs_the_next_on_a_fresh_runner(
    cluster: Callable[..., Cluster],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    c = cluster()
    c.start_server()
    c.start_worker("w1", BOUNDARY_RUNNER_MAX_MEMORY=str(900 * MiB))
    c.wait_worker("w1")
    big = c.wait_status(c.submit(BIG), {"failed", "done"}, timeout=180)
    assert big["status"] == "failed"
    reason = big["reason"] or ""  # 900 MiB is 944 MB
    assert "memory limit of 944 MB (BOUNDARY_RUNNER_MAX_MEMORY)" in reason or (
        "over the runner's limit of 944 MB" in reason
    )
    small = c.wait_status(c.submit(SMALL), {"failed", "done"}, timeout=180)
    assert small["status"] == "done", small["reason"]
    logs = (tmp_path / "worker-w1.log").read_text()
    assert "replaced after job" in logs or "was killed" in logs


def test_a_runner_collects_after_a_job_only_when_it_holds_more_than_it_may_keep() -> None:
    """A full collection in a process that imported JAX costs 60-90 ms; paid after every
    job before its result was sent, it made dispatch about 8x slower (bench/dispatch.py).
    Under the agent's threshold (half of what a runner may keep over its ready size) the
    result goes out at once; over it, or when no threshold came, memory is given back."""
    from workers.agent.runner import give_back_memory

    full: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(count)
    try:
        give_back_memory(64 * GiB)  # far over what this process holds
        assert full == []
        give_back_memory(1)  # it holds more than a byte
        assert len(full) == 1
        give_back_memory(None)  # an agent that sent no threshold: as before
        assert len(full) == 2
    finally:
        gc.callbacks.remove(count)
