"""What the run pages of an uploaded program add from the program's own upload: each
argument's sharding and the mesh, from the artifact's header (app.pages.artifact).

The run result names the arguments and their shapes; how the program places them on its
devices is in the artifact, which the server reads again (its header only) for the page.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from app.dispatch import Dispatcher
from app.pages.artifact import mesh_text, stored_file


def artifact_of(job: dict[str, Any]) -> str | None:
    """The SHA-256 of the uploaded program a job runs or compiles, or None."""
    if job.get("workload") != "exported":
        return None
    sha = (job.get("params") or {}).get("artifact")
    return sha if isinstance(sha, str) else None


def placement(sha: str, dispatcher: Dispatcher) -> dict[str, Any] | None:
    """The program's mesh and each argument's sharding by name, for a program of several
    devices; None for one device, or when the artifact is gone (retention)."""
    try:
        header = stored_file(dispatcher, sha).get("header")
    except HTTPException:
        return None
    if not header or mesh_text(header) is None:
        return None
    names = header.get("argument_names") or []
    shardings = header.get("in_shardings") or []
    return {
        "mesh": mesh_text(header),
        "devices": int(header["nr_devices"]),
        "arguments": dict(zip(names, shardings, strict=False)),
    }
