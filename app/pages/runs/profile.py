"""A run's profiler trace on its page: what the page says about it, and its downloads
(the whole archive, or the Perfetto member). How the trace is stored: app.store.profiles.
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

from fastapi import HTTPException
from starlette.responses import Response

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
    404 when the job has no trace or the trace has no such member."""
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    if found is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    member = _perfetto_member(found.data)
    data = read_member(found.data, member, max_bytes) if member else None
    if data is None:
        raise HTTPException(status_code=404, detail="the trace holds no Perfetto-readable file")
    return data


def profile_response(store: Files, job_id: str, perfetto: bool, max_bytes: int) -> Response:
    """The stored trace of a job as a download: the whole archive, or its Perfetto member."""
    if perfetto:
        data = chrome_trace(store, job_id, max_bytes)
        name = f"{job_id}-trace.json.gz"
        return Response(data, media_type=PERFETTO_MEDIA, headers=_attachment(name))
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    if found is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    name = f"{job_id}-profile.tar.gz"
    return Response(found.data, media_type=PROFILE_MEDIA, headers=_attachment(name))


def _perfetto_member(archive: bytes) -> str | None:
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError, EOFError):
        return None
    return next((n for n in names if n.endswith(".trace.json.gz")), None)


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
