"""Time to the first answer: from `boundary export-fn … --upload … --target v6e:2x4
--target h100:8` to both runs' pages showing memory per device, with one local worker.

A real server (`boundary serve --workers 1`) and the real command, in their own
processes. The program is the tests' own (tests/workers/own_model.py): an optax
transformer train step, data-parallel over a mesh of 8, exported with `--devices 8`, its
input rules and a sampled reference (so the CPU run is queued too, as a user's is).

Two ways of getting the same pages, side by side in one run on one server:
- later (the default): each compile-only job is done when its compile ends, its dumps
  (TPU bundles, GPU PTX and SASS) come from follow-up jobs at the back of the queue;
- inline: the same jobs submitted with `"dumps": "inline"`, each waiting for its dumps
  (how every job ran before).
Each round's clock starts when its jobs go in (for `later`, also when the command
starts: the goal's number) and stops per target when `/api/v1/jobs/{id}` shows the run
done with a peak per device. Rounds alternate, and each waits for the queue to empty.
Goal: command → both pages ≤ 60 s here.

    .venv/bin/python bench/first_answer.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "workers" / "own_model.py"
TARGETS = ("v6e:2x4", "h100:8")
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serve(data: Path, settings: dict[str, str] | None = None) -> Iterator[str]:
    """`boundary serve --workers 1` on a free port, its database in `data`, with
    `settings` (e.g. {"BOUNDARY_JOB_TIMEOUT_S": "1800"}) and no other BOUNDARY_ variable
    of this process; its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOUNDARY_")}
    env["BOUNDARY_DB"] = str(data / "db.sqlite3")
    env.update(settings or {})
    log = open(data / "server.log", "wb")  # noqa: SIM115 - closed below
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _ready(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {(data / 'server.log').read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ready(url: str) -> bool:
    """The server answers and its local worker is connected."""
    with contextlib.suppress(httpx.TransportError):
        workers = httpx.get(f"{url}/api/v1/workers", timeout=2)
        return workers.status_code == 200 and bool(workers.json().get("data"))
    return False


def export_and_upload(url: str, folder: Path) -> tuple[float, dict[str, Any]]:
    """Run export-fn with --upload and the two targets; (its start, what it printed)."""
    sys.path.insert(0, str(ROOT / "tests" / "workers"))
    from own_exports import PROGRAMS, rules_of  # the tests' own model and its rules

    program = PROGRAMS["dp"]
    args = [f"{MODEL}:{program.function}", "--example", f"{MODEL}:{program.example}"]
    args += ["-o", str(folder / "dp.jaxexport"), "--devices", "8"]
    args += ["--input-rules", json.dumps(rules_of(program)), "--generated-inputs"]
    args += ["--save-output-sample", "64", "--upload", url]
    for target in TARGETS:
        args += ["--target", target]
    started = time.time()
    return started, export_fn(args, folder, timeout_s=600)


def export_fn(args: list[str], folder: Path, *, timeout_s: float = 900) -> dict[str, Any]:
    """`boundary export-fn ARGS` in its own process in `folder`, as a user runs it; the
    summary it prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "export-fn", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"export-fn {args[0]} failed: {done.stderr[-3000:]}")
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def wait_for_memory(url: str, jobs: dict[str, str], since: float) -> dict[str, float]:
    """Seconds from `since` until each target's job (target → id) shows a peak per device."""
    answered: dict[str, float] = {}
    while len(answered) < len(jobs):
        for target, job_id in jobs.items():
            if target in answered:
                continue
            job = httpx.get(f"{url}/api/v1/jobs/{job_id}", timeout=10).json()
            if job["status"] in ("failed", "cancelled", "expired"):
                raise RuntimeError(f"{target}: {job['status']}: {job['reason']}")
            memory = ((job.get("run") or {}).get("target") or {}).get("memory") or {}
            if job["status"] == "done" and memory.get("peak_bytes"):
                answered[target] = time.time() - since
        time.sleep(0.25)
    return answered


def wait_for_empty_queue(url: str) -> None:
    """Until no job is queued or running (the follow-ups included)."""
    while True:
        jobs = httpx.get(f"{url}/api/v1/jobs", params={"limit": 200}, timeout=10).json()["data"]
        if not any(j["status"] in ("queued", "running") for j in jobs):
            return
        time.sleep(0.5)


def submit_round(url: str, printed: dict[str, Any], dumps: str) -> tuple[float, dict[str, str]]:
    """The jobs export-fn queued, again, in its order, asking `dumps`; (when, target → id)."""
    artifact = printed["uploaded"]["artifact"]
    since = time.time()
    ids: dict[str, str] = {}
    for target in TARGETS:
        job = {
            "workload": "exported",
            "path": "jax-gpu" if target.startswith("h") else "jax-tpu",
            "target": target,
            "stages": ["compile"],
            "params": {"artifact": artifact},
            "dumps": dumps,
        }
        made = httpx.post(f"{url}/api/v1/jobs", json=job, timeout=30)
        made.raise_for_status()
        ids[target] = made.json()["id"]
    return since, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="boundary-first-") as tmp, serve(Path(tmp)) as url:
        started, printed = export_and_upload(url, Path(tmp))
        upload = printed["uploaded"]
        jobs = {j["target"]: j["id"] for j in upload["jobs"] if j.get("target")}
        command = wait_for_memory(url, jobs, started)
        print(f"command → memory on both pages (later): {max(command.values()):.1f} s", command)
        wait_for_empty_queue(url)
        times: dict[str, list[float]] = {"later": [], "inline": []}
        for round_ in range(args.rounds):
            order = ("later", "inline") if round_ % 2 == 0 else ("inline", "later")
            for dumps in order:
                since, ids = submit_round(url, printed, dumps)
                answered = wait_for_memory(url, ids, since)
                times[dumps].append(max(answered.values()))
                print(f"round {round_ + 1} {dumps}: {answered}")
                wait_for_empty_queue(url)
        later, inline = statistics.median(times["later"]), statistics.median(times["inline"])
        print(
            f"jobs in → memory on both pages: later {later:.1f} s, inline {inline:.1f} s, "
            f"inline ÷ later = {inline / later:.2f}×"
        )


if __name__ == "__main__":
    main()
