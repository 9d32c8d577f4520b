"""The agent's handle on one runner child process (`python -m workers.agent.runner`, which
see for the wire): start it, send it requests, follow a job's messages within its time and
memory limits, kill it and wait for it to exit. `workers.agent.runner_pool` keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.agent.memory import (
    DEFAULT_KEEP_BYTES,
    MemoryPolicy,
    MemoryWatch,
    keeps_too_much,
    limit_data,
    out_of_memory,
    read_status,
    restore_data,
)
from workers.agent.runner import PARENT_ENV
from workers.protocol.sizes import byte_text

log = logging.getLogger("boundary.worker")

STDERR_LINES = 40
LINE_LIMIT = 512 * 1024 * 1024  # a result line carries every artifact's full text
START_TIMEOUT_S = 180.0
RunnerKey = tuple[int, bool]
"""A warm runner's device count, and whether it is a chip pool's chipless runner."""


class RunnerFailed(RuntimeError):
    """The runner died, hung past its limit or could not start; `stderr_tail` says more."""

    def __init__(self, message: str, stderr_tail: str) -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail


@dataclass(frozen=True)
class Outcome:
    """What a job came to on a runner: a result, or an error the engine reported."""

    result: dict[str, Any] | None = None
    run_s: float | None = None
    error: str | None = None
    error_kind: str | None = None
    replace: bool = False
    """The runner must not take another job (it hit its memory limit)."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the runner stopped answering"
    if code < 0:
        name = {9: "SIGKILL (often the kernel's out-of-memory killer)", 11: "SIGSEGV"}.get(
            -code, f"signal {-code}"
        )
        return f"the runner was killed by {name}"
    return f"the runner exited with status {code}"


class Runner:
    """One runner child process."""

    def __init__(self, key: RunnerKey, env: dict[str, str]) -> None:
        self.key = key
        self.devices = key[0]
        self._env = env
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._stderr_task: asyncio.Task[None] | None = None
        self.pid: int | None = None
        self.ready_rss = 0
        """Its resident memory when it became ready (what a job may leave it above)."""

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the child and wait until JAX is imported; RunnerFailed if it cannot."""
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "workers.agent.runner",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**self._env, PARENT_ENV: str(os.getpid())},
            limit=LINE_LIMIT,
        )
        self.pid = self._proc.pid
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        message = await self.receive(timeout_s)
        if message.get("type") != "ready":
            await self.kill()
            raise RunnerFailed("the runner did not start properly", self.stderr_tail())
        with contextlib.suppress(OSError):
            self.ready_rss = read_status(self._proc.pid)["rss"]
        log.info("runner %s ready (%d device(s))", self.pid, self.devices)

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        async for raw in self._proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self._stderr.append(line)
            print(f"[runner {self.pid}] {line}", file=sys.stderr, flush=True)

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def send(self, request: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            await self._fail()

    async def receive(self, timeout_s: float | None) -> dict[str, Any]:
        """The next message; RunnerFailed on timeout (the runner is killed) or on exit."""
        assert self._proc is not None and self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout_s)
        except TimeoutError:
            await self.kill()
            raise RunnerFailed(
                f"the runner took longer than {timeout_s:g} s and was killed", self.stderr_tail()
            ) from None
        if not line:
            await self._fail()
        message: dict[str, Any] = json.loads(line)
        return message

    async def _fail(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), 5.0)
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        code = self._proc.returncode
        await self.kill()
        raise RunnerFailed(_describe_exit(code), self.stderr_tail())

    async def detect(self, max_virtual_devices: int) -> dict[str, Any]:
        await self.send({"op": "detect", "max_virtual_devices": max_virtual_devices})
        message = await self.receive(60.0)
        data: dict[str, Any] = message["data"]
        return data

    async def ceilings(self, previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """Another round of the device's ceilings, merged with `previous` (best of)."""
        await self.send({"op": "ceilings", "previous": previous})
        message = await self.receive(60.0)
        data: dict[str, Any] | None = message["data"]
        return data

    async def run(
        self,
        request: dict[str, Any],
        timeout_s: float,
        on_progress: Callable[[dict[str, Any]], None],
        memory: MemoryPolicy | None = None,
    ) -> Outcome:
        """Run one job; the time limit starts once the runner has taken the job, and so
        does its memory limit (workers.agent.memory): past it the runner is killed, or
        the allocation fails inside the job, and either way the job fails saying so."""
        keep = memory.keep_bytes if memory is not None else DEFAULT_KEEP_BYTES
        trim_above = self.ready_rss + keep // 2 if self.ready_rss else None
        await self.send({"op": "run", **request, "trim_above": trim_above})
        first = await self.receive(30.0)
        if first.get("type") != "started":
            raise RunnerFailed(f"unexpected message {first.get('type')!r}", self.stderr_tail())
        if memory is None or self.pid is None:
            return await self._follow(timeout_s, on_progress)
        previous = None
        if memory.limit_data:
            with contextlib.suppress(OSError):
                previous = limit_data(self.pid, memory.max_memory)
        watch = MemoryWatch(self.pid, memory.max_memory, private=previous is not None)
        watch.start()
        try:
            outcome = await self._follow(timeout_s, on_progress)
        except RunnerFailed as exc:
            await watch.stop()
            if watch.overrun is not None:
                raise RunnerFailed(watch.overrun.reason(), exc.stderr_tail) from None
            raise
        finally:
            await watch.stop()
            if previous is not None and self.alive:
                restore_data(self.pid, previous)
        if memory.limit_data and out_of_memory(outcome.error):
            limit = byte_text(memory.max_memory)
            return Outcome(
                error=f"the job passed the runner's memory limit of {limit} "
                f"(BOUNDARY_RUNNER_MAX_MEMORY): {outcome.error}",
                error_kind="memory",
                replace=True,
            )
        return outcome

    def keeps_too_much(self, memory: MemoryPolicy) -> bool:
        """Whether, after a job, it holds more than the policy lets it keep."""
        if self.pid is None or not self.alive or not self.ready_rss:
            return False
        return keeps_too_much(self.pid, self.ready_rss, memory.keep_bytes)

    async def _follow(
        self, timeout_s: float, on_progress: Callable[[dict[str, Any]], None]
    ) -> Outcome:
        """The job's messages until its result or error, within `timeout_s`."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                await self.kill()
                raise RunnerFailed(
                    f"the job ran past its time limit of {timeout_s:g} s; the runner was killed",
                    self.stderr_tail(),
                )
            try:
                message = await self.receive(remaining)
            except RunnerFailed as exc:
                if "took longer" in str(exc):
                    raise RunnerFailed(
                        f"the job ran past its time limit of {timeout_s:g} s; "
                        "the runner was killed",
                        exc.stderr_tail,
                    ) from None
                raise
            kind = message.get("type")
            if kind == "progress":
                on_progress(message["event"])
            elif kind == "result":
                return Outcome(result=message["result"], run_s=message.get("run_s"))
            elif kind == "error":
                return Outcome(error=message.get("message"), error_kind=message.get("kind"))

    async def exited(self, timeout_s: float) -> bool:
        """Whether the child has exited (and been reaped) within `timeout_s`."""
        proc = self._proc
        if proc is None:
            return True
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def kill(self) -> None:
        """Kill the child and reap it (idempotent); `exited` waits past this one's 10 s."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10.0)
        if proc.stdin is not None:
            proc.stdin.close()
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._stderr_task, 1.0)
