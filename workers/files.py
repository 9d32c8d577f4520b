"""Stored files on a worker: a folder of files named by their SHA-256. No jax here.

The agent fills it with what a job names (an exported function, .npz archives), fetched
from the server before the job reaches the runner; `boundary run` puts local files there
itself; the engine reads them back, checking each digest. The folder is capped
(BOUNDARY_FILES_MAX_BYTES, 2 GiB by default): past it, the least recently used files go,
never one a running job uses. Several workers may share one folder:

- `.locks/<sha>`: one lock file per stored file. A job pins a file by holding a shared
  flock(2) on it for as long as it runs (`pinned()`); eviction takes an exclusive,
  non-blocking flock before it deletes a file, so a pinned file is never deleted. A lock
  dies with the process holding it (SIGKILL included): no pin outlives its job.
- `.evict.lock`: one evictor at a time (the cap is counted over the whole folder).
- `.<sha>.<pid>.<random>.part`: a file being written; it appears under its name only by
  an atomic rename, so no reader sees half a file. Parts older than an hour (a writer
  killed mid-write) are removed by the next eviction.

Pin first, then fetch: the agent pins every file a job names before it asks `has()`
and downloads what is missing, so nothing can evict a file between its fetch and its
use. Every use (`has`, `get`, `pinned`) refreshes a file's age. flock holds on one
machine (and NFSv4): do not share the folder between machines over anything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workers.catalog import WORKLOADS, CatalogError
from workers.protocol.sizes import env_bytes

FILES_DIR_ENV = "BOUNDARY_FILES_DIR"
FILES_MAX_ENV = "BOUNDARY_FILES_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 1024**3
LOCKS = ".locks"
EVICT_LOCK = ".evict.lock"
PART_MAX_AGE_S = 3600.0
READ_BYTES = 1024 * 1024


def job_files(spec: dict[str, Any]) -> dict[str, str]:
    """The stored files a job (its spec as JSON) names: parameter name → SHA-256."""
    cls = WORKLOADS.get(str(spec.get("workload")))
    params = spec.get("params") or {}
    named = {name: params.get(name) for name in getattr(cls, "file_fields", {})}
    return {name: sha for name, sha in named.items() if isinstance(sha, str)}


def files_folder(files_dir: Path | None, cache_dir: Path | None) -> Path | None:
    """Where a worker keeps the files its jobs fetch: `files_dir`, else the sibling `files/`
    of its JAX `cache_dir`, else None (the file cache's own default)."""
    if files_dir is not None:
        return files_dir
    return cache_dir.parent / "files" if cache_dir is not None else None


class FileCache:
    """A folder of files named by their SHA-256: written once, checked when read, capped
    at `max_bytes` (least recently used first, never a pinned one)."""

    def __init__(self, directory: Path | None = None, max_bytes: int | None = None) -> None:
        env = os.environ.get(FILES_DIR_ENV)
        default = Path(env).expanduser() if env else Path.home() / ".cache/boundary/files"
        self.directory = directory or default
        # As `boundary worker` checks it when it starts: a size it cannot read stops it.
        self.max_bytes = max_bytes or env_bytes(os.environ, FILES_MAX_ENV) or DEFAULT_MAX_BYTES

    def path(self, sha256: str) -> Path:
        return self.directory / sha256

    def _lock_path(self, sha256: str) -> Path:
        return self.directory / LOCKS / sha256

    def _touch(self, sha256: str) -> bool:
        """Mark the file used now; False when it is not here."""
        try:
            os.utime(self.path(sha256))
        except FileNotFoundError:
            return False
        return True

    # --- use ---------------------------------------------------------------------------

    def has(self, sha256: str) -> bool:
        """Whether the file is here; a yes counts as a use (its age is refreshed)."""
        return self._touch(sha256)

    def get(self, sha256: str, field: str) -> bytes:
        """The bytes stored under `sha256`; CatalogError naming `field` if absent or altered."""
        return self.checked(sha256, field).read_bytes()

    def checked(self, sha256: str, field: str) -> Path:
        """The path of the file stored under `sha256`, its digest checked (read in chunks);
        CatalogError naming `field` if it is absent or altered."""
        path = self.path(sha256)
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                while piece := handle.read(READ_BYTES):
                    digest.update(piece)
        except OSError:
            raise CatalogError(
                f"{field}: no file {sha256[:12]}… on this worker (upload it to the server first)",
                field,
            ) from None
        if digest.hexdigest() != sha256:
            raise CatalogError(f"{field}: the stored file {sha256[:12]}… is damaged", field)
        self._touch(sha256)
        return path

    def put(self, data: bytes) -> str:
        """Keep `data`; its SHA-256."""
        return self.put_chunks([data])

    def put_chunks(self, chunks: Iterable[bytes]) -> str:
        """Keep the bytes `chunks` yields (never held whole); their SHA-256."""
        part = self.new_part()
        digest = hashlib.sha256()
        try:
            with open(part, "wb") as handle:
                for piece in chunks:
                    digest.update(piece)
                    handle.write(piece)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        return self.commit(part, digest.hexdigest())

    def new_part(self) -> Path:
        """A fresh temporary name in the folder, to write a file under before `commit`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory / f".{os.getpid()}.{secrets.token_hex(6)}.part"

    def commit(self, part: Path, sha256: str) -> str:
        """Give the written file `part` its name `sha256` (atomically; dropped if that
        file is here already), then evict past the cap; `sha256`."""
        try:
            if not self.has(sha256):
                os.replace(part, self.path(sha256))
        finally:
            part.unlink(missing_ok=True)
        self.evict()
        return sha256

    @contextlib.contextmanager
    def pinned(self, sha256: str) -> Iterator[None]:
        """Hold `sha256` against eviction while the block runs (a job's whole run).

        The file need not be here yet: pin, then fetch what is missing, then run.
        """
        handle = self._lock_shared(sha256)
        try:
            self._touch(sha256)
            yield
        finally:
            os.close(handle)  # closing the descriptor releases the flock

    def _lock_shared(self, sha256: str) -> int:
        """A descriptor holding a shared flock on the file's lock file, checked to still
        be the one at its path (an evictor may have removed it meanwhile)."""
        path = self._lock_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(handle, fcntl.LOCK_SH)
            try:
                same = os.stat(path).st_ino == os.fstat(handle).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return handle
            os.close(handle)  # locked a lock file that was removed: take the new one

    # --- eviction ----------------------------------------------------------------------

    def evict(self) -> list[str]:
        """Delete the least recently used unpinned files while the folder passes its
        cap; the names deleted. One evictor at a time across processes."""
        deleted: list[str] = []
        (self.directory / LOCKS).mkdir(parents=True, exist_ok=True)
        with open(self.directory / EVICT_LOCK, "a") as guard:
            fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
            files: list[tuple[float, int, str]] = []
            now = time.time()
            for entry in os.scandir(self.directory):
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # renamed or removed by another process meanwhile
                if entry.name.endswith(".part"):
                    if now - stat.st_mtime > PART_MAX_AGE_S:
                        Path(entry.path).unlink(missing_ok=True)
                    continue
                if not entry.name.startswith("."):
                    files.append((stat.st_mtime, stat.st_size, entry.name))
            total = sum(size for _, size, _ in files)
            for _, size, name in sorted(files):
                if total <= self.max_bytes:
                    break
                if self._delete_unless_pinned(name):
                    deleted.append(name)
                    total -= size
        return deleted

    def _delete_unless_pinned(self, sha256: str) -> bool:
        path = self._lock_path(sha256)
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a running job holds it
            self.path(sha256).unlink(missing_ok=True)
            path.unlink(missing_ok=True)  # a pinner that opened it re-checks its inode
            return True
        finally:
            os.close(handle)
