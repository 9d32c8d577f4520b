"""Profiler traces in the store: kept as files of their job.

A worker sends a run's trace base64 inside the run result (`RunResult.profile`). The
server stores the bytes once, by content hash, attaches them to the job as `profile`,
and keeps only the description in the stored result, so the run JSON stays small.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import tarfile
from typing import IO

from app.store.files import Files
from workers.protocol import RunResult

PROFILE_FILE = "profile"
PROFILE_MEDIA = "application/gzip"
PERFETTO_MEDIA = "application/gzip"


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
        warning = f"profile: the trace was not stored: {problem}."
        return result.model_copy(update={"profile": None, "warnings": [*result.warnings, warning]})
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
