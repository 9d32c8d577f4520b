"""What the run pages of an uploaded program add from the program's own upload: each
argument's sharding and the mesh, from the artifact's header (app.pages.artifact), and
the Python lines `boundary export-fn` sent with it (app.queue.uploads.sources_of).

The run result names the arguments and their shapes, and its IR names source positions
as `file:line`; how the program places its arguments on its devices is in the artifact,
which the server reads again (its header only), and the lines themselves in the sources
document sent beside it.
"""

from __future__ import annotations

from typing import Any

from app.dispatch import Dispatcher
from app.ir.sent import SentLines
from app.pages.artifact import mesh_text
from app.queue.uploads import UploadError, exported_header, sources_of


def artifact_of(job: dict[str, Any]) -> str | None:
    """The SHA-256 of the uploaded program a job runs or compiles, or None."""
    if job.get("workload") != "exported":
        return None
    sha = (job.get("params") or {}).get("artifact")
    return sha if isinstance(sha, str) else None


def program_facts(sha: str, dispatcher: Dispatcher) -> tuple[str | None, dict[str, Any] | None]:
    """From one read of the uploaded program's header: its function's name, and its mesh
    and each argument's sharding by name for a program of several devices (None for one
    device); (None, None) when the artifact is gone (retention)."""
    source = dispatcher.store.open_file(sha)
    if source is None:
        return None, None
    with source:
        try:
            header: dict[str, Any] = exported_header(source).as_dict()
        except UploadError:  # stored before a stricter check: the page shows no placement
            return None, None
    name = str(header.get("function_name") or "") or None
    if mesh_text(header) is None:
        return name, None
    names = header.get("argument_names") or []
    shardings = header.get("in_shardings") or []
    return name, {
        "mesh": mesh_text(header),
        "devices": int(header["nr_devices"]),
        "arguments": dict(zip(names, shardings, strict=False)),
    }


def sent_lines(job: dict[str, Any], dispatcher: Dispatcher) -> SentLines | None:
    """The Python lines sent with the program a job runs, or None (none sent, or not an
    uploaded program)."""
    sha = artifact_of(job)
    found = sources_of(dispatcher.store, sha) if sha is not None else None
    return SentLines.of(found[1]) if found is not None else None


def source_cells(job: dict[str, Any], dispatcher: Dispatcher, keys: list[str]) -> dict[str, Any]:
    """What the run page's tables show beside each `file:line` key of an uploaded program:
    whether lines were sent, and each key's line (stripped, cut for a cell)."""
    sent = sent_lines(job, dispatcher)
    return {
        "uploaded": artifact_of(job) is not None,
        "sent": sent is not None,
        "cells": sent.cells(keys) if sent is not None else {},
    }
