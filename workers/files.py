"""Stored files on a worker: a directory of files named by their SHA-256. No jax here.

The agent fills it with what a job names (an exported function, .npz archives), fetched
from the server before the job reaches the runner; `boundary run` puts local files there
itself; the engine reads them back, checking each digest. The directory is capped
(BOUNDARY_FILES_MAX_BYTES, 2 GiB by default): past it, the least recently used files go.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from workers.catalog import CatalogError

FILES_DIR_ENV = "BOUNDARY_FILES_DIR"
FILES_MAX_ENV = "BOUNDARY_FILES_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 1024**3


class FileCache:
    """A directory of files named by their SHA-256: written once, checked when read."""

    def __init__(self, directory: Path | None = None, max_bytes: int | None = None) -> None:
        env = os.environ.get(FILES_DIR_ENV)
        default = Path(env).expanduser() if env else Path.home() / ".cache/boundary/files"
        self.directory = directory or default
        configured = os.environ.get(FILES_MAX_ENV, "")
        self.max_bytes = max_bytes or (
            int(configured) if configured.isdigit() else DEFAULT_MAX_BYTES
        )

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
            self._evict(keep=digest)
        else:
            target.touch()  # used again: the least recently used go first
        return digest

    def _evict(self, keep: str) -> None:
        """Delete the least recently used files while the directory passes its cap."""
        files = []
        for entry in os.scandir(self.directory):
            if entry.is_file() and not entry.name.startswith("."):
                stat = entry.stat()
                files.append((stat.st_mtime, stat.st_size, entry.name))
        total = sum(size for _, size, _ in files)
        for _, size, name in sorted(files):
            if total <= self.max_bytes:
                break
            if name != keep:
                (self.directory / name).unlink(missing_ok=True)
                total -= size

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
        with contextlib.suppress(OSError):  # used: the least recently used go first
            self.path(sha256).touch()
        return data
