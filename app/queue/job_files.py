"""A job that names stored files, checked against them before it is queued (422 naming
the field): each file exists and is of the right kind; an exported function's artifact
was exported for the job's path (and its target's platform, with no more devices than
the target has); its input rules fit its arguments; its reference fits its results.

All of it reads headers and names, never runs anything: the artifact's FlatBuffer, the
.npy headers inside an .npz, and only the indices of a sampled reference.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from typing import IO, Any

from app.queue.uploads import UploadError, exported_header, kind_of, npz_arrays
from app.queue.validation import ValidJob
from app.store import Store
from workers.catalog import WORKLOADS, CatalogError
from workers.catalog.exported import JAX_PLATFORM
from workers.catalog.jaxexport import (
    INDICES,
    ITEMSIZE,
    ArgumentSpec,
    ArtifactError,
    ExportHeader,
    InputRuleError,
    InputsError,
    Member,
    ReferenceError,
    check_ranges,
    dims_problem,
    given_arguments,
    plan,
    resolve_drawn,
)
from workers.catalog.npz import ArrayInfo
from workers.catalog.peak import dense_peak, refusal
from workers.catalog.target_rules import byte_cap, check_target_platforms, job_target
from workers.protocol import JobSpec, Mode, StageId

Problems = list[tuple[str | None, str]]


@dataclass
class FileCheck:
    """What checking a job's files found: its problems, and the devices an artifact spans."""

    problems: Problems = field(default_factory=list)
    devices: int | None = None
    """An exported function's device count (`nr_devices`), when the job names one."""


def with_files(valid: ValidJob, store: Store, max_job_bytes: int) -> tuple[ValidJob, Problems]:
    """`valid` checked against the files it names, spanning an artifact's devices, and
    the problems found (none when it may queue)."""
    found = check_job_files(valid.spec, store, max_job_bytes)
    if found.devices is not None:
        valid = ValidJob(valid.spec, found.devices)
    return valid, found.problems


def check_job_files(spec: JobSpec, store: Store, max_job_bytes: int) -> FileCheck:
    """Problems (field, message) with the stored files `spec` names; none when it is fine."""
    cls = WORKLOADS.get(spec.workload)
    fields: dict[str, str] = getattr(cls, "file_fields", {}) if cls is not None else {}
    found = FileCheck()
    header: ExportHeader | None = None
    arrays: list[tuple[str, ArrayInfo]] = []
    given: list[str] | None = None
    for name, media_type in fields.items():  # the artifact first: the others follow its names
        sha = spec.params.get(name)
        if not isinstance(sha, str):
            continue
        where = f"params.{name}"
        stored = store.file_info(sha)
        source = store.open_file(sha) if stored is not None else None
        if stored is None or source is None:
            found.problems.append(
                (where, f"no uploaded file {sha[:12]}…: POST it to /api/v1/artifacts")
            )
            continue
        with source:  # read where its headers (and a sample's indices) are, never whole
            if stored.media_type != media_type:
                wanted = kind_of(media_type) or media_type
                found.problems.append((where, f"file {sha[:12]}… is not of kind {wanted}"))
                continue
            if name == "artifact":
                header = _artifact(source, spec, max_job_bytes, found)
                continue
            try:
                members = npz_arrays(source)
            except UploadError as exc:  # stored before a stricter check
                found.problems.append((where, f"file {sha[:12]}…: {exc}"))
                continue
            arrays.extend((where, a) for a in members)
            if name == "inputs":
                given = [a.name for a in members]
            if name == "reference" and header is not None:
                found.problems += _reference(source, members, header, spec.params.get("dims"))
    if header is not None:
        found.problems += _inputs(spec, header, given)
    declared = sum(a.nbytes for _, a in arrays)
    if declared > max_job_bytes:
        biggest_field, biggest = max(arrays, key=lambda fa: fa[1].nbytes)
        found.problems.append(
            (
                biggest_field,
                f"the arrays declare {declared:,} bytes in all ({biggest.text()} alone "
                f"{biggest.nbytes:,}), over the job's limit of {max_job_bytes:,}",
            )
        )
    return found


def _artifact(
    source: IO[bytes], spec: JobSpec, max_job_bytes: int, found: FileCheck
) -> ExportHeader | None:
    """The artifact's header once it suits the job (its problems go to `found`)."""
    where = "params.artifact"
    try:
        header = exported_header(source)
    except UploadError as exc:
        found.problems.append((where, str(exc)))
        return None
    found.devices = header.nr_devices
    target = job_target(spec)
    wanted = JAX_PLATFORM.get(spec.path)
    if target is not None:
        try:
            check_target_platforms(target, header.platforms, header.nr_devices)
        except CatalogError as exc:
            found.problems.append((exc.field, str(exc)))
            return None
    elif wanted is None or wanted not in header.platforms:
        again = ",".join([*header.platforms, wanted or "cpu"])
        found.problems.append(
            (
                where,
                f"exported for {', '.join(header.platforms)} only; path {spec.path.value} "
                f"needs {wanted or 'a JAX platform'} (export it again with --platforms {again})",
            )
        )
        return None
    dims = spec.params.get("dims") or {}
    problem_of_dims = dims_problem(header.dimensions(), dims)
    if problem_of_dims is not None:  # each symbolic dimension needs a value, and only those
        found.problems.append(problem_of_dims)
        return None
    try:  # the byte caps at the job's values of its symbolic dimensions
        inputs = sum(aval.nbytes(dims) for aval in header.in_avals)
        outputs = sum(aval.nbytes(dims) for aval in header.out_avals)
    except ArtifactError as exc:
        found.problems.append(("params.dims" if dims else where, str(exc)))
        return None
    # What a run holds at its peak (workers.catalog.peak); a compile places nothing.
    itemsize = max((ITEMSIZE.get(a.dtype, 4) for a in header.out_avals), default=4)
    alive = spec.measure.calls_per_sample if spec.measure.mode is Mode.THROUGHPUT else 1
    problem = refusal(dense_peak(inputs, outputs, itemsize, alive), byte_cap(spec, max_job_bytes))
    if problem is not None and StageId.EXECUTE in spec.stages:
        found.problems.append((where, problem.removeprefix("params: ")))
    return header


def _inputs(spec: JobSpec, header: ExportHeader, members: list[str] | None) -> Problems:
    """Input rules that do not fit the arguments they draw, or an inputs file whose
    members name no argument: the arguments an inputs file gives are not drawn."""
    dims = spec.params.get("dims") or {}
    specs = [ArgumentSpec(n, tuple(a.dims(dims)), a.dtype) for n, a in header.arguments()]
    try:
        given = given_arguments(specs, members or [])
        resolve_drawn(spec.params.get("input_rules") or {}, specs, given.keys())
    except (InputsError, InputRuleError) as exc:
        return [(exc.field, str(exc))]
    return []


def _reference(
    data: IO[bytes], members: list[ArrayInfo], header: ExportHeader, dims: Any
) -> Problems:
    """A reference that does not fit the artifact's results (at the job's values of its
    symbolic dimensions), named by the result."""
    try:
        specs = [ArgumentSpec(n, tuple(a.dims(dims)), a.dtype) for n, a in header.results()]
    except ArtifactError as exc:
        return [("params.dims", f"params.dims: {exc}")]
    shown = [Member(a.name, a.dtype, a.shape) for a in members]
    try:
        entries = plan(shown, specs)
        sampled = [e for e in entries.values() if e.sampled]
        if sampled:
            indices = _indices(data, [f"{e.member}.{INDICES}.npy" for e in sampled])
            for entry in sampled:
                check_ranges(entry, indices[f"{entry.member}.{INDICES}.npy"], specs[entry.result])
    except ReferenceError as exc:
        return [("params.reference", f"params.reference: {exc}")]
    return []


def _indices(data: IO[bytes], names: list[str]) -> dict[str, Any]:
    """The named index arrays of an .npz (each at most MAX_SAMPLE int64s, checked from
    its header already), and nothing else of it."""
    import numpy as np  # only to read indices; kept out of the server's start-up

    found: dict[str, Any] = {}
    data.seek(0)
    with zipfile.ZipFile(data) as archive:
        for name in names:
            with archive.open(name) as stream:
                found[name] = np.lib.format.read_array(stream, allow_pickle=False)
    return found
