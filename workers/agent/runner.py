"""The runner: a warm child process that imports JAX once and runs jobs through
`workers.run.engine.run_job` (the agent's handle on it is `workers.agent.runner_process`).

Wire: the agent writes one JSON request per line to the child's stdin; the child answers
with one JSON message per line on a private copy of its original stdout, having pointed
file descriptor 1 at stderr so that nothing JAX or a library prints can corrupt the
stream. Messages: `ready`, `capabilities`, `started`, `progress`, `result`, `error`.

A runner never outlives its worker: on Linux it asks the kernel for SIGKILL when its
parent dies (PR_SET_PDEATHSIG), and a watchdog thread exits as soon as stdin reaches
end-of-file, which also happens when the parent is killed. It ignores SIGINT and
SIGTERM: those are for the agent, which kills its runner with SIGKILL when it must.

Test hook (honoured only when BOUNDARY_TEST_HOOKS=1 is in the worker's environment): if
the file named by BOUNDARY_TEST_HANG_FILE exists when a job starts, the runner deletes
it and hangs instead of running the job — a deterministic hang for the tests of the job
time limit and of a worker killed mid-job. Nothing else about a job can make it hang.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

PARENT_ENV = "BOUNDARY_RUNNER_PARENT"
TEST_HOOKS_ENV = "BOUNDARY_TEST_HOOKS"
HANG_FILE_ENV = "BOUNDARY_TEST_HANG_FILE"
PR_SET_PDEATHSIG = 1
DEFAULT_MAX_VIRTUAL_DEVICES = 8
TARGETS_ENV = "BOUNDARY_WORKER_TARGETS"
"""Set to 0 so a worker offers no targets (compiles only for the devices it has)."""
CEILINGS_ENV = "BOUNDARY_WORKER_CEILINGS"
"""Set to 0 to skip measuring the roofline's ceilings when a worker starts."""
START_CAPACITY_S = 2.0
"""How long a starting worker reads TPU targets' usable bytes it has not read before
(about a second each, once per machine and libtpu version); the rest are read while idle
(workers.agent.idle)."""


def die_with_parent(parent_env: str = PARENT_ENV, sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies; exit if it already has.

    The parent's pid comes from the environment variable `parent_env`.
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the stdin watchdog still covers us
    expected = os.environ.get(parent_env)
    if expected and expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)  # the parent died before the death signal was armed


class Channel:
    """The child's side of the wire: requests from stdin, messages to the saved stdout."""

    def __init__(self) -> None:
        out_fd = os.dup(1)
        os.dup2(2, 1)  # stray prints go to stderr, never into the message stream
        sys.stdout = sys.stderr
        self._out: IO[str] = os.fdopen(out_fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, name="stdin-watchdog", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self.requests.put(json.loads(line))
        os._exit(0)  # end-of-file: the worker is gone or wants us gone

    def send(self, message_type: str, /, **fields: Any) -> None:
        line = json.dumps({"type": message_type, **fields})
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def _capabilities(max_virtual_devices: int) -> dict[str, Any]:
    import socket

    import jax

    from workers.catalog import CATALOG_VERSION
    from workers.compiler.environment import available_paths, devices_by_platform, jaxlib_version
    from workers.protocol import PROTOCOL_VERSION, PathId, Platform

    found = devices_by_platform()
    platform = next((p for p in ("tpu", "gpu", "cpu") if found.get(p)), "cpu")
    devices = found.get(platform, [])
    offered = available_paths()
    main_path = {"cpu": PathId.JAX_CPU, "gpu": PathId.JAX_GPU, "tpu": PathId.JAX_TPU}[platform]
    paths = [p.value for p in offered if p is main_path]
    from workers.cuda.env import cuda_capabilities

    # cuda_compile: nvcc (or NVRTC) answered here; cuda_run: also CuPy sees a GPU.
    cuda = cuda_capabilities()
    cuda_compile = cuda["cuda_compile"]
    targets = _targets()
    if cuda_compile:
        paths.append(PathId.CUDA.value)
    return {
        "platform": Platform(platform).value,
        "device_kind": str(devices[0].device_kind) if devices else "none",
        "device_count": len(devices),
        # A group's runner cannot restart with another device count: the mesh is fixed.
        "max_virtual_devices": max_virtual_devices if platform == "cpu" and not _GROUP else 0,
        "paths": paths,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib_version(),
        "cuda_compile": cuda_compile,
        "cuda_run": cuda["cuda_run"],
        "protocol_version": PROTOCOL_VERSION,
        "catalog_version": CATALOG_VERSION,
        "hostname": socket.gethostname(),
        "ceilings": _ceilings(devices),
        "targets": targets,
        "capacities": _capacities(targets, START_CAPACITY_S),
    }


def _targets() -> list[str]:
    """Targets this runner compiles for without the hardware (BOUNDARY_WORKER_TARGETS=0: none)."""
    if os.environ.get(TARGETS_ENV, "1") == "0":
        return []
    from workers.xla_targets.topology import available_targets

    return available_targets()


def _capacities(targets: list[str], budget_s: float) -> dict[str, int]:
    """The usable bytes of the TPU targets among `targets` this machine has read, reading
    missing ones (the smallest slice of each model first) for about `budget_s`."""
    from workers.protocol import TPU_TARGET_IDS, parse_target

    tpu = [t for t in TPU_TARGET_IDS if t in targets]
    if not tpu:
        return {}
    from workers.xla_targets.capacity import read_missing

    order = sorted(tpu, key=lambda t: parse_target(t).count)
    return {t: v for t, v in read_missing(order, budget_s).items() if t in tpu}


def _ceilings(devices: list[Any]) -> dict[str, Any] | None:
    """The first device's measured ceilings, unless BOUNDARY_WORKER_CEILINGS=0 says not to."""
    if not devices or os.environ.get(CEILINGS_ENV, "1") == "0":
        return None
    from workers.measure.ceilings import measure_ceilings

    return measure_ceilings(devices[0]).model_dump(mode="json")


def _remeasure(previous: dict[str, Any] | None) -> dict[str, Any] | None:
    """Another round of the first device's ceilings, merged with `previous` (best of)."""
    import jax

    from workers.measure.ceilings import best_of, measure_ceilings
    from workers.protocol import Ceilings

    devices = jax.devices()
    if not devices or os.environ.get(CEILINGS_ENV, "1") == "0":
        return previous
    fresh = measure_ceilings(devices[0])
    if previous is None:
        return fresh.model_dump(mode="json")
    return best_of(Ceilings.model_validate(previous), fresh).model_dump(mode="json")


_GROUP: list[Any] = []
"""The GroupChannel of a worker group's process 0, once joined (empty when alone)."""


def _join_group() -> None:
    """Join the worker group the environment names (BOUNDARY_COORDINATOR, ...), if any.

    Only process 0 runs a worker and its runner; the other processes run
    `python -m workers.agent.group follow` and take each job from process 0.
    """
    from workers.agent.group import GroupChannel, GroupConfig, join

    config = GroupConfig.from_env()
    if config is None:
        return
    if not config.leader:
        raise SystemExit(
            f"process {config.process_id} of a worker group runs "
            "`python -m workers.agent.group follow`, not a worker"
        )
    join(config)
    _GROUP.append(GroupChannel(config))


def _maybe_hang() -> None:
    if os.environ.get(TEST_HOOKS_ENV) != "1":
        return
    hang_file = os.environ.get(HANG_FILE_ENV)
    if hang_file and os.path.exists(hang_file):
        os.unlink(hang_file)
        print("test hook: hanging instead of running the job", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)


def _run(channel: Channel, request: dict[str, Any]) -> None:
    from workers.catalog import CatalogError
    from workers.catalog.job_limit import host_job_bytes
    from workers.protocol import JobSpec, ProgressEvent
    from workers.run.engine import PathUnavailable, run_job

    def progress(event: ProgressEvent) -> None:
        channel.send("progress", event=event.model_dump(mode="json", exclude_none=True))

    channel.send("started")
    _maybe_hang()
    started = time.perf_counter()
    try:
        job = JobSpec.model_validate(request["job"])
        cache_dir = request.get("cache_dir")
        if _GROUP:  # process 0 of a worker group: every process runs the job
            from workers.agent.group import lead

            result = lead(
                _GROUP[0],
                job,
                cache_dir=cache_dir,
                max_bytes=request.get("max_bytes"),
                progress=progress,
            )
        else:
            result = run_job(
                job,
                progress,
                cache_dir=Path(cache_dir) if cache_dir else None,
                max_bytes=int(request.get("max_bytes") or host_job_bytes()),
                files_dir=Path(request["files_dir"]) if request.get("files_dir") else None,
            )
    except CatalogError as exc:
        reply: dict[str, Any] = {"kind": "catalog", "message": str(exc), "field": exc.field}
    except PathUnavailable as exc:
        reply = {"kind": "path", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any engine failure is reported, not fatal
        traceback.print_exc()
        reply = {"kind": "exception", "message": f"{type(exc).__name__}: {exc}"[:2000]}
    else:
        elapsed = time.perf_counter() - started
        done = json.loads(result.model_dump_json())
        del result
        give_back_memory(request.get("trim_above"))
        channel.send("result", result=done, run_s=elapsed)
        return
    give_back_memory(request.get("trim_above"))
    channel.send("error", **reply)


def _resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as lines:
        for line in lines:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def give_back_memory(trim_above: object = None) -> None:
    """Free what the job left (cycles, then glibc's free lists) before the agent looks at
    this runner's memory: what glibc keeps after a large job is free memory, not live
    objects, and malloc_trim returns it to the system (where glibc is the allocator).

    Only when the runner holds more than `trim_above` bytes (the agent sends it: half of
    what it lets a runner keep over its ready size), or always when none was sent: a full
    collection in a process that imported JAX takes 60-90 ms, which small jobs, whose
    memory stays far under that, need not pay before their result goes out."""
    if isinstance(trim_above, int) and not isinstance(trim_above, bool):
        with contextlib.suppress(OSError, ValueError):
            if _resident_bytes() <= trim_above:
                return
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def child_main() -> None:
    """The runner process: warm up, then serve requests until stdin closes."""
    die_with_parent()
    # Ctrl-C in a terminal or a service manager's SIGTERM reach the whole process group;
    # the agent decides what happens to the job, so the runner leaves signals to it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    channel = Channel()
    started = time.perf_counter()
    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()  # the pool sets these already; a runner started by hand may not
    import workers.run.engine  # noqa: F401 - the point of a warm runner: import JAX once

    _join_group()

    channel.send("ready", pid=os.getpid(), import_s=time.perf_counter() - started)
    while True:
        request = channel.requests.get()
        op = request.get("op")
        if op == "detect":
            channel.send(
                "capabilities",
                data=_capabilities(int(request.get("max_virtual_devices") or 0)),
            )
        elif op == "ceilings":
            channel.send("ceilings", data=_remeasure(request.get("previous")))

        elif op == "run":
            _run(channel, request)
        else:
            channel.send("error", kind="protocol", message=f"unknown op {op!r}")


if __name__ == "__main__":
    child_main()
