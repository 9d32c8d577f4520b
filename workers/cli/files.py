"""`boundary run exported artifact=@fn.jaxexport`: local files named on the command line,
stored where a local run reads them or uploaded to the server the job goes to, and named
by their SHA-256."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.catalog import WORKLOADS
from workers.catalog.jaxexport import ArtifactError, read_header
from workers.cli.export_upload import post_file
from workers.export.server_address import ServerAddress
from workers.files import FileCache


def resolve_file_params(
    workload: str,
    params: dict[str, Any],
    *,
    files_dir: Path | None = None,
    server: ServerAddress | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """`params` with every `@PATH` value of a file parameter replaced by the file's SHA-256.

    For a local run the file is put in the worker-side file cache (`files_dir`); with
    `server` it is uploaded there. ValueError names the parameter when a file is missing,
    unreadable or refused.
    """
    cls = WORKLOADS.get(workload)
    fields: dict[str, str] = getattr(cls, "file_fields", {}) if cls is not None else {}
    resolved = dict(params)
    for name, value in params.items():
        if name not in fields or not isinstance(value, str) or not value.startswith("@"):
            continue
        path = Path(value[1:]).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"params.{name}: cannot read {path}: {exc.strerror}") from None
        if name == "artifact":
            try:
                read_header(data)
            except ArtifactError as exc:
                raise ValueError(f"params.{name}: {path}: {exc}") from None
        if server is None:
            resolved[name] = FileCache(files_dir).put(data)
            continue
        kind = "exported" if name == "artifact" else "npz"
        with server.client(token, timeout=60.0) as client:
            resolved[name] = post_file(client, data, kind)
    return resolved
