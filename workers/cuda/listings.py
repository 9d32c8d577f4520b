"""What the CUDA tools printed, kept by the process for input it sees again.

ptxas and cuobjdump are deterministic: the same PTX (or cubin bytes) through the same
binary with the same arguments prints the same report and the same SASS. A process that
meets that input again (a second job with the same program, the other side of a
comparison, a kernel cut from a cubin already listed) reads what it kept instead of
starting them again; nvdisasm, which cuobjdump starts, spends about 0.4 s of CPU before
it reads a byte. Only what a tool printed on success is kept, never a failure.

A job's cache policy does not reach here: it governs the compile, which is timed; these
listings are read from the compile's output afterwards, outside every timed stage, and
cannot differ from a fresh run of the tool.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

KEPT_CHARS = 64 * 1024 * 1024
"""The most characters a process keeps in all; the least recently read go first."""


class Listings:
    """Tool outputs by a digest of what produced them, up to `limit` characters."""

    def __init__(self, limit: int = KEPT_CHARS) -> None:
        self._limit = limit
        self._kept: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(*parts: str | bytes) -> str:
        """One digest of a tool's command and input, each part kept apart from the next."""
        digest = hashlib.sha256()
        for part in parts:
            data = part.encode() if isinstance(part, str) else part
            digest.update(len(data).to_bytes(8, "little") + data)
        return digest.hexdigest()

    @staticmethod
    def tool(path: str) -> str:
        """A tool by its path and by the file found there now, so one upgraded in place
        gives other keys."""
        return _file(shutil.which(path) or path)

    @staticmethod
    def disassembler(path: str) -> str:
        """cuobjdump (or nvdisasm) as `tool` has it, with the nvdisasm it starts, which
        comes from another wheel: the one in the folder NVDISASM_PATH names, else the one
        beside it."""
        found = shutil.which(path) or path
        folders = [os.environ.get("NVDISASM_PATH"), str(Path(found).parent)]
        nvdisasms = [_file(str(Path(folder) / "nvdisasm")) for folder in folders if folder]
        return "\0".join([_file(found), *nvdisasms])

    def get(self, key: str) -> tuple[str, ...] | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def made(self, key: str, make: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """What is kept under `key`, else what `make()` returns, kept from then on; an
        exception from `make` (a tool that failed) passes through and nothing is kept."""
        found = self.get(key)
        if found is None:
            found = make()
            self.put(key, found)
        return found

    def put(self, key: str, outputs: tuple[str, ...]) -> None:
        size = sum(len(text) for text in outputs)
        if size > self._limit:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            self._size += size - (sum(len(text) for text in old) if old else 0)
            self._kept[key] = outputs
            while self._size > self._limit:
                _, gone = self._kept.popitem(last=False)
                self._size -= sum(len(text) for text in gone)


def _file(path: str) -> str:
    """A path and the file there now (device, inode, size, change time: unlike the
    modification time, which an unpacked archive sets back, the change time is the
    system's); a path that names no file stands for itself."""
    try:
        found = os.stat(path)
    except OSError:
        return path
    return f"{path}:{found.st_dev}:{found.st_ino}:{found.st_size}:{found.st_ctime_ns}"


KEPT = Listings()
"""What this process keeps: the CUDA path's cubin listings and the GPU targets' assembled
PTX alike (their keys never meet: each starts with its own command)."""
