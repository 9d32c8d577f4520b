"""Stored files on a worker: a directory of files named by their SHA-256. No jax here.

The agent fills it with what a job names (an exported function, .npz archives), fetched
from the server before the job reaches the runner; `boundary run` puts local files there
itself; the engine reads them back, checking each digest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from workers.catalog import CatalogError

FILES_DIR_ENV = "BOUNDARY_FILES_DIR"


class FileCache:
    """A directory of files named by their SHA-256: written once, checked when read."""

    def __init__(self, directory: Path | None = None) -> None:
        env = os.environ.get(FILES_DIR_ENV)
        default = Path(env).expanduser() if env else Path.home() / ".cache/boundary/files"
        self.directory = directory or default

    def path(self, sha256: str) -> Path:
        return self.directory / sha256

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def put(self, data: bytes) -> str:
        """Keep `data`; its SHA-256. Written under a temporary name, then renamed."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path(digest)
        if not target.is_file():
            self.directory.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{digest}.{os.getpid()}.part")
            partial.write_bytes(data)
            partial.replace(target)
        return digest

    def get(self, sha256: str, field: str) -> bytes:
        """The bytes stored under `sha256`; CatalogError naming `field` if absent or altered."""
        try:
            data = self.path(sha256).read_bytes()
        except OSError:
            raise CatalogError(
                f"{field}: no file {sha256[:12]}… on this worker (upload it to the server first)",
                field,
            ) from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise CatalogError(f"{field}: the stored file {sha256[:12]}… is damaged", field)
        return data
