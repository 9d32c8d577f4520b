"""Profiler traces of the sampled calls: captured with `jax.profiler`, packed for download.

When a job asks for `measure.profile`, the engine opens a `ProfileCapture` around the
sampling loop only: compile and warm-up happen before it starts, the correctness check
after it stops, so the trace shows exactly the calls whose times the run reports (and
those times include the profiler's own overhead, which the run's warnings say).

The profiler writes a log directory in the layout XProf reads
(`plugins/profile/<run>/<host>.xplane.pb`) with a Chrome-format `<host>.trace.json.gz`
beside it, which Perfetto opens directly. Both go into one .tar.gz, sent base64 inside
the run result; the server stores it as a file of the job.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import cast

import jax

from workers.protocol import BoundaryId, Measurement, Mode, ProfileTrace

PROFILE_MAX_BYTES = 32 * 1024 * 1024
"""The largest packed trace a worker sends; a bigger one is dropped with a warning."""

start_trace = cast("Callable[[str], None]", jax.profiler.start_trace)
stop_trace = cast("Callable[[], None]", jax.profiler.stop_trace)
"""jax.profiler's own, typed: one trace at a time per process."""

OVERHEAD_WARNING = (
    "profile: the profiler was recording while these samples were taken, so they include "
    "its overhead; compare them only with other profiled runs."
)


class ProfileCapture:
    """Records a JAX profiler trace when `enabled`, else nothing.

    Use `start()` … `finish(...)`, or `with capture:` … `capture.pack(...)`. Either way
    the result is a `ProfileTrace` (None when disabled) and the temporary log directory
    is removed.
    """

    def __init__(self, enabled: bool, max_bytes: int = PROFILE_MAX_BYTES) -> None:
        self.enabled = enabled
        self.max_bytes = max_bytes
        self._dir: Path | None = None
        self._running = False
        self.warnings: list[str] = []

    def start(self) -> ProfileCapture:
        """Begin recording (when enabled)."""
        if not self.enabled:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="boundary-profile-"))
        try:
            start_trace(str(self._dir))
        except RuntimeError:
            # A job that failed mid-sampling left its trace running: end it, start ours.
            stop_trace()
            start_trace(str(self._dir))
        self._running = True
        return self

    def stop(self) -> None:
        """Stop recording; harmless when nothing is recording."""
        if self._running:
            self._running = False
            stop_trace()

    def finish(
        self, measurements: list[Measurement], mode: Mode, device: str
    ) -> ProfileTrace | None:
        """Stop recording and `pack` what was recorded."""
        self.stop()
        return self.pack(measurements, mode, device)

    def __enter__(self) -> ProfileCapture:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def pack(self, measurements: list[Measurement], mode: Mode, device: str) -> ProfileTrace | None:
        """The recorded trace, described and packed; None when nothing was recorded.

        `measurements` are the samples taken inside the trace, `mode` the loop that took
        them and `device` the device they ran on, for the description of what it covers.
        """
        if self._dir is None:
            return None
        try:
            return self._pack(self._dir, measurements, mode, device)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _pack(
        self, root: Path, measurements: list[Measurement], mode: Mode, device: str
    ) -> ProfileTrace | None:
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        if not files:
            self.warnings.append("profile: the profiler wrote no files; no trace is attached.")
            return None
        data = pack_directory(root, files)
        main = main_measurement(mode, measurements)
        boundary = main.boundary if main is not None else None
        calls = executions(mode, measurements)
        samples = len(main.samples_s) if main is not None else 0
        boundaries = ", ".join(m.boundary.value for m in measurements) or "no"
        noun = "boundary" if len(measurements) == 1 else "boundaries"
        covers = (
            f"the sampling loop of mode {mode.value} ({samples} samples of the {boundaries} "
            f"{noun}, {calls} executions in all) on {device}; not tracing, lowering, "
            "compiling or the warm-up, which ran before the trace began"
        )
        perfetto = next((f for f in files if f.endswith(".trace.json.gz")), None)
        trace = ProfileTrace(
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            files=files,
            perfetto=perfetto,
            covers=covers,
            boundary=boundary,
            calls=calls,
            device=device,
        )
        if len(data) > self.max_bytes:
            self.warnings.append(
                f"profile: the trace packs to {len(data):,} bytes, over the limit of "
                f"{self.max_bytes:,}; it was not sent. Take fewer samples to profile."
            )
            return trace
        trace.data_b64 = base64.b64encode(data).decode("ascii")
        return trace


def pack_directory(root: Path, files: list[str]) -> bytes:
    """`files` (paths relative to `root`) as a gzip-compressed tar, in memory."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in files:
            archive.add(root / name, arcname=name, recursive=False)
    return buffer.getvalue()


def executions(mode: Mode, measurements: list[Measurement]) -> int:
    """How many times the sampling loop of `mode` ran the program for `measurements`.

    Latency makes one more, untimed call to get the output it checks; throughput makes
    K calls per sample; application makes two calls per sample (one inside the transfer
    intervals' sample, one inside the whole trip's).
    """
    main = main_measurement(mode, measurements)
    if main is None:
        return 0
    count = len(main.samples_s)
    if mode is Mode.LATENCY:
        return count + 1
    if mode is Mode.THROUGHPUT:
        return count * main.calls_per_sample
    if mode is Mode.APPLICATION:
        return 2 * count
    return count


def main_measurement(mode: Mode, measurements: list[Measurement]) -> Measurement | None:
    """The measurement a mode is about (application: the whole trip), else the first."""
    wanted = BoundaryId.APPLICATION if mode is Mode.APPLICATION else None
    for m in measurements:
        if m.boundary is wanted:
            return m
    return measurements[0] if measurements else None
