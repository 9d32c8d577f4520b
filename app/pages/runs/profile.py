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


def profile_response(store: Files, job_id: str, perfetto: bool, max_bytes: int) -> Response:
    """The stored trace of a job as a download: the whole archive, or its Perfetto member."""
    found = store.job_file(job_id, PROFILE_FILE) if len(job_id) <= 64 else None
    chunks = store.file_chunks(found.sha256) if found is not None else None
    if found is None or chunks is None:
        raise HTTPException(status_code=404, detail=f"job {job_id[:64]!r} has no profiler trace")
    if not perfetto:
        name = f"{job_id}-profile.tar.gz"
        headers = {**_attachment(name), "Content-Length": str(found.size)}
        return StreamingResponse(chunks, media_type=PROFILE_MEDIA, headers=headers)
    data = None
    archive = store.open_file(found.sha256)
    if archive is not None:
        with archive:
            member = _perfetto_member(archive)
            data = read_member(archive, member, max_bytes) if member else None
    if data is None:
        raise HTTPException(status_code=404, detail="the trace holds no Perfetto-readable file")
    name = f"{job_id}-trace.json.gz"
    return Response(data, media_type=PERFETTO_MEDIA, headers=_attachment(name))


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
