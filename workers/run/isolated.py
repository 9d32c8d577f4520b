"""One job in a fresh process, for what a process can do only once, or must not do at all.

Mosaic GPU compiles kernels for one GPU architecture per process (after an H100 kernel a
B200 one fails in ptxas, and the other way round; see `workers.pallas.lowering`). A
long-lived runner that has compiled Mosaic GPU kernels for one architecture hands a job
for another here: the job runs in a child process (`python -m workers.run.isolated_child`,
the job's JSON on stdin, the run's JSON on stdout) under the same rules, and its run
comes back as it is. A runner that holds a TPU chip compiles for the chip's own target
without the device the same way, in a child that never opens the chip
(`workers.run.prediction`). The child's progress is not forwarded; a refusal comes back as the
same error the engine would have raised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from workers.catalog import CatalogError
from workers.compiler.jaxenv import child_jax_environment
from workers.protocol import JobSpec, RunResult
from workers.run.base import PathUnavailable

TIMEOUT_S = 600.0


def run_isolated(
    job: JobSpec,
    *,
    cache_dir: Path | None,
    max_bytes: int,
    files_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> RunResult:
    """`job`'s run, made in a fresh process with `environ` (this one's by default), its
    stored files (an upload's artifact) read from `files_dir`."""
    env = dict(os.environ if environ is None else environ)
    env.update(child_jax_environment(env))  # never the TPU chip the runner may hold
    request = {
        "job": job.model_dump(mode="json"),
        "cache_dir": str(cache_dir) if cache_dir is not None else None,
        "files_dir": str(files_dir) if files_dir is not None else None,
        "max_bytes": max_bytes,
    }
    done = subprocess.run(
        [sys.executable, "-m", "workers.run.isolated_child"],
        input=json.dumps(request),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    answer = json.loads(lines[-1]) if lines else {}
    if "run" in answer:
        return RunResult.model_validate(answer["run"])
    if answer.get("kind") == "catalog":
        raise CatalogError(answer["message"], answer.get("field"))
    if answer.get("kind") == "unavailable":
        raise PathUnavailable(answer["message"])
    raise RuntimeError(
        f"the job's own process failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}"
    )
