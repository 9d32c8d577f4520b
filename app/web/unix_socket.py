"""The unix socket `boundary serve --uds PATH` listens on instead of a TCP port.

- It is created owner-only (mode 0600) unless `--uds-mode` says otherwise (660 lets the
  owner's group in, nginx's user among them): it is bound under a umask that lets no one
  else in and then given the mode asked for, so it is never more open than that.
- A socket file no server answers on, left by a server that was killed (a process that
  dies leaves its socket file behind), is removed and the server starts. One a server
  answers on is refused: removing it would cut the live server off from every new client
  while it runs on. A path that exists and is not a socket is never removed.
- It listens at once, so a second server started meanwhile finds it live, not stale.
- It is removed when the server closes, if it is still the file this server bound.

uvicorn's own `uds=` does not do this: it makes the socket 0666 (or keeps the mode of the
file already there), and asyncio's `create_unix_server` removes any socket at the path, a
live server's too. So `serve` binds the socket here and hands it to uvicorn
(`Server.run(sockets=[...])`), which then serves it as it serves a TCP socket.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODE = 0o600
BACKLOG = 2048
"""uvicorn's own default backlog."""
PROBE_TIMEOUT_S = 1.0


class SocketRefused(RuntimeError):
    """The socket cannot be made at that path; the message says why and what to do."""


def parse_mode(text: str) -> int:
    """`--uds-mode`'s octal permissions (600, 660, 0o660); ValueError naming what is wrong."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise ValueError(f"expected octal permissions such as 600 or 660, not {text!r}") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{text!r} is not a file mode (at most 777)")
    if mode & 0o600 != 0o600:
        raise ValueError(f"{text!r}: its owner (this server's user) must read and write it")
    return mode


def answers(path: Path) -> bool | None:
    """Whether a server accepts connections on the socket at `path`: True, False (nothing
    listens: a stale socket, or no file), or None when this user may not even try."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except PermissionError:
        return None
    except OSError:  # a full backlog (timed out) is a busy server, not a stale file
        return True
    else:
        return True
    finally:
        probe.close()


@dataclass(frozen=True)
class UnixListener:
    """A listening socket at `path`, and the file's identity (device and inode) as bound."""

    path: Path
    sock: socket.socket
    identity: tuple[int, int]

    def remove(self) -> None:
        """Remove the socket file, unless another file has taken its path since."""
        with contextlib.suppress(OSError):
            found = self.path.lstat()
            if (found.st_dev, found.st_ino) == self.identity:
                self.path.unlink()


def _clear(path: Path) -> bool:
    """Make room for a socket at `path` (SocketRefused when it is taken); whether a stale
    socket had to be removed."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(found.st_mode):
        raise SocketRefused(f"--uds {path}: the path exists and is not a socket: choose another")
    live = answers(path)
    if live is None:
        raise SocketRefused(
            f"--uds {path}: a socket this user may not open is there (another user's "
            "server?): remove it or choose another path"
        )
    if live:
        raise SocketRefused(
            f"--uds {path}: a server is listening on it already (another `boundary serve`?): "
            "stop that one, or choose another path"
        )
    path.unlink(missing_ok=True)  # left by a server that was killed
    return True


def listen_unix(path: Path, mode: int = DEFAULT_MODE) -> tuple[UnixListener, bool]:
    """A socket listening at `path` with permissions `mode` (see the module's docstring),
    and whether a stale socket was removed first; SocketRefused saying why not."""
    stale = _clear(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound: os.stat_result | None = None
    try:
        previous = os.umask(0o177)  # nobody but the owner, until the mode is set
        try:
            sock.bind(str(path))
        finally:
            os.umask(previous)
        bound = path.lstat()
        os.chmod(path, mode)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        if bound is not None:
            path.unlink(missing_ok=True)
        reason = exc.strerror or str(exc)
        raise SocketRefused(f"--uds {path}: cannot listen there: {reason}") from None
    return UnixListener(path, sock, (bound.st_dev, bound.st_ino)), stale
