"""Uploaded files: exported functions and .npz archives, checked and described without jax.

The server never runs what it is sent. An exported function's header is read by
`workers.catalog.jaxexport` (a bounds-checked FlatBuffer walk); an .npz archive's arrays
are described from their .npy headers alone, so nothing is decompressed or unpickled.
A job naming stored files is checked against them before it is queued: each file exists
and is of the right kind, and the artifact was exported for the job's path.
"""

from __future__ import annotations

from typing import IO, Any

from app.store import Store
from workers.catalog import WORKLOADS
from workers.catalog.exported import EXPORT_MEDIA_TYPE, JAX_PLATFORM, NPZ_MEDIA_TYPE
from workers.catalog.jaxexport import ITEMSIZE, ArtifactError, ExportHeader, read_header
from workers.catalog.npz import ArrayInfo, NpzError, read_npz
from workers.catalog.peak import dense_peak, refusal
from workers.protocol import JobSpec, Mode, StageId

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
    if header.nr_devices != 1:
        raise UploadError(
            f"exported for {header.nr_devices} devices; exported functions run on one"
        )
    if len(header.out_avals) != 1:
        raise UploadError(
            f"the function returns {len(header.out_avals)} arrays; the bench times functions "
            "that return exactly one"
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


# --- jobs that name stored files ---------------------------------------------------------


def check_job_files(
    spec: JobSpec, store: Store, max_job_bytes: int
) -> list[tuple[str | None, str]]:
    """Problems (field, message) with the stored files `spec` names; empty when it is fine."""
    cls = WORKLOADS.get(spec.workload)
    fields: dict[str, str] = getattr(cls, "file_fields", {}) if cls is not None else {}
    problems: list[tuple[str | None, str]] = []
    arrays: list[tuple[str, ArrayInfo]] = []
    for name, media_type in fields.items():
        sha = spec.params.get(name)
        if not isinstance(sha, str):
            continue
        field = f"params.{name}"
        stored = store.file_info(sha)
        source = store.open_file(sha) if stored is not None else None
        if stored is None or source is None:
            problems.append((field, f"no uploaded file {sha[:12]}…: POST it to /api/v1/artifacts"))
            continue
        if stored.media_type != media_type:
            source.close()
            wanted = kind_of(media_type) or media_type
            problems.append((field, f"file {sha[:12]}… is not of kind {wanted}"))
            continue
        with source:
            if name == "artifact":
                problems += _artifact_problems(source, spec, max_job_bytes)
                continue
            try:
                arrays.extend((field, a) for a in npz_arrays(source))
            except UploadError as exc:  # stored before a stricter check
                problems.append((field, f"file {sha[:12]}…: {exc}"))
    declared = sum(a.nbytes for _, a in arrays)
    if declared > max_job_bytes:
        biggest_field, biggest = max(arrays, key=lambda fa: fa[1].nbytes)
        problems.append(
            (
                biggest_field,
                f"the arrays declare {declared:,} bytes in all ({biggest.text()} alone "
                f"{biggest.nbytes:,}), over the job's limit of {max_job_bytes:,}",
            )
        )
    return problems


def _artifact_problems(
    source: IO[bytes], spec: JobSpec, max_job_bytes: int
) -> list[tuple[str | None, str]]:
    field = "params.artifact"
    try:
        header = exported_header(source)
    except UploadError as exc:
        return [(field, str(exc))]
    wanted = JAX_PLATFORM.get(spec.path)
    if wanted is None or wanted not in header.platforms:
        return [
            (
                field,
                f"exported for {', '.join(header.platforms)} only; path {spec.path.value} "
                f"needs {wanted or 'a JAX platform'} (export with --platforms {wanted or 'cpu'})",
            )
        ]
    try:
        inputs = sum(aval.nbytes() for aval in header.in_avals)
        output = sum(aval.nbytes() for aval in header.out_avals)
    except ArtifactError as exc:
        return [(field, str(exc))]
    itemsize = ITEMSIZE.get(header.out_avals[0].dtype, 4)
    alive = spec.measure.calls_per_sample if spec.measure.mode is Mode.THROUGHPUT else 1
    problem = refusal(dense_peak(inputs, output, itemsize, alive), max_job_bytes)
    if problem is not None and StageId.EXECUTE in spec.stages:
        return [(field, problem.removeprefix("params: "))]
    return []
