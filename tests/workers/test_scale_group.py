"""A worker group for real: two processes on localhost, each owning half of the mesh,
joined by jax.distributed (gloo on the CPU backend), running collectives together."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workers.agent.group import GroupConfig, GroupConfigError, group_job
from workers.catalog import CatalogError
from workers.measure.stopping import Stopper, lockstep
from workers.protocol import JobSpec, RunResult

ROOT = Path(__file__).resolve().parents[2]
MM = {"m": 64, "n": 48, "k": 32}
JOBS: dict[str, dict[str, Any]] = {
    "all-gather": {"workload": "collective", "params": {"kind": "all-gather", "bytes": 4096}},
    # Refused by every process alike; the jobs after it must still run.
    "bad": {"workload": "sharded-matmul", "params": {**MM, "devices": 3, "sharding": "data"}},
    "data": {"workload": "sharded-matmul", "params": {**MM, "sharding": "data"}},
    "tensor": {"workload": "sharded-matmul", "params": {**MM, "sharding": "tensor"}},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def group_env(port: int, process_id: int, local_devices: int) -> dict[str, str]:
    return {
        **os.environ,
        "BOUNDARY_COORDINATOR": f"127.0.0.1:{port}",
        "BOUNDARY_NUM_PROCESSES": "2",
        "BOUNDARY_PROCESS_ID": str(process_id),
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={local_devices}",
        "BOUNDARY_WORKER_CEILINGS": "0",
    }


def test_group_settings_are_read_and_checked() -> None:
    assert GroupConfig.from_env({}) is None
    config = GroupConfig.from_env(
        {
            "BOUNDARY_COORDINATOR": "10.0.0.1:9876",
            "BOUNDARY_NUM_PROCESSES": "4",
            "BOUNDARY_PROCESS_ID": "3",
        }
    )
    assert config == GroupConfig("10.0.0.1:9876", 4, 3) and not config.leader
    for bad, words in (
        ({"BOUNDARY_COORDINATOR": "nohostport"}, "host:port"),
        ({"BOUNDARY_COORDINATOR": "h:1", "BOUNDARY_NUM_PROCESSES": "0"}, "NUM_PROCESSES"),
        (
            {
                "BOUNDARY_COORDINATOR": "h:1",
                "BOUNDARY_NUM_PROCESSES": "2",
                "BOUNDARY_PROCESS_ID": "2",
            },
            "from 0 to 1",
        ),
    ):
        with pytest.raises(GroupConfigError, match=words):
            GroupConfig.from_env(bad)


def test_a_group_runs_jobs_in_lockstep_or_refuses_them() -> None:
    job = JobSpec.model_validate({"workload": "collective", "measure": {"samples": 40}})
    assert group_job(job) == job  # unchanged: the result is checked against the leased job
    with lockstep():  # how the group samples: no time cap, no warm-up that could differ
        stopper = Stopper(job.measure, start=0.0)
        slow_first = [1.0] * 20 + [0.1] * 19
        assert not stopper.done(slow_first, now=1e6)
        assert stopper.done([*slow_first, 0.1], now=1e6)
        assert stopper.kept_from(40) == 0
    for change, field in (
        ({"measure": {"samples": "auto"}}, "measure.samples"),
        ({"measure": {"mode": "application"}}, "measure.mode"),
        ({"stages": ["compile", "scale"]}, "stages"),
    ):
        spec = JobSpec.model_validate({"workload": "collective", **change})
        with pytest.raises(CatalogError) as caught:
            group_job(spec)
        assert caught.value.field == field


@pytest.fixture(scope="module")
def group_runs() -> dict[str, Any]:
    """JOBS run by a group of two processes with 4 CPU devices each, via process 0."""
    port = free_port()
    jobs = [json.dumps({**spec, "measure": {"samples": 3}}) for spec in JOBS.values()]
    follower = subprocess.Popen(
        [sys.executable, "-m", "workers.agent.group", "follow"],
        cwd=ROOT,
        env=group_env(port, 1, 4),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        args = [sys.executable, "-m", "workers.agent.group", "run"]
        for job in jobs:
            args += ["--job", job]
        leader = subprocess.run(
            args,
            cwd=ROOT,
            env=group_env(port, 0, 4),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        follower_status = follower.wait(60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert leader.returncode == 2, leader.stderr[-3000:]  # the "bad" job was refused
    assert follower_status == 0, follower.stderr.read().decode()[-3000:] if follower.stderr else ""
    lines = leader.stdout.strip().splitlines()
    assert len(lines) == len(JOBS)
    found: dict[str, Any] = {}
    for name, line in zip(JOBS, lines, strict=True):
        data = json.loads(line)
        found[name] = data if "error" in data else RunResult.model_validate(data)
    return found


@pytest.fixture(scope="module")
def alone_runs() -> dict[str, RunResult]:
    """The same jobs on one process with all 8 devices, through `boundary run --json`."""
    found = {}
    for name in ("all-gather", "data", "tensor"):
        spec = JOBS[name]
        words = [f"{k}={v}" for k, v in spec["params"].items()]
        options = ["--samples", "3", "--json"]
        done = subprocess.run(
            [sys.executable, "-m", "workers.cli", "run", spec["workload"], *words, *options],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        found[name] = RunResult.model_validate_json(done.stdout)
    return found


@pytest.mark.slow
def test_two_processes_each_own_half_of_the_mesh(group_runs: dict[str, Any]) -> None:
    run = group_runs["all-gather"]
    assert run.valid and run.group is not None
    assert run.group.processes == 2 and run.group.devices == 8
    assert [(m.process_id, m.local_devices) for m in run.group.members] == [(0, 4), (1, 4)]
    assert run.environment.device_count == 8
    # Four shards live on process 0's devices and four on process 1's.
    assert run.placement is not None
    owners = [s.process for s in run.placement.shards]
    assert owners.count(0) == 4 and owners.count(1) == 4
    (gather,) = run.hlo_summary.collectives
    assert gather.kind == "all-gather" and len(gather.groups[0]) == 8


@pytest.mark.slow
def test_the_processes_agree_with_each_other(group_runs: dict[str, Any]) -> None:
    for name in ("all-gather", "data", "tensor"):
        group = group_runs[name].group
        assert group.agreed, (name, group)
        digests = {m.digest for m in group.members}
        assert len(digests) == 1 and None not in digests
        assert all(m.passed for m in group.members)


@pytest.mark.slow
def test_the_group_agrees_with_the_single_process_result(
    group_runs: dict[str, Any], alone_runs: dict[str, RunResult]
) -> None:
    # Without arithmetic across devices the output is the same to the bit.
    for name in ("all-gather", "data"):
        assert group_runs[name].extra["output_sha256"] == alone_runs[name].extra["output_sha256"]
    # An all-reduce over gloo may add the partial sums in another order: the same answer
    # within rounding, both checked against the float64 reference.
    group, alone = group_runs["tensor"], alone_runs["tensor"]
    assert [c.kind for c in group.hlo_summary.collectives] == ["all-reduce"]
    assert [c.kind for c in alone.hlo_summary.collectives] == ["all-reduce"]
    assert group.correctness.passed and alone.correctness.passed
    assert abs(group.correctness.error - alone.correctness.error) < 1e-6


@pytest.mark.slow
def test_a_refused_job_does_not_break_the_group(group_runs: dict[str, Any]) -> None:
    bad = group_runs["bad"]
    assert bad["field"] == "params.m" and "over mesh axes x (3 devices)" in bad["error"]
    assert group_runs["data"].valid and group_runs["tensor"].valid


@pytest.mark.slow
@pytest.mark.anyio
async def test_process_zeros_runner_leads_the_group() -> None:
    """The worker's runner (process 0) joins the group and reports one result for all."""
    from workers.agent.runner_pool import RunnerPool

    port = free_port()
    follower = subprocess.Popen(
        [sys.executable, "-m", "workers.agent.group", "follow"],
        cwd=ROOT,
        env=group_env(port, 1, 2),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pool = RunnerPool(group_env(port, 0, 2))
    try:
        runner = await pool.get(4)  # a group keeps one runner, whatever the job spans
        caps = await runner.detect(8)
        assert caps["device_count"] == 4 and caps["max_virtual_devices"] == 0
        job = {"workload": "sharded-matmul", "params": {**MM, "devices": 4}}
        outcome = await runner.run({"job": {**job, "measure": {"samples": 3}}}, 120.0, print)
        assert outcome.result is not None, outcome.error
        run = RunResult.model_validate(outcome.result)
        assert run.valid and run.group is not None and run.group.agreed
        assert [m.local_devices for m in run.group.members] == [2, 2]
        assert [c.kind for c in run.hlo_summary.collectives] == ["all-reduce"]
        again = await pool.get(1)
        assert again is runner
    finally:
        await pool.close()
        follower.kill()
        follower.wait()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_worker_group_serves_a_real_server(tmp_path: Path) -> None:
    """Process 0 registers the group's devices with a server and reports one result."""
    from tests.workers.test_agent_e2e import Cluster

    cluster = Cluster(tmp_path)
    port = free_port()
    try:
        cluster.start_server()
        cluster._spawn(
            [sys.executable, "-m", "workers.agent.group", "follow"],
            group_env(port, 1, 2),
            "follower.log",
        )
        leader = group_env(port, 0, 2)
        settings = {k: v for k, v in leader.items() if k.startswith(("BOUNDARY_", "XLA_"))}
        cluster.start_worker("group", **settings)
        cluster.wait_worker("group", timeout=120)
        (worker,) = cluster.client.get("/api/v1/workers").json()["data"]
        assert worker["device_count"] == 4  # both processes' devices, registered once
        job_id = cluster.submit(
            {
                "workload": "sharded-matmul",
                "path": "jax-cpu",
                "params": {**MM, "devices": 4},
                "measure": {"samples": 3},
            }
        )
        job = cluster.wait_status(job_id, {"done", "failed"}, timeout=180)
        assert job["status"] == "done", job
        run = job["run"]
        assert run["valid"] and run["group"]["agreed"]
        assert [m["process_id"] for m in run["group"]["members"]] == [0, 1]
        assert [c["kind"] for c in run["hlo_summary"]["collectives"]] == ["all-reduce"]
    finally:
        cluster.close()
