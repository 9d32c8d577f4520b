"""Uploaded files: exported functions and .npz archives, checked and described without jax.

The server never runs what it is sent. An exported function's header is read by
`workers.catalog.jaxexport` (a bounds-checked FlatBuffer walk); an .npz archive's arrays
are described from their .npy headers alone, so nothing is decompressed or unpickled.
A job naming stored files is checked against them before it is queued: each file exists
and is of the right kind, and the artifact was exported for the job's path.
"""

from __future__ import annotations

import email.parser
import email.policy
import io
import math
import re
import zipfile
from dataclasses import dataclass
from typing import Any

from app.store import Store
from workers.catalog import WORKLOADS, over_limit
from workers.catalog.exported import EXPORT_MEDIA_TYPE, JAX_PLATFORM, NPZ_MEDIA_TYPE
from workers.catalog.jaxexport import ArtifactError, ExportHeader, read_header
from workers.protocol import JobSpec

KINDS: dict[str, str] = {"exported": EXPORT_MEDIA_TYPE, "npz": NPZ_MEDIA_TYPE}
"""Upload kinds and the media type each is stored under."""

MAX_NPZ_ARRAYS = 256
MAX_FORM_PARTS = 8
"""The upload form has four fields; a multipart body with more parts is refused."""
NPZ_MEMBER = re.compile(r"^(arg|out)(0|[1-9][0-9]{0,3})\.npy$")
"""The only members an .npz may hold: a function's inputs arg0, arg1, … and its
reference outputs out0, …"""


class UploadError(ValueError):
    """An uploaded file that cannot be used; the message says why in plain words."""


@dataclass(frozen=True)
class ArrayInfo:
    """One array of an .npz archive, from its header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    """What the header declares: shape × item size (whatever the file really holds)."""

    def text(self) -> str:
        return f"{self.name}: {self.dtype}[{','.join(str(d) for d in self.shape)}]"


def exported_header(data: bytes) -> ExportHeader:
    """The artifact's header, refusing (UploadError) what no worker could ever run."""
    try:
        header = read_header(data)
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


def npz_arrays(data: bytes) -> list[ArrayInfo]:
    """The arrays of an .npz archive, read from their headers (UploadError if unreadable)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise UploadError("not an .npz archive (it is no zip file)") from None
    import numpy as np  # only for .npz headers; kept out of the server's start-up

    found: list[ArrayInfo] = []
    with archive:
        names = archive.namelist()
        if not names or len(names) > MAX_NPZ_ARRAYS:
            raise UploadError(f"an .npz archive holds 1 to {MAX_NPZ_ARRAYS} arrays")
        for member in names:
            if not NPZ_MEMBER.match(member):
                raise UploadError(
                    f"{member[:60]!r}: an .npz holds only arrays named arg0, arg1, … "
                    "(a function's inputs) and out0, … (its reference outputs)"
                )
            try:
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise UploadError(f"{member[:60]!r}: not a readable array ({exc})"[:200]) from None
            if dtype.hasobject:
                raise UploadError(f"{member[:60]!r} holds Python objects, which are refused")
            nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
            found.append(ArrayInfo(member.removesuffix(".npy"), str(dtype), tuple(shape), nbytes))
    return found


def describe(kind: str, data: bytes) -> dict[str, Any]:
    """What an upload of `kind` holds, as JSON (UploadError when it is unusable)."""
    if kind == "exported":
        return {"header": exported_header(data).as_dict()}
    return {"arrays": [a.text() for a in npz_arrays(data)]}


def kind_of(media_type: str) -> str | None:
    return next((k for k, m in KINDS.items() if m == media_type), None)


# --- multipart/form-data, for the upload page (no extra dependency) ----------------------


def parse_multipart(body: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """Form fields by name → (file name or None, bytes), using the standard email parser."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    if body.count(b"\r\nContent-Disposition") > MAX_FORM_PARTS:  # before the parse's work
        raise UploadError(f"the form has more than {MAX_FORM_PARTS} parts")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise UploadError("send the form as multipart/form-data")
    parts = list(message.iter_parts())
    if len(parts) > MAX_FORM_PARTS:
        raise UploadError(f"the form has more than {MAX_FORM_PARTS} parts")
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        fields[name] = (part.get_filename(), data)
    return fields


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
        stored = store.get_file(sha)
        if stored is None:
            problems.append((field, f"no uploaded file {sha[:12]}…: POST it to /api/v1/artifacts"))
            continue
        if stored.media_type != media_type:
            wanted = kind_of(media_type) or media_type
            problems.append((field, f"file {sha[:12]}… is not of kind {wanted}"))
            continue
        if name == "artifact":
            problems += _artifact_problems(stored.data, spec, max_job_bytes)
        else:
            try:
                arrays.extend((field, a) for a in npz_arrays(stored.data))
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
    data: bytes, spec: JobSpec, max_job_bytes: int
) -> list[tuple[str | None, str]]:
    field = "params.artifact"
    try:
        header = exported_header(data)
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
        size = sum(aval.nbytes() for aval in (*header.in_avals, *header.out_avals))
    except ArtifactError as exc:
        return [(field, str(exc))]
    if size > max_job_bytes:
        return [(field, over_limit(size, max_job_bytes))]
    return []
