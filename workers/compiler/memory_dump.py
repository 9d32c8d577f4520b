"""The memory report's part of a compile: the dump option it adds, and the dump read back.

The report is taken from the compile the run times (`xla_dump_to` in its options: the
buffer assignment and the schedule are written as the compiler plans them), so that no
program is compiled twice for it; what writing the dump adds is stated in the run's
compile-timing note and measured side by side in bench/memory_report.py. A compile that
wrote nothing (a persistent-cache hit: dump options are not part of the cache key) is
done once more, untimed, with the persistent cache off.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.compiler.buffer_dump import BufferDump, DumpMissing, read_dump
from workers.compiler.jaxtyped import config_update, config_value
from workers.compiler.memory_report import memory_report
from workers.compiler.options import CompileOptions
from workers.protocol import MemoryReport

SOURCE = (
    "XLA's buffer assignment and live ranges for the optimized module "
    "(*after_optimizations-buffer-assignment.txt, *-live-range.txt)"
)
DUMP_COST = (
    "the timed compile also wrote the buffer-assignment dump (bench/memory_report.py: "
    "a few percent of a compile); reading it took {read:.2f} s, not counted"
)
CACHE_HIT = "the timed compile came from a cache, which writes no dump"
KEPT_AS_ASKED = (
    "the timed compile kept the cache policy's options (a dump folder would change its cache key)"
)
AGAIN_COST = "{why}: one more compile, untimed, wrote it ({seconds:.2f} s with reading it)"


@dataclass(frozen=True)
class Plan:
    """The compiler's memory plan as a compile dumped it, or why there is none."""

    dump: BufferDump | None
    reason: str | None
    """Why there is no report (the compile wrote no dump, or the dump did not read)."""
    cost: str | None
    seconds: float
    """Reading the dump, and any compile done only for it: never the timed compile."""


@contextlib.contextmanager
def dump_folder() -> Iterator[Path]:
    """A fresh folder for one compile's dump, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="boundary-memory-") as folder:
        yield Path(folder)


def dump_options(folder: Path) -> dict[str, str]:
    """What a compile's options need for the plan to be written into `folder`."""
    return {"xla_dump_to": str(folder)}


def read_plan(folder: Path) -> Plan:
    """The plan a compile wrote into `folder`."""
    t0 = time.perf_counter()
    try:
        dump = read_dump(folder)
    except DumpMissing as exc:
        return Plan(None, str(exc), None, time.perf_counter() - t0)
    spent = time.perf_counter() - t0
    return Plan(dump, None, DUMP_COST.format(read=spent), spent)


def plan_again(lowered: Any, options: CompileOptions | None, why: str = CACHE_HIT) -> Plan:
    """One more compile of `lowered`, untimed, with the persistent cache off, for its plan;
    `why` the timed one gave none."""
    t0 = time.perf_counter()
    enabled = config_value("jax_enable_compilation_cache")
    config_update("jax_enable_compilation_cache", False)
    try:
        with dump_folder() as folder:
            lowered.compile(compiler_options={**(options or {}), **dump_options(folder)})
            plan = read_plan(folder)
    finally:
        config_update("jax_enable_compilation_cache", enabled)
    spent = time.perf_counter() - t0
    if plan.dump is None:
        return Plan(None, plan.reason, None, spent)
    return Plan(plan.dump, None, AGAIN_COST.format(why=why, seconds=spent), spent)


def report_of(plan: Plan | None, hlo: str | None, *, vmem: bool) -> MemoryReport | None:
    """The run's memory report from `plan`, with op names and source lines from `hlo`;
    `vmem` on a TPU target, whose memory space 1 is its VMEM."""
    if plan is None or plan.dump is None:
        return None
    report = memory_report(plan.dump, hlo, source=SOURCE, tpu=vmem)
    return report.model_copy(update={"cost": plan.cost})
