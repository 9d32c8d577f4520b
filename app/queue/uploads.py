"""Uploaded files: exported functions, .npz archives and the Python lines sent with a
function, checked and described without jax.

The server never runs what it is sent. An exported function's header is read by
`workers.catalog.jaxexport` (a bounds-checked FlatBuffer walk); an .npz archive's arrays
are described from their .npy headers alone, so nothing is decompressed or unpickled.
A sources document (`boundary export-fn`'s FUNCTION.sources.json) is checked field by
field and kept under a media type that names the function it belongs to
(`…; artifact=<sha256>`), which is how the pages find it (`sources_of`) and retention
keeps it with its function. A job naming stored files is checked against them before
it is queued, in `app.queue.job_files`. An upload form's files are kept as one
(`keep_together`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from app.store import Store
from app.store.files import FileWouldGo
from app.web.spool import Spooled
from workers.catalog.exported import EXPORT_MEDIA_TYPE, NPZ_MEDIA_TYPE
from workers.catalog.jaxexport import (
    MAX_SOURCES_BYTES,
    SOURCES_MEDIA_TYPE,
    ArtifactError,
    DimError,
    ExportHeader,
    SentSources,
    SourcesError,
    parse_sources,
    read_header,
)
from workers.catalog.npz import ArrayInfo, NpzError, read_npz

KINDS: dict[str, str] = {
    "exported": EXPORT_MEDIA_TYPE,
    "npz": NPZ_MEDIA_TYPE,
    "sources": SOURCES_MEDIA_TYPE,
}
"""Upload kinds and the media type each is stored under (a sources document's, with the
function it belongs to as a parameter)."""


class UploadError(ValueError):
    """An uploaded file that cannot be used; the message says why in plain words."""


def exported_header(source: bytes | IO[bytes]) -> ExportHeader:
    """The artifact's header, refusing (UploadError) what no worker could ever run."""
    try:
        header = read_header(source)
    except ArtifactError as exc:
        raise UploadError(str(exc)) from None
    try:  # symbolic dimensions are welcome (a run gives each a value), if readable ones
        header.dimensions()
    except DimError as exc:
        raise UploadError(str(exc)) from None
    return header


def npz_arrays(source: IO[bytes]) -> list[ArrayInfo]:
    """The arrays of an .npz archive, from their headers (UploadError naming the member
    and the dimension when one is negative, overflows or lies about its bytes)."""
    try:
        return read_npz(source)
    except NpzError as exc:
        raise UploadError(str(exc)) from None


def sent_sources(source: IO[bytes]) -> SentSources:
    """A sources document, checked (UploadError naming the field when it is unusable)."""
    data = source.read(MAX_SOURCES_BYTES + 1)
    try:
        return parse_sources(data)
    except SourcesError as exc:
        raise UploadError(str(exc)) from None


def sources_media(artifact: str) -> str:
    """The media type a sources document for the function `artifact` is kept under."""
    return f"{SOURCES_MEDIA_TYPE}; artifact={artifact}"


def describe(kind: str, source: IO[bytes]) -> dict[str, Any]:
    """What an upload of `kind` holds, as JSON (UploadError when it is unusable)."""
    if kind == "exported":
        return {"header": exported_header(source).as_dict()}
    if kind == "sources":
        return {"sources": sent_sources(source).summary()}
    return {"arrays": [a.text() for a in npz_arrays(source)]}


def kind_of(media_type: str) -> str | None:
    base = media_type.split(";", 1)[0].strip()
    return next((k for k, m in KINDS.items() if m == base), None)


def check_upload(kind: str, spooled: Spooled) -> None:
    """UploadError when a spooled upload is unusable (read from disk, headers only)."""
    if not spooled.size:
        raise UploadError("the file is empty")
    with open(spooled.path, "rb") as source:
        describe(kind, source)


def media_type_of(kind: str, spooled: Spooled) -> str:
    """The media type a checked upload is kept under."""
    if kind != "sources":
        return KINDS[kind]
    with open(spooled.path, "rb") as source:
        return sources_media(sent_sources(source).artifact)


def check_sources_for(store: Store, spooled: Spooled, artifact: str | None = None) -> None:
    """UploadError unless a checked sources document belongs to a function: `artifact`
    (the one uploaded beside it in a form), or else one the server keeps."""
    with open(spooled.path, "rb") as source:
        named = sent_sources(source).artifact
    if artifact is not None and named != artifact:
        raise UploadError(
            f"artifact: these lines were written for the function {named[:12]}…, not for "
            "the one uploaded with them: choose the .sources.json export-fn wrote beside it"
        )
    found = store.file_info(named) if artifact is None else None
    if artifact is None and (found is None or kind_of(found.media_type) != "exported"):
        raise UploadError(
            f"artifact: no uploaded function {named[:12]}…: upload its .jaxexport first"
        )


def sources_of(store: Store, artifact: str) -> tuple[str, SentSources] | None:
    """The Python lines sent with the function `artifact` (the newest document, when more
    than one was) with the document's SHA-256, or None when none were sent or retention
    removed them."""
    found = store.newest_file(sources_media(artifact))
    source = store.open_file(found.sha256) if found is not None else None
    if found is None or source is None:
        return None
    with source:
        try:
            return found.sha256, sent_sources(source)
        except UploadError:  # stored before a stricter check: as good as none
            return None


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
        spooled.chunks(),
        media_type_of(kind, spooled),
        files_max_bytes=files_max_bytes,
        together=together,
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
