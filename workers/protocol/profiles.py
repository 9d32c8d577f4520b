"""Profiler traces of a run's sampled calls."""

from __future__ import annotations

from pydantic import Field

from workers.protocol.base import BoundaryId, OpenModel


class ProfileTrace(OpenModel):
    """A JAX profiler trace of a run's sampled calls, packed as a .tar.gz of the profiler's
    log directory (`plugins/profile/<run>/`: an .xplane.pb for XProf and .trace.json.gz
    files for Perfetto). The worker sends the bytes in `data_b64`; the server stores them
    as a file of the job and keeps only the description."""

    format: str = "tar.gz"
    size: int = Field(ge=0, description="Bytes of the packed archive.")
    sha256: str
    files: list[str] = Field(default_factory=list, description="Paths inside the archive.")
    perfetto: str | None = Field(
        default=None, description="The archive member Perfetto opens directly (.json.gz)."
    )
    covers: str = Field(description="What the trace spans, in words.")
    boundary: BoundaryId | None = None
    calls: int = Field(default=0, description="Executions inside the trace.")
    device: str = ""
    data_b64: str | None = Field(
        default=None, description="The archive, base64; dropped once the server has stored it."
    )
    stored: bool = Field(default=False, description="Set by the server once it keeps the bytes.")
