"""A worker group: several processes, possibly on several hosts, running one mesh.

JAX's own multi-controller runtime does the work: every process calls
`jax.distributed.initialize` with the same coordinator address and its own process id,
after which `jax.devices()` lists the devices of every process and a jitted program over
a mesh of them runs on all processes at once, each driving its own devices.

Only process 0 talks to the server. It hands each job to the other processes through the
distributed runtime's key-value store (the coordination service JAX already runs for
the group), every process runs the same job through the engine, and the followers put
their outcome back in the store for process 0 to report as one result.

Why the key-value store and not a broadcast collective: a job is a short JSON text of
varying length; the store carries it as it is, needs no compiled program or device
buffer, works before any mesh exists, and waits with a timeout. A collective would need
a fixed-size buffer, a compile per message and every device to take part.

Settings (environment): BOUNDARY_COORDINATOR (host:port of process 0's coordination
service), BOUNDARY_NUM_PROCESSES and BOUNDARY_PROCESS_ID.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.catalog import CatalogError
from workers.catalog.job_limit import host_job_bytes
from workers.measure.publish import regroup
from workers.measure.stopping import lockstep
from workers.protocol import (
    GroupProcess,
    GroupReport,
    JobSpec,
    Mode,
    RunResult,
    StageId,
)

COORDINATOR_ENV = "BOUNDARY_COORDINATOR"
NUM_PROCESSES_ENV = "BOUNDARY_NUM_PROCESSES"
PROCESS_ID_ENV = "BOUNDARY_PROCESS_ID"
WAIT_SLICE_MS = 30_000
OUTCOME_TIMEOUT_MS = 300_000


class GroupConfigError(ValueError):
    """The group settings are missing a part or contradict each other."""


@dataclass(frozen=True)
class GroupConfig:
    """Where the coordinator is, how many processes there are, and which one this is."""

    coordinator: str
    num_processes: int
    process_id: int

    @property
    def leader(self) -> bool:
        """Process 0 talks to the server and reports for the group."""
        return self.process_id == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GroupConfig | None:
        """The group this process belongs to, or None when it runs alone."""
        env = os.environ if environ is None else environ
        coordinator = env.get(COORDINATOR_ENV, "").strip()
        if not coordinator:
            return None
        host, sep, port = coordinator.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise GroupConfigError(f"{COORDINATOR_ENV}: expected host:port, got {coordinator!r}")
        count = env.get(NUM_PROCESSES_ENV, "")
        rank = env.get(PROCESS_ID_ENV, "")
        if not count.isdigit() or int(count) < 1:
            raise GroupConfigError(f"{NUM_PROCESSES_ENV}: expected a positive integer")
        if not rank.isdigit() or int(rank) >= int(count):
            raise GroupConfigError(
                f"{PROCESS_ID_ENV}: expected an integer from 0 to {int(count) - 1}"
            )
        return cls(coordinator, int(count), int(rank))


def join(config: GroupConfig, timeout_s: int = 120) -> None:
    """Join the group: start (process 0) or reach the coordinator, and see every device.

    Must run before JAX starts a backend. CPU devices talk to each other through gloo.
    """
    import jax

    from workers.compiler.jaxtyped import config_update

    config_update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=config.coordinator,
        num_processes=config.num_processes,
        process_id=config.process_id,
        initialization_timeout=timeout_s,
    )
    # Each process's backend starts by exchanging its devices with every other one, so
    # all of them start it now, together, rather than whenever each first needs it.
    jax.devices()


def group_job(job: JobSpec) -> JobSpec:
    """`job` if every process of a group can run it in lockstep, else CatalogError.

    Every process must make the same calls in the same order (each call is a collective
    program), so sampling needs a fixed count; the processes sample in
    `workers.measure.stopping.lockstep()`, with no time cap and no warm-up detection that
    could stop one process before another. The job itself is not changed: the result
    is checked against the job that was leased.
    """
    if job.measure.samples == "auto":
        raise CatalogError(
            "measure.samples: a worker group needs a fixed sample count, not auto",
            "measure.samples",
        )
    if job.measure.mode is Mode.APPLICATION:
        raise CatalogError(
            "measure.mode: application mode copies whole arrays to and from one host; "
            "a worker group cannot run it",
            "measure.mode",
        )
    if StageId.SCALE in job.stages:
        raise CatalogError(
            "stages: scaling series run on one process; a worker group runs compile and execute",
            "stages",
        )
    return job


class GroupChannel:
    """Jobs and outcomes passed through the distributed runtime's key-value store."""

    def __init__(self, config: GroupConfig, client: Any | None = None) -> None:
        if client is None:
            from jax._src import distributed

            client = distributed.global_state.client
        if client is None:
            raise RuntimeError("jax.distributed is not initialized: call join() first")
        self.config = config
        self.client = client
        self.sequence = 0

    def publish(self, message: dict[str, Any]) -> int:
        """Process 0: post the next message for every follower; its sequence number."""
        self.sequence += 1
        self.client.key_value_set(f"boundary/job/{self.sequence}", json.dumps(message))
        return self.sequence

    def next_message(self) -> dict[str, Any]:
        """A follower: wait (as long as it takes) for process 0's next message."""
        self.sequence += 1
        key = f"boundary/job/{self.sequence}"
        while True:
            try:
                text = self.client.blocking_key_value_get(key, WAIT_SLICE_MS)
            except Exception as exc:
                if "DEADLINE_EXCEEDED" in str(exc) or "timed out" in str(exc).lower():
                    continue
                raise
            message: dict[str, Any] = json.loads(text)
            return message

    def post_outcome(self, sequence: int, outcome: GroupProcess) -> None:
        key = f"boundary/outcome/{sequence}/{self.config.process_id}"
        self.client.key_value_set(key, outcome.model_dump_json())

    def outcomes(self, sequence: int) -> list[GroupProcess]:
        """Process 0: every follower's outcome of message `sequence`, in process order."""
        found = []
        for rank in range(1, self.config.num_processes):
            key = f"boundary/outcome/{sequence}/{rank}"
            try:
                text = self.client.blocking_key_value_get(key, OUTCOME_TIMEOUT_MS)
            except Exception as exc:  # noqa: BLE001 - jaxlib raises its own error types
                found.append(
                    GroupProcess(process_id=rank, local_devices=0, message=f"no outcome: {exc}")
                )
                continue
            found.append(GroupProcess.model_validate_json(text))
        return found


def _local_devices() -> int:
    import jax

    return len(jax.local_devices())


def _outcome(result: RunResult | None, error: str | None, rank: int) -> GroupProcess:
    if result is None:
        return GroupProcess(process_id=rank, local_devices=_local_devices(), message=error)
    main = next((m for m in result.measurements if m.stats is not None), None)
    return GroupProcess(
        process_id=rank,
        local_devices=_local_devices(),
        passed=result.correctness.passed if result.correctness else None,
        error=result.correctness.error if result.correctness else None,
        median_s=main.stats.median if main and main.stats else None,
        digest=result.extra.get("output_sha256"),
    )


def _run(job: JobSpec, options: dict[str, Any]) -> RunResult:
    from workers.run.engine import run_job

    cache_dir = options.get("cache_dir")
    with lockstep():
        return run_job(
            group_job(job),
            options.get("progress"),
            cache_dir=Path(cache_dir) if cache_dir else None,
            max_bytes=int(options.get("max_bytes") or host_job_bytes()),
        )


def lead(
    channel: GroupChannel,
    job: JobSpec,
    *,
    cache_dir: str | None = None,
    max_bytes: int | None = None,
    progress: Any = None,
) -> RunResult:
    """Process 0: share `job` with the group, run it, and report the group's one result.

    Raises what the engine raises (every process fails alike on a bad job).
    """
    sequence = channel.publish(
        {
            "op": "run",
            "job": job.model_dump(mode="json"),
            "cache_dir": cache_dir,
            "max_bytes": max_bytes,
        }
    )
    result: RunResult | None = None
    try:
        result = _run(job, {"cache_dir": cache_dir, "max_bytes": max_bytes, "progress": progress})
    finally:
        # Followers always answer; reading their outcomes keeps the sequence in step.
        others = channel.outcomes(sequence)
    assert result is not None  # the engine returned, or its error went up from the try
    mine = _outcome(result, None, 0)
    members = [mine, *others]
    import jax

    report = GroupReport(
        processes=channel.config.num_processes,
        coordinator=channel.config.coordinator,
        devices=len(jax.devices()),
        members=members,
        agreed=False,  # the gate judges agreement (workers.protocol.gate.group_agreed)
    )
    # Through the publish gate again: a group that disagrees shows no speed anywhere.
    return regroup(result, report)


def stop(channel: GroupChannel) -> None:
    """Process 0: tell every follower to leave its loop."""
    channel.publish({"op": "stop"})


def follow(channel: GroupChannel) -> int:
    """A follower: run every job process 0 shares, until it says stop; the exit status."""
    while True:
        message = channel.next_message()
        if message.get("op") == "stop":
            return 0
        sequence = channel.sequence
        try:
            job = JobSpec.model_validate(message["job"])
            result = _run(job, message)
        except Exception as exc:  # noqa: BLE001 - reported to process 0, not fatal here
            channel.post_outcome(
                sequence,
                _outcome(None, f"{type(exc).__name__}: {exc}"[:500], channel.config.process_id),
            )
            continue
        channel.post_outcome(sequence, _outcome(result, None, channel.config.process_id))


def main(argv: list[str] | None = None) -> int:
    """`python -m workers.agent.group follow | run --job JSON [--job JSON ...]`.

    The group settings come from the environment. `follow` is what every process but 0
    runs; `run` makes process 0 run each job for the group, print each result as one
    JSON line (a job the catalog refuses prints {"error", "field"} instead), then stop
    the followers. A process other than 0 given `run` follows.
    """
    parser = argparse.ArgumentParser(prog="python -m workers.agent.group")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("follow", help="run the jobs process 0 shares, until it stops us")
    run = sub.add_parser("run", help="process 0: run jobs for the group, print each")
    run.add_argument("--job", action="append", required=True, help="a job as JSON")
    args = parser.parse_args(argv)
    try:
        config = GroupConfig.from_env()
    except GroupConfigError as exc:
        print(f"group: {exc}", file=sys.stderr)
        return 2
    if config is None:
        print(
            f"group: set {COORDINATOR_ENV}, {NUM_PROCESSES_ENV} and {PROCESS_ID_ENV}",
            file=sys.stderr,
        )
        return 2
    from workers.compiler.jaxenv import apply_jax_environment

    apply_jax_environment()  # before join() imports jax
    # gloo prints to standard output; keep it for the results alone.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    join(config)
    channel = GroupChannel(config)
    if args.command == "follow" or not config.leader:
        return follow(channel)
    status = 0
    try:
        for text in args.job:
            try:
                result = lead(channel, JobSpec.model_validate_json(text))
            except CatalogError as exc:
                out.write(json.dumps({"error": str(exc), "field": exc.field}) + "\n")
                status = 2
                continue
            out.write(result.model_dump_json() + "\n")
            out.flush()
            status = status or (0 if result.valid else 1)
    finally:
        stop(channel)
        out.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
