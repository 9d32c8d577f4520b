"""The connection half of bench/soak.py: half-open (slowloris) connections and event
streams from 20 client addresses against `boundary serve`, while /healthz is timed from
another process and the server's memory and open files are sampled.

From 127.0.0.2 … 127.0.0.21 (all loopback on Linux), at once:

- `streams` event streams (/runs/{id}/live of a job that stays queued), spread over the
  addresses (50 each for 1,000: under the per-client cap of 100);
- `half_open` connections that send a request line and one header byte every `drip_s`
  seconds and never finish their headers; one the server closes is not opened again.

For `seconds`, /healthz is timed every half second from 127.0.0.1 by a separate process
(its own event loop: a busy load generator does not delay the measurement).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netload import connect, free_port, open_stream, queued_job, raise_nofile, serve, server_rss

SOURCES = [f"127.0.0.{i}" for i in range(2, 22)]


@dataclass
class Load:
    """What the connection soak asks for."""

    half_open: int = 5000
    streams: int = 1000
    seconds: float = 30.0
    drip_s: float = 5.0


class Pressure:
    """The half-open connections and what became of them."""

    def __init__(self, port: int, drip_s: float) -> None:
        self.port = port
        self.drip_s = drip_s
        self.open_now = 0
        self.opened = 0
        self.ended: Counter[str] = Counter()
        self.stopping = False

    async def slot(self, index: int) -> None:
        try:
            reader, writer = await connect(self.port, SOURCES[index % len(SOURCES)])
        except OSError:
            self.ended["connect failed"] += 1
            return
        self.opened += 1
        self.open_now += 1
        try:
            writer.write(b"GET / HTTP/1.1\r\nHost: soak\r\n")
            while not self.stopping:
                writer.write(b"X")
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(4096), self.drip_s)
                except TimeoutError:
                    continue
                self.ended["closed" if not data else f"answered {data[9:12].decode()}"] += 1
                break
        except ConnectionError:
            self.ended["reset"] += 1
        finally:
            self.open_now -= 1
            writer.transport.abort()


async def _soak(port: int, pid: int, job: str, load: Load) -> dict[str, Any]:
    report: dict[str, Any] = {"rss_idle_mib": round(server_rss(pid) / 2**20, 1)}
    started = time.monotonic()
    streams = await asyncio.gather(
        *(open_stream(port, job, SOURCES[i % len(SOURCES)]) for i in range(load.streams))
    )
    report["streams"] = dict(Counter(str(s.status) for s in streams))
    report["streams_open_s"] = round(time.monotonic() - started, 1)
    pressure = Pressure(port, load.drip_s)
    tasks = [asyncio.create_task(pressure.slot(i)) for i in range(load.half_open)]
    prober = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("netload.py")),
        str(port),
        str(load.seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    rss: list[int] = []
    fds: list[int] = []
    held: list[int] = []
    stop = time.monotonic() + load.seconds
    while time.monotonic() < stop:
        await asyncio.sleep(1.0)
        rss.append(server_rss(pid))
        fds.append(len(os.listdir(f"/proc/{pid}/fd")))
        held.append(pressure.open_now)
    out, _ = await prober.communicate()
    probes: list[tuple[int, float]] = json.loads(out)
    pressure.stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for stream in streams:
        stream.close()
    seconds = sorted(s for _, s in probes)
    report.update(
        {
            "half_open": load.half_open,
            "half_open_held_median": int(statistics.median(held)),
            "half_open_endings": dict(pressure.ended),
            "healthz_status": dict(Counter(str(status) for status, _ in probes)),
            "healthz_s": {
                "median": round(statistics.median(seconds), 4),
                "p95": round(seconds[min(len(seconds) - 1, round(0.95 * len(seconds)))], 4),
                "max": round(seconds[-1], 4),
            },
            "rss_max_mib": round(max(rss) / 2**20, 1),
            "server_fds_max": max(fds),
        }
    )
    return report


def connection_soak(load: Load) -> dict[str, Any]:
    """Run the soak against a fresh `boundary serve --workers 0`; the report."""
    raise_nofile(load.half_open + load.streams + 2000)
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="boundary-netsoak-"))
    with serve(port, data) as proc:
        job = queued_job(port)
        return asyncio.run(_soak(port, proc.pid, job, load))
