"""The worker agent: register, long-poll for a lease, run the job on a warm runner,
heartbeat and forward progress while it runs, post the result; again.

The agent never imports JAX: capabilities are detected inside the runner child, from
the devices JAX actually started. It survives a server restart by retrying with
backoff. On SIGTERM (or Ctrl-C) it stops taking jobs and finishes the one in hand; a
second signal, a second or more after the first, kills the runner and gives the lease
back (a burst of signals, as a process-group kill or a service manager may send, counts
as one). SIGUSR1 asks for the same graceful stop and never escalates: `boundary serve`
sends it to its local workers. SIGUSR2 is the parent-death signal of a local worker: it
stops at once only if its parent really died (Linux sends it whenever the thread that
started the worker exits). Its runners die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from workers.agent.idle import Idle
from workers.agent.link import (
    Fatal,
    ProgressForwarder,
    ServerLink,
    StopState,
    cap_artifacts,
    detail,
)
from workers.agent.memory import MemoryPolicy
from workers.agent.runner import DEFAULT_MAX_VIRTUAL_DEVICES
from workers.agent.runner_pool import RunnerPool, wanted_runner
from workers.agent.runner_process import Outcome, Runner, RunnerFailed, RunnerKey
from workers.export.server_address import ServerAddress
from workers.files import FileCache, files_folder, job_files

log = logging.getLogger("boundary.worker")

ESCALATE_AFTER_S = 1.0
"""A second stop signal sooner than this after the first is part of the same burst."""
PARENT_ENV = "BOUNDARY_WORKER_PARENT"
"""Set by `boundary serve` (app/local_workers.py) for its local workers: they stop when it
dies."""


@dataclass
class AgentConfig:
    server: ServerAddress
    token: str | None
    name: str | None = None
    max_virtual_devices: int = DEFAULT_MAX_VIRTUAL_DEVICES
    cache_dir: Path | None = None
    max_job_bytes: int | None = None
    files_dir: Path | None = None
    """Where fetched files (exported functions, .npz) are kept; beside cache_dir if unset."""
    memory: MemoryPolicy | None = None
    """How runners' memory is bounded (workers.agent.memory); None: not at all."""


class Agent:
    """One worker process attached to the devices its runners find."""

    def __init__(self, config: AgentConfig, pool: RunnerPool | None = None) -> None:
        self.config = config
        self.pool = pool or RunnerPool()
        self.stop = StopState()
        self.link = ServerLink(config.server, config.token, self.stop)
        self.worker_id: str | None = None
        self.worker_key: str | None = None
        self.me: dict[str, str | None] = {}  # id and key: every later message carries them
        self.capabilities: dict[str, Any] = {}
        self.heartbeat_s = 5.0
        self.poll_s = 25.0
        self.artifact_max_bytes = 4 * 1024 * 1024
        self._stop_at = 0.0
        self._poll_task: asyncio.Task[dict[str, Any] | None] | None = None
        self.jobs_done = 0
        self.idle = Idle(self.pool)

    # --- talking to the server ---------------------------------------------------------

    async def register(self) -> None:
        # The server assigns the id; with the key it gave, registering again keeps it.
        body = {
            "capabilities": self.capabilities,
            "name": self.config.name,
            "worker_id": self.worker_id,
            "worker_key": self.worker_key,
        }
        response = await self.link.post("/register", body)
        if response.status_code == 409:
            raise Fatal(detail(response))
        if response.status_code != 200:
            raise Fatal(f"registration failed ({response.status_code}): {detail(response)}")
        reply = response.json()
        self.worker_id = reply["worker_id"]
        self.worker_key = reply.get("worker_key")
        self.me = {"worker_id": self.worker_id, "worker_key": self.worker_key}
        self.heartbeat_s = float(reply["heartbeat_s"])
        self.poll_s = float(reply["poll_s"])
        self.artifact_max_bytes = int(reply["artifact_max_bytes"])
        caps = self.capabilities
        log.info(
            "registered as %s: %s, %d × %s, paths %s",
            self.worker_id,
            caps.get("platform"),
            caps.get("device_count", 0),
            caps.get("device_kind"),
            ", ".join(caps.get("paths", [])),
        )

    async def _lease(self) -> dict[str, Any] | None:
        body = {**self.me, "wait_s": self.poll_s}
        response = await self.link.post("/lease", body, timeout=self.poll_s + 15.0)
        if response.status_code == 204:
            return None
        if response.status_code == 404:
            log.warning("the server does not know this worker; registering again")
            await self.register()
            return None
        if response.status_code != 200:
            log.warning("lease failed (%d): %s", response.status_code, detail(response))
            await asyncio.sleep(1.0)
            return None
        grant: dict[str, Any] = response.json()
        return grant

    # --- the loop ----------------------------------------------------------------------

    async def run(self) -> int:
        """Serve jobs until asked to stop; the exit status."""
        loop = asyncio.get_running_loop()
        handlers = {
            signal.SIGTERM: self.request_stop,
            signal.SIGINT: self.request_stop,
            signal.SIGUSR1: self.drain,
            signal.SIGUSR2: self.parent_gone,
        }
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        try:
            runner = await self.pool.get(1)
            self.capabilities = await runner.detect(self.config.max_virtual_devices)
            await self.register()
            while not self.stop.stopping:
                self._poll_task = asyncio.create_task(self._lease())
                try:
                    grant = await self._poll_task
                except asyncio.CancelledError:
                    if self.stop.stopping:
                        break
                    raise
                finally:
                    self._poll_task = None
                if grant is not None:
                    await self.handle(grant)
                else:
                    await self._idle_round()
            return 0
        except httpx.TransportError:
            if self.stop.stopping:
                log.info("stopped while the server was unreachable")
                return 0
            raise
        except Fatal as exc:
            log.error("%s", exc)
            return 3
        except RunnerFailed as exc:
            log.error("could not start a runner: %s\n%s", exc, exc.stderr_tail)
            return 4
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)
            await self.pool.close()
            await self.link.aclose()

    async def _idle_round(self) -> None:
        """A long poll came back empty: the idle steps (workers.agent.idle), telling the
        server what each changed."""
        for step in (self.idle.ceilings, self.idle.capacities):
            if self.stop.stopping:
                return
            fresh = await step(self.capabilities)
            if fresh is not None:
                self.capabilities = fresh
                await self.register()  # the same worker id: the server keeps the new figures

    def request_stop(self) -> None:
        """First call: finish the current job, take no more. A later one (not of the same
        burst): kill the runner and give the lease back."""
        if self.stop.stopping:
            if time.monotonic() - self._stop_at >= ESCALATE_AFTER_S:
                self.abort()
            return
        self.drain()

    def abort(self) -> None:
        """Stop at once: the current job's runner is killed and its lease given back."""
        if not self.stop.abort.is_set():
            log.warning("stopping now: the current job's lease is given back")
        self.drain()
        self.stop.abort.set()

    def parent_gone(self) -> None:
        """The parent-death signal: stop at once if `boundary serve` really died; Linux
        also sends it when merely a thread of the parent exits, which changes nothing."""
        expected = os.environ.get(PARENT_ENV, "")
        if expected.isdigit() and os.getppid() == int(expected):
            return
        log.warning("the server that started this worker is gone")
        self.abort()

    def drain(self) -> None:
        """Finish the current job (and report it), take no more, then exit. Idempotent."""
        if self.stop.stopping:
            return
        log.info("stopping after the current job (signal again to stop at once)")
        self._stop_at = time.monotonic()
        self.stop.requested.set()
        if self._poll_task is not None:
            self._poll_task.cancel()

    async def handle(self, grant: dict[str, Any]) -> None:
        """Run one leased job and report how it went."""
        job_id: str = grant["job_id"]
        lease_id: str = grant["lease_id"]
        wanted = wanted_runner(grant.get("requirements", {}))
        cancelled = asyncio.Event()
        forwarder = ProgressForwarder(lambda batch: self._progress(job_id, lease_id, batch))
        helpers = [
            asyncio.create_task(self._heartbeats(job_id, lease_id, cancelled)),
            asyncio.create_task(forwarder.run()),
        ]
        report: dict[str, Any] | None = None
        try:
            report = await self._execute(grant, wanted, forwarder, cancelled)
        finally:
            for task in helpers:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if report is None:  # cancelled, lost, or given back: nothing to report
            return
        try:
            await forwarder.flush()
            body = {**self.me, "job_id": job_id, "lease_id": lease_id}
            await self._report({**body, **report})
        except httpx.TransportError as exc:
            log.error("could not report job %s (%s); its lease will expire", job_id, exc)

    async def _execute(
        self,
        grant: dict[str, Any],
        wanted: RunnerKey,
        forwarder: ProgressForwarder,
        cancelled: asyncio.Event,
    ) -> dict[str, Any] | None:
        # Pin every file the job names for its whole run, before fetching what is
        # missing: no other job or worker sharing the folder can evict one meanwhile.
        files = self._files()
        with contextlib.ExitStack() as pins:
            for sha in job_files(grant["spec"]).values():
                pins.enter_context(files.pinned(sha))
            missing = await self.link.fetch_files(grant["spec"], files)
            if missing is not None:
                return {"failure": {"reason": missing}}
            return await self._run_fetched(grant, wanted, forwarder, cancelled, files)

    async def _run_fetched(
        self,
        grant: dict[str, Any],
        wanted: RunnerKey,
        forwarder: ProgressForwarder,
        cancelled: asyncio.Event,
        files: FileCache,
    ) -> dict[str, Any] | None:
        job_id = grant["job_id"]
        request = {
            "job": grant["spec"],
            "cache_dir": str(self.config.cache_dir) if self.config.cache_dir else None,
            "max_bytes": self.config.max_job_bytes,
            "files_dir": str(files.directory),
        }
        runner: Runner | None = None
        devices, chipless = wanted  # (see `wanted_runner`)
        try:
            runner = await self.pool.get(devices, chipless=chipless)
            memory = self.config.memory
            work = asyncio.create_task(
                runner.run(request, float(grant["timeout_s"]), forwarder.add, memory)
            )
            stop = asyncio.create_task(cancelled.wait())
            abort = asyncio.create_task(self.stop.abort.wait())
            done, _ = await asyncio.wait({work, stop, abort}, return_when=asyncio.FIRST_COMPLETED)
            for task in (stop, abort):
                task.cancel()
            if work not in done:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, RunnerFailed):
                    await work
                await runner.kill()
                self.pool.forget(runner)
                self.pool.warm(devices, chipless=chipless)
                if abort in done:
                    body = {**self.me, "job_id": job_id}
                    await self.link.post("/release", {**body, "lease_id": grant["lease_id"]})
                    log.info("job %s given back", job_id)
                else:
                    log.info("job %s abandoned: the server cancelled it or its lease", job_id)
                return None
            outcome: Outcome = work.result()
            if outcome.replace or (memory is not None and runner.keeps_too_much(memory)):
                # Over its memory limit, or holding too much after giving back what it
                # could: the next job gets a fresh runner.
                log.info("runner %s replaced after job %s (its memory)", runner.pid, job_id)
                await runner.kill()
                self.pool.forget(runner)
                self.pool.warm(devices, chipless=chipless)
        except RunnerFailed as exc:
            log.warning("job %s failed: %s", job_id, exc)
            if runner is not None:
                self.pool.forget(runner)
            self.pool.warm(devices, chipless=chipless)  # a fresh runner for the next job
            return {"failure": {"reason": str(exc), "stderr_tail": exc.stderr_tail or None}}
        if outcome.result is None:
            reason = f"{outcome.error_kind or 'error'}: {outcome.error}"
            return {"failure": {"reason": reason, "stderr_tail": runner.stderr_tail() or None}}
        self.jobs_done += 1
        return {
            "result": cap_artifacts(outcome.result, self.artifact_max_bytes),
            "run_seconds": outcome.run_s,
        }

    def _files(self) -> FileCache:
        return FileCache(files_folder(self.config.files_dir, self.config.cache_dir))

    async def _heartbeats(self, job_id: str, lease_id: str, cancelled: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            body = {**self.me, "job_id": job_id, "lease_id": lease_id}
            try:
                response = await self.link.post("/heartbeat", body, timeout=10.0, retry=False)
            except httpx.TransportError as exc:
                log.warning("heartbeat failed (%s); the job goes on", exc)
                continue
            # 409: the lease has ended (the job was cancelled, re-queued or given to another).
            if response.status_code in (200, 409) and response.json().get("cancel"):
                log.info("job %s: %s", job_id, response.json().get("reason"))
                cancelled.set()
                return

    async def _progress(self, job_id: str, lease_id: str, batch: list[dict[str, Any]]) -> None:
        body = {**self.me, "job_id": job_id, "lease_id": lease_id, "events": batch}
        with contextlib.suppress(httpx.TransportError):
            await self.link.post("/progress", body, timeout=10.0, retry=False)

    async def _report(self, body: dict[str, Any]) -> None:
        """Post a result or failure until the server has an answer for it."""
        response = await self.link.post("/result", body, timeout=120.0)
        if response.status_code == 404 and "worker" in detail(response):
            # Forgotten by the server: this lease is gone with it. Register again for the
            # next job; the report itself cannot be accepted any more.
            await self.register()
        if response.status_code == 422 and "result" in body:
            failure = {"reason": f"the server refused the run: {detail(response)[:1500]}"}
            keys = ("worker_id", "worker_key", "job_id", "lease_id")
            response = await self.link.post(
                "/result", {**{k: body[k] for k in keys}, "failure": failure}
            )
        if response.status_code != 200:
            log.warning(
                "report on %s refused (%d): %s",
                body["job_id"],
                response.status_code,
                detail(response),
            )
        else:
            log.info("job %s reported: %s", body["job_id"], response.json().get("status"))
