"""A run's profiler trace on its page: what the page says about it, and its downloads
(the whole archive, or the Perfetto member). How the trace is stored: app.store.profiles.
"""

from __future__ import annotations

import tarfile
from typing import IO, Any

from fastapi import HTTPException
from starlette.responses import Response, StreamingResponse

from app.store.files import Files
from app.store.profiles import PERFETTO_MEDIA, PROFILE_FILE, PROFILE_MEDIA, read_member


def profile_view(job_id: str, run_json: dict[str, Any]) -> dict[str, Any] | None:
    """What the run page says about a run's trace, with its download links and, when the
    trace has a Chrome-format member, its timeline page."""
    trace = run_json.get("profile")
    if not trace:
        return None
    stored = bool(trace.get("stored"))
    base = f"/runs/{job_id}/profile"
    chrome = stored and bool(trace.get("perfetto"))
    return {
        "covers": trace.get("covers", ""),
        "size": trace.get("size", 0),
        "files": trace.get("files", []),
        "stored": stored,
        "archive": base if stored else None,
        "perfetto": f"{base}/perfetto.json.gz" if chrome else None,
        "timeline": f"{base}/timeline" if chrome else None,
    }


def chrome_trace(store: Files, job_id: str, max_bytes: int) -> bytes:
    """The stored trace's Chrome-format member (.trace.json.gz), as the profiler wrote it;
    404 when the job has no trace or the trace has no such member. The archive is read
    from the store chunk by chunk; only the member is held."""
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    archive = store.open_file(found.sha256) if found is not None else None
    if archive is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    with archive:
        member = _perfetto_member(archive)
        data = read_member(archive, member, max_bytes) if member else None
    if data is None:
        raise HTTPException(status_code=404, detail="the trace holds no Perfetto-readable file")
    return data


def profile_response(store: Files, job_id: str, perfetto: bool, max_bytes: int) -> Response:
    """The stored trace of a job as a download: the whole archive (streamed from the
    store), or its Perfetto member."""
    if perfetto:
        data = chrome_trace(store, job_id, max_bytes)
        name = f"{job_id}-trace.json.gz"
        return Response(data, media_type=PERFETTO_MEDIA, headers=_attachment(name))
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    chunks = store.file_chunks(found.sha256) if found is not None else None
    if found is None or chunks is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    headers = {**_attachment(f"{job_id}-profile.tar.gz"), "Content-Length": str(found.size)}
    return StreamingResponse(chunks, media_type=PROFILE_MEDIA, headers=headers)


def _perfetto_member(archive: IO[bytes]) -> str | None:
    try:
        archive.seek(0)
        with tarfile.open(fileobj=archive, mode="r:gz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError, EOFError):
        return None
    return next((n for n in names if n.endswith(".trace.json.gz")), None)


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
