"""What every runner of a job shares: the seed its inputs are drawn with, the refusal of a
job this process cannot run, and where its progress goes.

The runners: the JAX path (`workers.run.program`, then `workers.run.execute`), a target
without its hardware (`deviceless`), a shape sweep (`sweep`) and the cuda path (`cuda`);
`workers.run.engine.run_job` hands each job to its runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workers.protocol import ProgressEvent, ProgressPhase

SEED = 0
"""Seed of the input generator: the same job always sees the same inputs."""

Progress = Callable[[ProgressEvent], None]
"""Where a runner's progress events go (the agent's runner, the terminal, a test)."""


class PathUnavailable(ValueError):
    """The job's path needs devices (or tools) this process does not have."""


class Emit(Protocol):
    """Sends one progress event of `phase`, with its fields, where the runner's progress goes."""

    def __call__(self, phase: ProgressPhase, **fields: Any) -> None: ...


def emitter(progress: Progress | None) -> Emit:
    """The `emit` of a runner whose progress goes to `progress` (nowhere when None)."""

    def emit(phase: ProgressPhase, **fields: Any) -> None:
        if progress is not None:
            progress(ProgressEvent(phase=phase, **fields))

    return emit
