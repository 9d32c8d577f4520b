"""Profiler traces on the server: kept as files of their job, described on the run page.

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
from typing import Any

from fastapi import HTTPException
from starlette.responses import Response

from app.store import Store
from workers.protocol import RunResult

PROFILE_FILE = "profile"
PROFILE_MEDIA = "application/gzip"
PERFETTO_MEDIA = "application/gzip"


def keep_profile(store: Store, job_id: str, result: RunResult, max_bytes: int) -> RunResult:
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


def read_member(archive: bytes, name: str, max_bytes: int) -> bytes | None:
    """One regular file out of a packed trace; None if absent, not a file or too large."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
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


def profile_view(job_id: str, run_json: dict[str, Any]) -> dict[str, Any] | None:
    """What the run page says about a run's trace, with its download links."""
    trace = run_json.get("profile")
    if not trace:
        return None
    stored = bool(trace.get("stored"))
    base = f"/runs/{job_id}/profile"
    return {
        "covers": trace.get("covers", ""),
        "size": trace.get("size", 0),
        "files": trace.get("files", []),
        "stored": stored,
        "archive": base if stored else None,
        "perfetto": f"{base}/perfetto.json.gz" if stored and trace.get("perfetto") else None,
    }


def profile_response(store: Store, job_id: str, perfetto: bool, max_bytes: int) -> Response:
    """The stored trace of a job as a download: the whole archive, or its Perfetto member."""
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    if found is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    if not perfetto:
        name = f"{job_id}-profile.tar.gz"
        return Response(found.data, media_type=PROFILE_MEDIA, headers=_attachment(name))
    member = _perfetto_member(found.data)
    data = read_member(found.data, member, max_bytes) if member else None
    if data is None:
        raise HTTPException(status_code=404, detail="the trace holds no Perfetto-readable file")
    name = f"{job_id}-trace.json.gz"
    return Response(data, media_type=PERFETTO_MEDIA, headers=_attachment(name))


def _perfetto_member(archive: bytes) -> str | None:
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError, EOFError):
        return None
    return next((n for n in names if n.endswith(".trace.json.gz")), None)


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
