"""One dump child kept for the compiles of a process, instead of one child per compile.

libtpu reads its dump flags once, when it starts (`dump_child`), so a child whose libtpu
dumps into its own folders can compile program after program: after each compile it moves
what was dumped into the folders the request names. Each compile then costs its own
compile, not a Python start, a JAX import and a libtpu start (about 2 s of CPU, 3 of every
4 seconds of a small program's dump on this project's machine; docs/targets.md).

Requests go one at a time, as a JSON line on the child's stdin (`{"folder": ..., "dumps":
{"llo": ...}}`, the program and placement written in `folder` by `write_request`); the
answer, with the request's number, is one line on its stdout starting with ANSWER. The
child leaves, removing its folders, when its stdin closes (its parent ended), after IDLE_S
without a request or after MAX_COMPILES; the next compile then starts a fresh one. A child
that dies on a request, answers another request or runs past its time is reported and
stopped, never asked again about that request.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, NoReturn

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
BOOKKEEPING = frozenset({"PYTEST_CURRENT_TEST"})
"""Variables a running process rewrites as it goes, which no compile reads: a change of
these alone keeps the child. (pytest names the running test there, a new value for each
test, so an engine called from a test suite started a child for every test.)"""
SET_ON_IMPORT = frozenset({"MOSAIC_GPU_CUDA_ROOT", "MOSAIC_GPU_RUNTIME_LIB_PATH"})
"""Variables that importing Mosaic GPU (`jax.experimental.mosaic.gpu`, as a GPU compile of a
Pallas kernel does) sets in the importing process, to paths of the installed jaxlib and
CUDA wheels. A child that imports it sets the same values itself, and one that does not
never reads them, so a parent's import alone keeps the child."""
_IGNORED = BOOKKEEPING | SET_ON_IMPORT


def _settings(env: dict[str, str]) -> dict[str, str]:
    """What of an environment a child depends on: all of it but BOOKKEEPING and
    SET_ON_IMPORT."""
    return {name: value for name, value in env.items() if name not in _IGNORED}


# --- the child's side ---------------------------------------------------------------------


def _empty(folder: Path) -> None:
    """Remove what `folder` holds, keeping the folder (libtpu may not make it again)."""
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _move_dumps(root: Path, dumps: Mapping[str, str]) -> None:
    """Everything dumped under `root`/NAME goes to `dumps[NAME]`; where that folder's parent
    is gone (its request was given up), it is removed instead."""
    for name, dest in dumps.items():
        made, target = root / name, Path(dest)
        if not target.parent.is_dir():
            _empty(made)
            continue
        target.mkdir(exist_ok=True)
        for path in made.iterdir() if made.is_dir() else ():
            shutil.move(str(path), str(target / path.name))


def _answer(out: IO[str], request_id: object, **fields: Any) -> None:
    out.write(ANSWER + json.dumps({"id": request_id, **fields}) + "\n")
    out.flush()


def serve(root: Path, compile_one: Callable[[Path], float] = compile_request) -> None:
    """The kept child's loop: compile each request's folder, move the dumps, answer; its
    folders go when it leaves.

    Run as `python -m workers.xla_targets.dump_server ROOT`."""
    out = sys.stdout
    sys.stdout = sys.stderr  # what libraries print stays off the answers' line
    try:
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
                    _empty(root / name)
                _answer(out, request["id"], error=f"{type(exc).__name__}: {exc}"[-1500:])
                continue
            _move_dumps(root, request["dumps"])
            _answer(out, request["id"], compile_s=seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- the parent's side --------------------------------------------------------------------


class KeptChild:
    """A dump child started with `env_for(its own folders)` and kept between compiles."""

    module = "workers.xla_targets.dump_server"
    """What the child runs (`python -m MODULE ROOT`): `serve` over its folders."""

    def __init__(
        self, names: tuple[str, ...], env_for: Callable[[dict[str, Path]], dict[str, str]]
    ) -> None:
        self._names = names
        self._env_for = env_for
        self._proc: subprocess.Popen[bytes] | None = None
        self._root: Path | None = None
        self._stderr: IO[bytes] | None = None
        self._exit: int | None = None
        """The exit status of the last child that ended."""
        self._sent = 0
        """Requests sent, each answered with its number."""
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
            if answer is None:  # it had left of itself (idle, or used up): once more, afresh
                answer = self._ask(request, timeout_s)
            wall = time.perf_counter() - started
            if answer is None:
                words = self._last_words()
                raise RuntimeError(f"the dump compile's process left twice: {words}")
        if "error" in answer:
            raise RuntimeError(f"the dump compile failed: {answer['error']}")
        return ChildCompile(float(answer["compile_s"]), wall)

    def _ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The child's answer to `request`; None when the child had left of itself (idle,
        or its compiles used up) before taking it. RuntimeError when it died on it, ran
        past `timeout_s`, or answered another request; the child is stopped then, and on
        any other exception (no answer is ever left to be read by the next request)."""
        proc = self._running()
        self._sent += 1
        try:
            return self._exchange(proc, {"id": self._sent, **request}, timeout_s)
        except BaseException:
            self.close()
            raise

    def _exchange(
        self, proc: subprocess.Popen[bytes], request: dict[str, Any], timeout_s: float
    ) -> dict[str, Any] | None:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
        except BrokenPipeError:
            return None if self._forget() == 0 else self._died()
        # Raw reads, not readline(): a line kept in a reader's buffer is invisible to
        # select(), which would then wait for bytes that have already come.
        out, seen, marker = proc.stdout.fileno(), b"", ANSWER.encode()
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([out], [], [], max(left, 0))
            if not ready:
                raise RuntimeError(f"the dump compile ran past {timeout_s:g} s and was stopped")
            chunk = os.read(out, 65536)
            if not chunk:  # it left before answering: of itself (0), or killed
                return None if self._forget() == 0 else self._died()
            seen += chunk
            at = seen.find(marker)  # after what a library may have printed
            if at < 0:
                seen = seen[-len(marker) :]
                continue
            end = seen.find(b"\n", at)
            if end < 0:
                seen = seen[at:]
                continue
            answer: dict[str, Any] = json.loads(seen[at + len(marker) : end])
            if answer.get("id") != request["id"]:
                raise RuntimeError(f"the dump child answered request {answer.get('id')}, "
                                   f"not {request['id']}")  # fmt: skip
            return answer

    def _died(self) -> NoReturn:
        """Report a child that ended, killed or failing, before it answered."""
        raise RuntimeError(f"the dump compile failed (exit {self._exit}): {self._last_words()}")

    def _running(self) -> subprocess.Popen[bytes]:
        """The child, started now if there is none or this process's environment changed."""
        env = _settings(child_environment({}))
        if self._proc is not None and self._proc.poll() is None and env == self._env:
            return self._proc
        self.close()
        self._env = env
        self._root = Path(tempfile.mkdtemp(prefix="boundary-kept-dumps-"))
        dirs = {name: self._root / name for name in self._names}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open with the child
        self._proc = subprocess.Popen(
            [sys.executable, "-m", self.module, str(self._root)],
            env=child_environment(self._env_for(dirs)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,  # each request reaches the child as it is written
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
        self._exit = code
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
