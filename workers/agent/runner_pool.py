"""The agent's side of its runners: start, talk to, time-limit and kill them.

A runner is `python -m workers.agent.runner` (see that module for the wire). The pool keeps
one warm runner per device count: a jax-cpu job spanning N > 1 devices needs a runner
started with XLA_FLAGS=--xla_force_host_platform_device_count=N, because the flag is
read once when JAX starts. Only the agent's event loop thread starts runners, so the
kernel's parent-death signal refers to the agent process for as long as it lives.

On a TPU host the chip has one holder (a second process that opens it fails at once, and
does not fall back to the CPU): the pool's default runner, which detects the worker's
devices and runs every job that needs the chip, one at a time as the agent leases them.
Every other runner of such a pool (a job that only compiles for a target, a CPU job) is
chipless (`workers.compiler.jaxenv.chipless_environment`), and so is every process a
runner starts. A holder that crashed, hung or was killed is replaced only once it has
exited (a process that opened a device may take a while to close it), however long that
takes, so two processes never hold the chip at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from workers.agent.group import COORDINATOR_ENV
from workers.agent.runner_process import Runner, RunnerKey
from workers.compiler.jaxenv import chipless_environment, holds_chip, jax_environment

log = logging.getLogger("boundary.worker")

MAX_WARM = 2
DEVICE_FLAG = "--xla_force_host_platform_device_count"
EXIT_WAIT_LOG_S = 30.0
"""While the chip's last holder has not exited, the pool says so this often."""
DEFAULT_KEY: RunnerKey = (1, False)
"""The runner that detects the worker's devices (on a TPU host: the chip's holder)."""


def needs_chip(requirements: dict[str, Any]) -> bool:
    """Whether a leased job runs on the worker's TPU chip (if it has one): a `jax-tpu` job
    with no target, or one that executes on its target's devices. A compile for a target
    without the hardware (on the host's CPU, as the server's gate holds it to), a CPU or a
    CUDA job runs on a chipless runner beside the chip's holder."""
    if requirements.get("path") != "jax-tpu":
        return False
    return not requirements.get("target") or bool(requirements.get("executes", True))


def wanted_runner(requirements: dict[str, Any]) -> RunnerKey:
    """The runner a leased job takes: its device count (a jax-cpu job's virtual devices, 1
    for any other) and whether it is chipless (`needs_chip`)."""
    devices = int(requirements.get("devices", 1)) if requirements.get("path") == "jax-cpu" else 1
    return max(devices, 1), not needs_chip(requirements)


class RunnerPool:
    """Warm runners keyed by device count (and, on a TPU host, whether they are chipless),
    at most MAX_WARM at a time; `chip`: whether the default runner holds a TPU chip."""

    def __init__(self, base_env: dict[str, str] | None = None, *, chip: bool | None = None):
        self._base_env = dict(os.environ if base_env is None else base_env)
        self.chip = holds_chip(self._base_env) if chip is None else chip
        self._runners: dict[RunnerKey, Runner] = {}
        self._starting: dict[RunnerKey, asyncio.Task[Runner]] = {}
        self.holder: Runner | None = None
        """The chip's holder, from its start until it has exited (None in a pool without)."""

    def _env(self, key: RunnerKey) -> dict[str, str]:
        devices, chipless = key
        env = dict(self._base_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # JAX_PLATFORMS and libtpu's settings, decided before the runner imports jax.
        env.update(chipless_environment(env) if chipless else jax_environment(env))
        if devices > 1:
            flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
            flags.append(f"{DEVICE_FLAG}={devices}")
            env["XLA_FLAGS"] = " ".join(flags)
        return env

    def _key(self, devices: int, chipless: bool) -> RunnerKey:
        # A worker group has one runner, joined to the group's mesh once and for all.
        if self._base_env.get(COORDINATOR_ENV):
            return DEFAULT_KEY
        if not self.chip:
            return (devices, False)  # no chip to keep off: one runner per device count
        # The chip's holder runs every job that needs the chip, on the devices it has.
        return (devices, True) if chipless else DEFAULT_KEY

    async def get(self, devices: int = 1, *, chipless: bool = False) -> Runner:
        """A live runner for `devices` virtual devices (1: the default), started if needed;
        `chipless`: one that never opens the TPU chip (a job that does not need it)."""
        key = self._key(devices, chipless)
        runner = self._runners.get(key)
        if runner is not None and runner.alive:
            return runner
        self._runners.pop(key, None)
        task = self._starting.get(key)
        if task is None:
            task = self._warm(key)
        return await asyncio.shield(task)

    def warm(self, devices: int = 1, *, chipless: bool = False) -> asyncio.Task[Runner] | None:
        """Start a runner for `devices` in the background (the next `get` waits for it);
        None when a live one is there already."""
        key = self._key(devices, chipless)
        runner = self._runners.get(key)
        if runner is not None and runner.alive and key not in self._starting:
            return None
        return self._warm(key)

    def _warm(self, key: RunnerKey) -> asyncio.Task[Runner]:
        task = self._starting.get(key)
        if task is None:
            task = asyncio.create_task(self._start(key))
            self._starting[key] = task
            task.add_done_callback(_quiet)
        return task

    async def _start(self, key: RunnerKey) -> Runner:
        try:
            while len(self._runners) >= MAX_WARM:  # keep the default runner warm if we can
                victim = next((k for k in self._runners if k != DEFAULT_KEY), DEFAULT_KEY)
                await self._runners.pop(victim).kill()
            holds = self.chip and key == DEFAULT_KEY
            if holds:
                await self._chip_released()
            runner = Runner(key, self._env(key))
            if holds:
                self.holder = runner
            try:
                await runner.start()
            except BaseException:
                await runner.kill()
                raise
            self._runners[key] = runner
            return runner
        finally:
            self._starting.pop(key, None)

    async def _chip_released(self) -> None:
        """Until the chip's last holder has exited (it is killed first, if it still
        runs): its successor could not open the chip before."""
        holder = self.holder
        if holder is None:
            return
        await holder.kill()
        waited = 0.0
        while not await holder.exited(EXIT_WAIT_LOG_S):
            waited += EXIT_WAIT_LOG_S
            log.warning(
                "runner %s, the TPU chip's last holder, has not exited %g s after it was "
                "killed; its successor waits for the chip",
                holder.pid,
                waited,
            )
        self.holder = None

    def forget(self, runner: Runner) -> None:
        """Drop a runner that failed; `warm` or the next `get` starts a fresh one."""
        if self._runners.get(runner.key) is runner:
            del self._runners[runner.key]

    def pids(self) -> list[int]:
        return [r.pid for r in self._runners.values() if r.pid is not None and r.alive]

    async def close(self) -> None:
        for task in list(self._starting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for runner in list(self._runners.values()):
            await runner.kill()
        self._runners.clear()
        await self._chip_released()


def _quiet(task: asyncio.Task[Runner]) -> None:
    """Mark a background start's failure as seen; whoever awaits it gets the error."""
    if not task.cancelled():
        task.exception()
