"""The local workers `boundary serve` starts, keeps running and stops gracefully.

- They start once the server accepts connections (their JAX start-up then stays off the
  CPU while the server boots), and reach it as `--server` says: the server's host and
  port, or its unix socket (`serve --uds`), so that a server on a socket opens no TCP port
  for them.
- They run on JAX's CPU backend (BOUNDARY_JAX_PLATFORMS=cpu unless the operator set it):
  on a TPU host the chip has one holder, a `boundary worker` of its own.
- A worker that dies while the server runs is started again, unless it refused its
  configuration (exit status 2, its reason in the log): starting it again would only
  refuse again, once a second.
- On SIGTERM, `serve` stops leasing and asks each worker to finish its current job and
  report it (SIGUSR1, which a worker never escalates), waits up to WORKER_GRACE_S for
  them to exit, and only then lets the server close. A worker still busy after the grace
  period is asked to give its lease back (two SIGTERMs a second apart), then killed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("boundary.serve")

RESTART_DELAY_S = 1.0
REFUSED_STATUS = 2
"""What `boundary worker` exits with when its options or environment cannot be used."""
ABORT_WAIT_S = 15.0


class LocalWorkers:
    """`count` worker processes attached to this server (see the module's docstring)."""

    def __init__(self, server: str, count: int, env: dict[str, str], grace_s: float):
        self.server, self.count = server, count
        self.env = {"BOUNDARY_JAX_PLATFORMS": "cpu", **env}
        self.env["BOUNDARY_WORKER_PARENT"] = str(os.getpid())
        self.grace_s = grace_s
        self.children: list[subprocess.Popen[bytes] | None] = [None] * count
        self.draining = threading.Event()
        self.restarts = 0
        self.refused: set[int] = set()
        """Slots whose worker refused its configuration: never started again."""

    def start(self) -> None:
        """Start the workers (and restart any that dies) from a background thread; `serve`
        calls it once the server accepts connections."""
        threading.Thread(target=self._supervise, name="local-workers", daemon=True).start()

    def _spawn(self, slot: int) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "app.cli", "worker", "--server", self.server]
        # The worker arms its parent-death signal itself (no preexec_fn with threads).
        return subprocess.Popen([*command, "--name", f"local-{slot + 1}"], env=self.env)

    def _supervise(self) -> None:
        while not self.draining.is_set():
            for slot, child in enumerate(self.children):
                if self.draining.is_set():
                    break
                if slot in self.refused:
                    continue
                if child is None:
                    self.children[slot] = self._spawn(slot)
                elif child.poll() == REFUSED_STATUS:
                    log.error(
                        "local worker %d refused its configuration (its reason is above); "
                        "not starting it again",
                        slot + 1,
                    )
                    self.refused.add(slot)
                elif child.poll() is not None:
                    log.warning(
                        "local worker %d exited (status %s); starting it again",
                        slot + 1,
                        child.returncode,
                    )
                    self.restarts += 1
                    self.children[slot] = self._spawn(slot)
            self.draining.wait(RESTART_DELAY_S)

    def _alive(self) -> list[subprocess.Popen[bytes]]:
        return [c for c in self.children if c is not None and c.poll() is None]

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not self._alive()

    def drain(self, then: Callable[[], None]) -> None:
        """Let every worker finish its job and exit (in a thread), then call `then`."""
        self.draining.set()

        def run() -> None:
            try:
                for child in self._alive():
                    child.send_signal(signal.SIGUSR1)
                if not self._wait(self.grace_s):
                    busy = self._alive()
                    log.warning(
                        "%d local worker(s) still busy after %g s: giving their leases back",
                        len(busy),
                        self.grace_s,
                    )
                    for child in busy:
                        child.send_signal(signal.SIGTERM)
                    time.sleep(1.2)  # a second SIGTERM this much later means "now"
                    for child in self._alive():
                        child.send_signal(signal.SIGTERM)
                    if not self._wait(ABORT_WAIT_S):
                        for child in self._alive():
                            child.kill()
            finally:
                then()

        threading.Thread(target=run, name="drain-local-workers", daemon=True).start()

    def stop(self) -> None:
        """The server has closed: no worker outlives it."""
        self.draining.set()
        for child in self._alive():
            child.terminate()
        for child in [c for c in self.children if c is not None]:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
