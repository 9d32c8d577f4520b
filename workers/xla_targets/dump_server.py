"""One dump child kept for the compiles of a process, instead of one child per compile.

libtpu reads its dump flags once, when it starts (`dump_child`), so a child whose libtpu
dumps into its own folders can compile program after program: after each compile it moves
what was dumped into the folders the request names. Each compile then costs its own
compile, not a Python start, a JAX import and a libtpu start (about 2 s of CPU, 3 of every
4 seconds of a small program's dump on this project's machine; docs/targets.md).

Requests go one at a time, as a JSON line on the child's stdin (`{"folder": ..., "dumps":
{"llo": ...}}`, the program and placement written in `folder` by `write_request`); the
answer is one line on its stdout starting with ANSWER. The child leaves when its stdin
closes (its parent ended) or after IDLE_S without a request; a child that died, answered
out of turn or ran past its time is killed and the next compile starts a fresh one.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from workers.xla_targets.dump_child import (
    TIMEOUT_S,
    ChildCompile,
    Placement,
    child_environment,
    compile_request,
    write_request,
)

ANSWER = "boundary-dump-answer "
"""Starts the child's answer line (libraries may print lines of their own)."""
IDLE_S = 300.0
"""A kept child with no request for this long leaves (a fresh one starts when needed)."""
MAX_COMPILES = 200
"""A kept child leaves after this many compiles, so what a compile leaves behind in its
memory does not pile up."""


# --- the child's side ---------------------------------------------------------------------


def _move_dumps(root: Path, dumps: Mapping[str, str]) -> None:
    """Everything dumped under `root`/NAME goes to `dumps[NAME]`."""
    for name, dest in dumps.items():
        made = root / name
        target = Path(dest)
        target.mkdir(parents=True, exist_ok=True)
        for path in made.iterdir() if made.is_dir() else ():
            shutil.move(str(path), str(target / path.name))


def _answer(out: IO[str], **fields: Any) -> None:
    out.write(ANSWER + json.dumps(fields) + "\n")
    out.flush()


def serve(root: Path, compile_one: Callable[[Path], float] = compile_request) -> None:
    """The kept child's loop: compile each request's folder, move the dumps, answer.

    Run as `python -m workers.xla_targets.dump_server ROOT`."""
    out = sys.stdout
    sys.stdout = sys.stderr  # what libraries print stays off the answers' line
    for _ in range(MAX_COMPILES):
        ready, _, _ = select.select([sys.stdin], [], [], IDLE_S)
        line = sys.stdin.readline() if ready else ""
        if not line:
            return  # idle too long, or the parent is gone
        request = json.loads(line)
        try:
            seconds = compile_one(Path(request["folder"]))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
            for name in request["dumps"]:  # what a failed compile dumped is nobody's
                shutil.rmtree(root / name, ignore_errors=True)
            _answer(out, error=f"{type(exc).__name__}: {exc}"[-1500:])
            continue
        _move_dumps(root, request["dumps"])
        _answer(out, compile_s=seconds)


# --- the parent's side --------------------------------------------------------------------


class KeptChild:
    """A dump child started with `env_for(its own folders)` and kept between compiles."""

    def __init__(
        self, names: tuple[str, ...], env_for: Callable[[dict[str, Path]], dict[str, str]]
    ) -> None:
        self._names = names
        self._env_for = env_for
        self._proc: subprocess.Popen[str] | None = None
        self._root: Path | None = None
        self._stderr: IO[bytes] | None = None
        self._exit: int | None = None
        """The exit status of the last child that ended."""
        self._env: dict[str, str] = {}
        """The environment the child started from (before its dump flags)."""
        self._lock = threading.Lock()

    def compile(
        self, exported: bytes, place: Placement, folder: Path, dumps: dict[str, Path],
        timeout_s: float = TIMEOUT_S,
    ) -> ChildCompile:  # fmt: skip
        """Compile `exported` for `place` in the kept child, its dumps moved to `dumps`;
        RuntimeError with the child's last words when it fails."""
        write_request(exported, place, folder)
        request = {"folder": str(folder), "dumps": {k: str(v) for k, v in dumps.items()}}
        with self._lock:
            started = time.perf_counter()
            answer = self._ask(request, timeout_s)
            if answer is None:  # it had left (idle, used up, or killed): once more, afresh
                answer = self._ask(request, timeout_s)
            wall = time.perf_counter() - started
        if answer is None:  # a fresh child died on it too
            words = self._last_words()
            raise RuntimeError(f"the dump compile failed (exit {self._exit}): {words}")
        if "error" in answer:
            raise RuntimeError(f"the dump compile failed: {answer['error']}")
        return ChildCompile(float(answer["compile_s"]), wall)

    def _ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The child's answer to `request`; None when the child ended first (its exit
        status kept); RuntimeError when it ran past `timeout_s`."""
        proc = self._running()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            self._exit = self._forget()
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready:
                self.close()
                raise RuntimeError(f"the dump compile ran past {timeout_s:g} s and was stopped")
            line = proc.stdout.readline()
            if not line:
                self._exit = self._forget()
                return None
            at = line.find(ANSWER)  # a library's unfinished line may come first
            if at >= 0:
                answer: dict[str, Any] = json.loads(line[at + len(ANSWER) :])
                return answer

    def _running(self) -> subprocess.Popen[str]:
        """The child, started now if there is none or this process's environment changed."""
        env = child_environment({})
        if self._proc is not None and self._proc.poll() is None and env == self._env:
            return self._proc
        self.close()
        self._env = env
        self._root = Path(tempfile.mkdtemp(prefix="boundary-kept-dumps-"))
        dirs = {name: self._root / name for name in self._names}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open with the child
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "workers.xla_targets.dump_server", str(self._root)],
            env=child_environment(self._env_for(dirs)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        return self._proc

    def _last_words(self) -> str:
        """The end of what the child wrote to its stderr."""
        if self._stderr is None:
            return "no output"
        size = self._stderr.seek(0, 2)
        self._stderr.seek(max(0, size - 1500))
        return self._stderr.read().decode(errors="replace").strip() or "no output"

    def _forget(self) -> int | None:
        """Drop a child that has ended, and its folders; its exit status."""
        code = self._proc.wait() if self._proc is not None else None
        self._proc = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        return code

    def close(self) -> None:
        """Stop the child, if any."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._forget()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m workers.xla_targets.dump_server ROOT")
    serve(Path(sys.argv[1]))
