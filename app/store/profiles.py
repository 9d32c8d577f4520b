"""Profiler traces in the store: kept as files of their job.

A worker sends a run's trace base64 inside the run result (`RunResult.profile`). The
server stores the bytes once, by content hash, attaches them to the job as `profile`,
and keeps only the description in the stored result, so the run JSON stays small.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import tarfile
import zlib
from typing import IO

from app.store.files import Files
from workers.protocol import RunResult

PROFILE_FILE = "profile"
PROFILE_MEDIA = "application/gzip"
PERFETTO_MEDIA = "application/gzip"

INFLATE_RATIO = 100
"""How many times its packed size a trace may inflate to: the archive's tar and its gzip
members (the Chrome trace) together. A profiler's own trace inflates about 6 times."""
INFLATE_FLOOR = 1024 * 1024
"""What any trace may inflate to, however small it is packed."""
INFLATE_MAX_BYTES = 256 * 1024 * 1024
"""What no trace may inflate past, however large it is packed."""
_CHUNK = 1024 * 1024


def _inflated_past(source: IO[bytes], budget: int) -> int:
    """How many bytes gzip `source` inflates to, read a chunk at a time; stops (returning
    budget + 1) as soon as it passes `budget`. Raises OSError/EOFError for what is no gzip."""
    total = 0
    with gzip.GzipFile(fileobj=source) as inflating:
        while chunk := inflating.read(_CHUNK):
            total += len(chunk)
            if total > budget:
                return budget + 1
    return total


def inflation_problem(data: bytes) -> str | None:
    """Why the packed trace `data` may not be stored, or None: it must be a .tar.gz whose
    tar and gzip members together inflate to at most INFLATE_RATIO times its size (at least
    INFLATE_FLOOR, at most INFLATE_MAX_BYTES), so that a few kilobytes can never make the
    server inflate hundreds of megabytes each time the trace is read. Costs up to the
    allowance in inflation: run it off the event loop."""
    allowed = min(INFLATE_MAX_BYTES, max(INFLATE_FLOOR, INFLATE_RATIO * len(data)))
    too_big = (
        f"it inflates to over {allowed:,} bytes (a trace may inflate to {INFLATE_RATIO} times "
        f"its packed size, at least {INFLATE_FLOOR:,} and at most {INFLATE_MAX_BYTES:,} bytes)"
    )
    try:
        total = _inflated_past(io.BytesIO(data), allowed)
        if total > allowed:
            return too_big
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|gz") as tar:
            for info in tar:
                if not (info.isfile() and info.name.endswith(".gz")):
                    continue
                member = tar.extractfile(info)
                if member is not None:
                    total += _inflated_past(member, allowed - total)
                if total > allowed:
                    return too_big
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return "it is not a .tar.gz archive of gzip members"
    return None


def screen_profile(result: RunResult) -> RunResult:
    """`result`, its trace dropped with a warning when `inflation_problem` finds one (the
    checks of size, base64 and hash are `keep_profile`'s)."""
    trace = result.profile
    if trace is None or trace.data_b64 is None:
        return result
    try:
        data = base64.b64decode(trace.data_b64, validate=True)
    except (binascii.Error, ValueError):
        return result  # keep_profile says so
    problem = inflation_problem(data)
    if problem is None:
        return result
    return _dropped(result, problem)


def _dropped(result: RunResult, problem: str) -> RunResult:
    warning = f"profile: the trace was not stored: {problem}."
    return result.model_copy(update={"profile": None, "warnings": [*result.warnings, warning]})


def keep_profile(store: Files, job_id: str, result: RunResult, max_bytes: int) -> RunResult:
    """`result` without its trace bytes, which are stored and attached to the job.

    A trace that is over `max_bytes`, is not valid base64 or does not match its declared
    hash is dropped with a warning instead; the run itself is kept either way.
    """
    trace = result.profile
    if trace is None or trace.data_b64 is None:
        return result
    problem = None
    try:
        data = base64.b64decode(trace.data_b64, validate=True)
    except (binascii.Error, ValueError):
        data, problem = b"", "its bytes were not valid base64"
    if problem is None and len(data) > max_bytes:
        problem = f"it is {len(data):,} bytes, over this server's limit of {max_bytes:,}"
    if problem is None and hashlib.sha256(data).hexdigest() != trace.sha256:
        problem = "its bytes do not match the sha256 the worker declared"
    kept = trace.model_copy(update={"data_b64": None, "size": len(data), "stored": True})
    if problem is not None:
        return _dropped(result, problem)
    store.attach_file(job_id, PROFILE_FILE, store.put_file(data, PROFILE_MEDIA))
    return result.model_copy(update={"profile": kept})


def read_member(archive: bytes | IO[bytes], name: str, max_bytes: int) -> bytes | None:
    """One regular file out of a packed trace (its bytes, or a seekable file of them);
    None if absent, not a file or too large."""
    source = io.BytesIO(archive) if isinstance(archive, bytes) else archive
    try:
        source.seek(0)
        with tarfile.open(fileobj=source, mode="r:gz") as tar:
            try:
                info = tar.getmember(name)
            except KeyError:
                return None
            if not info.isfile() or info.size > max_bytes:
                return None
            handle = tar.extractfile(info)
            return handle.read() if handle is not None else None
    except (tarfile.TarError, OSError, EOFError):
        return None
