"""What XLA's `memory_analysis()` says of a compiled program, read the same way everywhere
(the engine, the deviceless reports, the CPU stand-in reference). No workloads imported:
a workload reads it too.
"""

from __future__ import annotations

from typing import Any

from workers.protocol import MemoryAnalysis


def memory_stats(compiled: Any) -> Any | None:
    """XLA's `memory_analysis()` of a compiled program, or None where it gives none."""
    try:
        return compiled.memory_analysis()
    except (NotImplementedError, RuntimeError, ValueError):
        return None


def memory_stat(stats: Any, name: str) -> int | None:
    """One byte count of `memory_stats`, or None when absent or not a count."""
    value = getattr(stats, name, None)
    return int(value) if isinstance(value, int) and value >= 0 else None


def memory_analysis(compiled: Any) -> MemoryAnalysis | None:
    """What XLA says the compiled program holds in memory, or None where it says nothing."""
    stats = memory_stats(compiled)
    if stats is None:
        return None
    return MemoryAnalysis(
        argument_bytes=memory_stat(stats, "argument_size_in_bytes"),
        output_bytes=memory_stat(stats, "output_size_in_bytes"),
        temp_bytes=memory_stat(stats, "temp_size_in_bytes"),
        peak_bytes=memory_stat(stats, "peak_memory_in_bytes"),
        alias_bytes=memory_stat(stats, "alias_size_in_bytes"),
    )
