"""A guard for a lent accelerator host whose memory must not run out: a host that does is
taken back whole, with nothing of the run's output returned.

Run beside the work: `python3 bench/device/memory_guard.py LOG &`. Every quarter second it
reads the host's MemAvailable; every 5 s, and whenever the lowest so far drops by 1 GiB,
it writes a line to LOG with the three largest processes by resident memory. When less
than `--floor` GiB (4 by default) is left, it kills the largest process (never itself),
says which in LOG, and goes on. It stops when its parent does.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

GIB = 1024**3


def available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def ancestors() -> set[int]:
    """This process, its parents up to init, and init: never the guard's to kill."""
    found, pid = {1}, os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def largest(count: int = 3) -> list[tuple[int, int, str]]:
    """(resident bytes, pid, command line) of the largest processes, largest first,
    leaving out this guard's own line of parents."""
    found, spared = [], ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
        except OSError:
            continue
        rss = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), None)
        if rss is not None:
            found.append((int(rss.split()[1]) * 1024, int(entry.name), command))
    return sorted(found, reverse=True)[:count]


def kill_largest(left: int, log: TextIO) -> None:
    """Kill the largest process and say so; a process gone already, or not this user's,
    is said too, and the guard goes on."""
    found = largest(1)
    if not found:
        print(f"{left / GIB:.1f} GiB left, and no process could be read", file=log)
        return
    rss, pid, cmd = found[0]
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        print(f"could not kill {pid} ({rss / GIB:.1f} GiB): {exc}", file=log)
        return
    print(f"KILLED {pid} ({rss / GIB:.1f} GiB, {left / GIB:.1f} GiB left): {cmd}", file=log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--floor", type=float, default=4.0, help="GiB left before a kill")
    args = parser.parse_args()
    parent, floor = os.getppid(), int(args.floor * GIB)
    lowest, said = available(), 0.0
    with args.log.open("a", buffering=1) as log:
        while os.getppid() == parent:
            now, left = time.monotonic(), available()
            if now - said >= 5 or left < lowest - GIB:
                top = "; ".join(f"{rss / GIB:.1f} GiB {pid} {cmd}" for rss, pid, cmd in largest())
                print(
                    f"{time.strftime('%H:%M:%S')} available {left / GIB:.1f} GiB | {top}", file=log
                )
                said, lowest = now, min(lowest, left)
            if left < floor:
                kill_largest(left, log)
                time.sleep(1.0)
            time.sleep(0.25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
