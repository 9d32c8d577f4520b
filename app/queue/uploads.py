"""Uploaded files: exported functions and .npz archives, checked and described without jax.

The server never runs what it is sent. An exported function's header is read by
`workers.catalog.jaxexport` (a bounds-checked FlatBuffer walk); an .npz archive's arrays
are described from their .npy headers alone, so nothing is decompressed or unpickled.
A job naming stored files is checked against them before it is queued, in
`app.queue.job_files`.
"""

from __future__ import annotations

from typing import IO, Any

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
