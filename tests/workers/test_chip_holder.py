"""One holder of a TPU chip (workers.agent.runner_pool, workers.compiler.jaxenv), with real
runner processes. This machine has no chip, so the pool is told it has one (`chip=True`,
what `holds_chip` finds on a TPU host); what is checked is the rule: which runner a job
takes, the environment each kind of process starts with, and that a holder that hung or
crashed is replaced only once it has exited, never two alive at once."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from workers.agent.runner import HANG_FILE_ENV, TEST_HOOKS_ENV
from workers.agent.runner_pool import RunnerPool, wanted_runner
from workers.agent.runner_process import RunnerFailed
from workers.compiler.jaxenv import child_jax_environment, holds_chip
from workers.xla_targets.dump_child import child_environment

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOB: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 32, "n": 32, "k": 32},
    "measure": {"samples": 3},
}
QUICK = {"BOUNDARY_WORKER_TARGETS": "0", "BOUNDARY_WORKER_CEILINGS": "0"}
OPERATORS = {"TPU_LOG_DIR": "/var/log/tpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "0"}
"""What an operator may have set for the chip's holder, which no other process keeps."""


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def alive(pid: int) -> bool:
    """Running, not exited (a zombie has closed every device it had)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return False
    return state != "Z"


def test_the_jobs_that_need_the_chip_are_the_tpu_jobs_on_the_workers_own_devices() -> None:
    tpu = {"path": "jax-tpu", "devices": 1}
    assert wanted_runner(tpu) == (1, False)
    assert wanted_runner({**tpu, "target": "v5e:1x1", "executes": True}) == (1, False)
    # A compile for a target without the hardware happens on the host's CPU.
    assert wanted_runner({**tpu, "target": "v6e:2x2", "executes": False}) == (1, True)
    assert wanted_runner({"path": "jax-cpu", "devices": 4}) == (4, True)
    assert wanted_runner({"path": "cuda", "devices": 1}) == (1, True)


def test_what_a_runner_starts_beside_the_chip_never_opens_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder = {**OPERATORS, "BOUNDARY_JAX_PLATFORMS": "tpu,cpu"}
    assert holds_chip(holder, found="tpu") and holds_chip({}, found="tpu")
    assert not holds_chip({}, found="") and not holds_chip({}, found="gpu")
    for name, value in holder.items():  # this process as the chip's holder sees it
        monkeypatch.setenv(name, value)
    dump_child = child_environment({}, "tpu")
    for child in (child_jax_environment(holder, found="tpu"), dump_child):
        assert child["JAX_PLATFORMS"] == "cpu" and child["BOUNDARY_JAX_PLATFORMS"] == "cpu"
        assert child["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"
        assert child["TPU_LOG_DIR"] == "disabled" and child["TPU_SKIP_MDS_QUERY"] == "1"
        assert not holds_chip(child, found="tpu")  # nor do its own children
    # A GPU host's children keep their GPU: GPUs have no one-holder rule.
    assert child_jax_environment({}, found="gpu")["JAX_PLATFORMS"] == "cuda,cpu"


async def test_one_runner_holds_the_chip_and_every_other_is_chipless() -> None:
    pool = RunnerPool({**os.environ, **QUICK, **OPERATORS}, chip=True)
    try:
        holder = await pool.get(1)
        assert pool.holder is holder
        assert await pool.get(4) is holder  # a chip job of any count: the one holder
        beside = await pool.get(4, chipless=True)
        assert beside is not holder and pool.holder is holder
        assert holder.pid is not None and beside.pid is not None
        mine, its = environ(holder.pid), environ(beside.pid)
        assert {k: mine[k] for k in OPERATORS} == OPERATORS  # the holder: as configured
        assert its["JAX_PLATFORMS"] == "cpu" and its["BOUNDARY_JAX_PLATFORMS"] == "cpu"
        assert its["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1" and its["TPU_LOG_DIR"] == "disabled"
        assert (await beside.detect(8))["device_count"] == 4
        outcome = await beside.run({"job": JOB}, 60.0, lambda e: None)
        assert outcome.result is not None and outcome.result["valid"] is True
    finally:
        await pool.close()
    assert pool.holder is None and not alive(holder.pid) and not alive(beside.pid)


class Holders:
    """Watches, every millisecond, every process that has held the pool's chip; `most`:
    the most that were alive at one time."""

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self.seen: list[int] = []
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            holder = self.pool.holder
            pid = holder.pid if holder is not None else None
            if pid is not None and pid not in self.seen:
                self.seen.append(pid)
            self.most = max(self.most, sum(alive(p) for p in self.seen))
            time.sleep(0.001)

    def __enter__(self) -> Holders:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_a_hung_or_crashed_holder_is_replaced_only_once_it_has_exited(
    tmp_path: Path,
) -> None:
    hang = tmp_path / "hang"
    hang.touch()
    env = {**os.environ, **QUICK, TEST_HOOKS_ENV: "1", HANG_FILE_ENV: str(hang)}
    pool = RunnerPool(env, chip=True)
    try:
        with Holders(pool) as holders:
            first = await pool.get(1)
            with pytest.raises(RunnerFailed, match="past its time limit"):
                await first.run({"job": JOB}, 1.0, lambda e: None)
            pool.forget(first)
            # The agent warms a successor at once, and the next job asks for it meanwhile.
            pool.warm(1)
            second, also = await asyncio.gather(pool.get(1), pool.get(1))
            assert second is also and second is not first and pool.holder is second
            assert first.pid is not None and not alive(first.pid)
            assert second.pid is not None
            os.kill(second.pid, signal.SIGKILL)  # a crash while idle (the kernel's OOM killer)
            with pytest.raises(RunnerFailed, match="killed by SIGKILL"):
                await second.run({"job": JOB}, 60.0, lambda e: None)  # the next job finds it
            pool.forget(second)
            third = await pool.get(1)
            assert third is not second and not alive(second.pid)
            outcome = await third.run({"job": JOB}, 60.0, lambda e: None)
            assert outcome.result is not None
        assert holders.seen == [first.pid, second.pid, third.pid]
        assert holders.most == 1
    finally:
        await pool.close()
