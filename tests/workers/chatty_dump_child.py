"""A kept dump child whose "compile" writes straight to its stdout, as a C library may,
before the answer, and dies on a folder named `crash`:
`python -m tests.workers.chatty_dump_child ROOT` (tests/workers/test_dump_server.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from workers.xla_targets.dump_server import serve


def _chatty(folder: Path) -> float:
    if folder.name == "crash":
        os._exit(3)  # as libtpu aborting on a program would
    (Path(sys.argv[1]) / "llo").mkdir(parents=True, exist_ok=True)
    (Path(sys.argv[1]) / "llo" / "made.txt").write_text(folder.name)
    os.write(1, b"a library's line\nand one it did not finish: ")
    return 0.25


if __name__ == "__main__":
    serve(Path(sys.argv[1]), _chatty)
