"""Uploaded files: exported functions and .npz archives, checked and described without jax.

The server never runs what it is sent. An exported function's header is read by
`workers.catalog.jaxexport` (a bounds-checked FlatBuffer walk); an .npz archive's arrays
are described from their .npy headers alone, so nothing is decompressed or unpickled.
A job naming stored files is checked against them before it is queued, in
`app.queue.job_files`. An upload form's files are kept as one (`keep_together`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from app.store import Store
from app.store.files import FileWouldGo
from app.web.spool import Spooled
from workers.catalog.exported import EXPORT_MEDIA_TYPE, NPZ_MEDIA_TYPE
from workers.catalog.jaxexport import ArtifactError, ExportHeader, read_header
from workers.catalog.npz import ArrayInfo, NpzError, read_npz

KINDS: dict[str, str] = {"exported": EXPORT_MEDIA_TYPE, "npz": NPZ_MEDIA_TYPE}
"""Upload kinds and the media type each is stored under."""


class UploadError(ValueError):
    """An uploaded file that cannot be used; the message says why in plain words."""


def exported_header(source: bytes | IO[bytes]) -> ExportHeader:
    """The artifact's header, refusing (UploadError) what no worker could ever run."""
    try:
        header = read_header(source)
    except ArtifactError as exc:
        raise UploadError(str(exc)) from None
    symbolic = [a.text() for a in (*header.in_avals, *header.out_avals) if not a.concrete]
    if symbolic:
        raise UploadError(
            f"shape {symbolic[0]} is symbolic: export with concrete shapes (one artifact per shape)"
        )
    return header


def npz_arrays(source: IO[bytes]) -> list[ArrayInfo]:
    """The arrays of an .npz archive, from their headers (UploadError naming the member
    and the dimension when one is negative, overflows or lies about its bytes)."""
    try:
        return read_npz(source)
    except NpzError as exc:
        raise UploadError(str(exc)) from None


def describe(kind: str, source: IO[bytes]) -> dict[str, Any]:
    """What an upload of `kind` holds, as JSON (UploadError when it is unusable)."""
    if kind == "exported":
        return {"header": exported_header(source).as_dict()}
    return {"arrays": [a.text() for a in npz_arrays(source)]}


def kind_of(media_type: str) -> str | None:
    return next((k for k, m in KINDS.items() if m == media_type), None)


def check_upload(kind: str, spooled: Spooled) -> None:
    """UploadError when a spooled upload is unusable (read from disk, headers only)."""
    if not spooled.size:
        raise UploadError("the file is empty")
    with open(spooled.path, "rb") as source:
        describe(kind, source)


def keep_upload(
    store: Store, kind: str, spooled: Spooled, files_max_bytes: int, together: int = 0
) -> str:
    """Keep a checked upload, read from disk in chunks; FileWouldGo when retention would
    remove it (or, with `together` bytes of the same form's other files, one of them) at
    once. The caller runs retention once it has kept all its files."""
    if store.file_info(spooled.sha256) is not None:  # the same bytes again: kept once
        store.touch_files([spooled.sha256])
        return spooled.sha256
    return store.put_file(
        spooled.chunks(), KINDS[kind], files_max_bytes=files_max_bytes, together=together
    )


def keep_together(
    store: Store, prune: Callable[[], object], parts: dict[str, tuple[str, Spooled]], cap: int
) -> dict[str, str]:
    """Keep a form's checked files (name -> (kind, file)) as one: each only if all fit
    under the files' cap `cap` together (FileWouldGo before any is kept otherwise), then
    retention once, which removes older files first; FileWouldGo if it removed one of
    these after all (another upload took the room meanwhile). Their SHA-256 by name."""
    total = sum(part.size for _, part in parts.values())
    stored = {
        name: keep_upload(store, kind, part, cap, total - part.size)
        for name, (kind, part) in parts.items()
    }
    prune()
    if any(store.file_info(sha) is None for sha in stored.values()):
        raise FileWouldGo(
            "other uploads filled the server's limit for files while this form's were stored, "
            f"and retention removed one of them ({cap:,} bytes of files at most): upload "
            "them again"
        )
    return stored
