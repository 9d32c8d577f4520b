"""A computation worked out in a child process forked for it, whose answer is bytes.

The HLO diff of two 4 MiB modules builds millions of small objects for a few seconds.
Worked out in a thread of the server, they shared its interpreter lock and its cycle
collector (whose full collections held the event loop for 0.1 to 0.7 s), and they left the
server's heap fragmented: Python's small-object allocator returns a 1 MiB arena only when
every object in it is gone, and a few long-lived objects the server made meanwhile kept
dozens of them, growing the server by some 2 MB a diff up to about 65 MB. A forked child
shares nothing the server does while it works, starts in milliseconds (it has every
module already), and gives all its memory back when it exits.

The child only computes and writes its answer to a pipe, then leaves with `os._exit`: it
touches no lock another thread of the server might have held when it was forked (no
store, no logging, no event loop), runs no finalizer, and closes nothing of the server's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
from collections.abc import Callable
from typing import NoReturn

ANSWER = b"A"
RAISED = b"R"
CHUNK = 1 << 20


class ChildFailed(RuntimeError):
    """The child ended without an answer (killed, or out of memory); the message says how."""


def in_child(work: Callable[[], bytes]) -> bytes:
    """`work()`, worked out in a child process forked for it: its bytes, or the exception
    it raised (raised here). Blocks until the child ends: call it from a worker thread."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(work, read_end, write_end)
    os.close(write_end)
    try:
        told = _read_all(read_end)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if told[:1] == ANSWER:
        return told[1:]
    if told[:1] == RAISED:
        raise pickle.loads(told[1:])  # (our own child pickled it)
    raise ChildFailed(f"the child process ended without an answer ({_ended(status)})")


def _child(work: Callable[[], bytes], read_end: int, write_end: int) -> NoReturn:
    """The child: work, write the answer, and leave without any of the server's clean-up."""
    code = 1
    try:
        os.close(read_end)
        _own_signals()
        gc.disable()  # a child that lives seconds need not look for cycles
        try:
            told = ANSWER + work()
        except Exception as exc:  # noqa: BLE001 - raised again in the server
            told = RAISED + _pickled(exc)
        _write_all(write_end, told)
        code = 0
    finally:
        os._exit(code)


def _own_signals() -> None:
    """The server's signal handling is the server's: the child neither wakes its event
    loop (the wakeup file it inherited) nor runs its handlers. Ctrl-C reaches the whole
    process group, and the server decides what stops; SIGTERM ends the child at once."""
    with contextlib.suppress(ValueError):  # (the forking thread is the child's main thread)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _pickled(exc: Exception) -> bytes:
    try:
        return pickle.dumps(exc)
    except (pickle.PicklingError, TypeError, AttributeError):
        return pickle.dumps(ChildFailed(f"{type(exc).__name__}: {exc}"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:CHUNK]) :]


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while chunk := os.read(fd, CHUNK):
        parts.append(chunk)
    return b"".join(parts)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
