"""The worker's file cache, shared by real processes: a running job's files are pinned
until it ends (another worker filling the folder cannot evict them), pins die with their
holder, `has()` refreshes a file's age, and four workers hammering one folder never lose
a file a job has pinned.

Before: `has()` only tested that the file existed, eviction knew nothing of jobs in
progress, and two workers sharing a folder lost a running job's file ("no file … on this
worker") on their first job."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from workers.catalog import CatalogError
from workers.files import FileCache

SIZE = 10_000
CTX = multiprocessing.get_context("spawn")


def blob(index: int) -> bytes:
    return hashlib.sha256(str(index).encode()).digest() * (SIZE // 32) + bytes(SIZE % 32)


def sha(index: int) -> str:
    return hashlib.sha256(blob(index)).hexdigest()


def _fill(directory: str, first: int, count: int, cap: int) -> None:
    cache = FileCache(Path(directory), cap)
    for i in range(first, first + count):
        cache.put(blob(i))


def _pin_and_wait(directory: str, index: int, ready: str) -> None:
    cache = FileCache(Path(directory), 10 * SIZE)
    with cache.pinned(sha(index)):
        Path(ready).touch()
        time.sleep(60)


def _hammer(
    directory: str, seconds: float, seed: int, failures: multiprocessing.Queue[str]
) -> None:
    """One worker's jobs: pin a file, fetch it if missing, use it, unpin; report any
    use that found its pinned file gone or damaged, then "done <rounds>"."""
    import random

    rng = random.Random(seed)
    cache = FileCache(Path(directory), 4 * SIZE)
    stop = time.monotonic() + seconds
    uses = 0
    try:
        while time.monotonic() < stop:
            index = rng.randrange(12)
            with cache.pinned(sha(index)):  # pin first, then fetch what is missing
                if not cache.has(sha(index)):
                    cache.put(blob(index))
                time.sleep(rng.random() * 0.002)
                try:
                    if cache.get(sha(index), "params.inputs") != blob(index):
                        failures.put(f"{seed}: wrong bytes for {index}")
                except CatalogError as exc:
                    failures.put(f"{seed}: {exc}")
            uses += 1
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
        failures.put(f"{seed}: {type(exc).__name__}: {exc}")
    failures.put(f"done {uses}")


def run(target: object, *args: object) -> None:
    proc = CTX.Process(target=target, args=args)  # type: ignore[arg-type]
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0


def test_a_running_jobs_file_is_not_evicted_by_a_second_worker(tmp_path: Path) -> None:
    job_side = FileCache(tmp_path, 3 * SIZE)
    needed = job_side.put(blob(0))
    with job_side.pinned(needed):  # the agent pins a job's files for its whole run
        run(_fill, str(tmp_path), 1, 4, 3 * SIZE)  # a second worker on the same folder
        assert job_side.get(needed, "params.inputs") == blob(0)
    with pytest.raises(CatalogError, match=r"params\.inputs: no file .* on this worker"):
        job_side.get(sha(99), "params.inputs")


def test_a_pinned_file_survives_another_process_filling_the_cache(tmp_path: Path) -> None:
    cache = FileCache(tmp_path, 3 * SIZE)
    with cache.pinned(sha(0)):
        cache.put(blob(0))
        run(_fill, str(tmp_path), 1, 6, 3 * SIZE)
        assert cache.get(sha(0), "params.inputs") == blob(0)
    run(_fill, str(tmp_path), 10, 3, 3 * SIZE)  # unpinned now: it may go
    assert not cache.has(sha(0))


def test_a_pin_dies_with_its_process(tmp_path: Path) -> None:
    cache = FileCache(tmp_path, 2 * SIZE)
    cache.put(blob(0))
    ready = tmp_path / "ready.flag"
    holder = CTX.Process(target=_pin_and_wait, args=(str(tmp_path), 0, str(ready)))
    holder.start()
    try:
        for _ in range(300):
            if ready.exists():
                break
            time.sleep(0.05)
        for i in range(1, 4):
            cache.put(blob(i))
        assert cache.has(sha(0))  # held by the other process
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join(10)
        for i in range(4, 7):
            cache.put(blob(i))
        assert not (tmp_path / sha(0)).exists()  # the dead process's pin went with it
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join(10)


def test_has_refreshes_a_files_age(tmp_path: Path) -> None:
    cache = FileCache(tmp_path, 2 * SIZE)
    first, second = cache.put(blob(0)), cache.put(blob(1))
    os.utime(tmp_path / first, (1000, 1000))  # the oldest...
    os.utime(tmp_path / second, (2000, 2000))
    assert cache.has(first)  # ...until a job asks for it
    cache.put(blob(2))
    assert (tmp_path / first).exists()
    assert not (tmp_path / second).exists()


def test_four_workers_sharing_a_folder_never_lose_a_pinned_file(tmp_path: Path) -> None:
    failures: multiprocessing.Queue[str] = CTX.Queue()
    procs = [
        CTX.Process(target=_hammer, args=(str(tmp_path), 3.0, seed, failures)) for seed in range(4)
    ]
    for proc in procs:
        proc.start()
    messages: list[str] = []
    try:
        while sum(m.startswith("done") for m in messages) < len(procs):
            messages.append(failures.get(timeout=60))
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    uses = sum(int(m.split()[1]) for m in messages if m.startswith("done"))
    assert [m for m in messages if not m.startswith("done")] == []
    assert uses > 200  # enough rounds to have evicted under each other many times
    stored = [p for p in tmp_path.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert sum(p.stat().st_size for p in stored) <= 4 * SIZE + 4 * SIZE  # cap + pinned
    assert not list(tmp_path.glob(".*.part"))
