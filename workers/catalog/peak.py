"""A job's peak host memory, estimated from its parameters alone: what `BOUNDARY_MAX_JOB_BYTES`
caps. No jax here; the server and `boundary run` refuse a job over the cap before it runs.

Counting only the arrays a job places on the device let a shape sweep that needed 12.5
GB pass a 2 GiB cap. A run also holds the host copies of its inputs, every output it
keeps for the correctness check, the float64 reference, the check's own float64 copies
and, for a sweep, every size's buffers of every policy at once. Each workload's
`peak()` follows its program (workers.run.execute, workers.run.sweep) phase by phase and
takes the largest phase. The model counts the bytes a job's arrays hold; the runtime's
own memory (JAX, XLA, compiled programs beyond COMPILE_BYTES each) is the runner's
baseline, budgeted apart (BOUNDARY_RUNNER_MAX_MEMORY, workers.agent.memory).

Calibrated on the project's runner (jax-cpu, a fresh runner per job, peak RSS over the
runner's warm RSS): estimates were within 0.95 to 1.30 of what was measured for sweeps
of 64 to 512 sizes and within 1.03 for matmuls of 0.7 to 1.3 GB.

A dense product has its own phases (workers.catalog.product_check.product_peak): a large
one is checked by projections with no float64 copy, and a narrow one counts XLA's float32
temporaries. Measured with bench/peak_model.py (jax-cpu, the runner warmed by a small
matmul first), estimate ÷ measured peak:

| product (m × k @ k × n) | check | estimate | measured | ratio |
|---|---|---|---|---|
| 16384 × 64 @ 64 × 16384, float32 | projected | 1.17 GB | 1.18 GB | 0.99 |
| 64 × 16384 @ 16384 × 8192, float32 | projected | 1.16 GB | 1.17 GB | 0.99 |
| 8192 × 256 @ 256 × 8192, float32 | projected | 375 MB | 411 MB | 0.91 |
| the same, throughput, K = 3 | projected | 839 MB | 847 MB | 0.99 |
| 4096 × 2048 @ 2048 × 4096, float32 | exact | 604 MB | 616 MB | 0.98 |
| 8192 × 128 @ 128 × 8192, bfloat16 | projected | 493 MB | 449 MB | 1.10 |
| the same, throughput, K = 4 | projected | 822 MB | 843 MB | 0.98 |
| 2048³, bfloat16 | exact | 193 MB | 188 MB | 1.03 |
| 64 × 16384 @ 16384 × 8192, bfloat16 | projected | 1.16 GB | 1.13 GB | 1.02 |

Before the float32 temporaries were counted, three bfloat16 rows were 0.49 to 0.73.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workers.protocol.sizes import byte_text

F64 = 8
BLOCK_BYTES = 64 * 1024**2
"""The float64 rows a blocked check (a large product's projections, attention's reference)
widens at a time, at most (one row at least)."""
COMPILE_BYTES = 1024 * 1024
"""Host memory one compiled CPU program keeps, about (fitted on sweeps of hundreds of
sizes: 0.25 MiB left them 20–40 % under, 1.5 MiB over)."""


def float64_rows(rows: int, width: int) -> int:
    """Rows of a matrix `width` wide widened to float64 at a time: BLOCK_BYTES' worth, at
    least one, at most all of them."""
    return max(1, min(rows, BLOCK_BYTES // (F64 * max(width, 1))))


def limit_text(max_bytes: int) -> str:
    """The end of every refusal by the job's byte cap: the cap, and what takes no cap."""
    return (
        f"over this server's limit of {byte_text(max_bytes, exact=True)}, set by "
        "BOUNDARY_MAX_JOB_BYTES. Compiled for a target without running (a target, stages "
        "compile only) the job places no array, has no such limit, and shows whether the "
        "program fits the chip"
    )


@dataclass(frozen=True)
class Peak:
    """A job's estimated peak: its bytes, the phase it happens in, and that phase's parts."""

    total: int
    phase: str
    parts: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def largest(cls, phases: Mapping[str, Mapping[str, int]]) -> Peak:
        """The phase whose parts add up to the most."""
        phase, parts = max(phases.items(), key=lambda kv: sum(kv[1].values()))
        return cls(sum(parts.values()), phase, dict(parts))

    def text(self) -> str:
        """E.g. 'about 11.8 GB at its peak (the correctness check; float64 outputs alone
        6.17 GB)'."""
        if not self.parts:
            return f"about {byte_text(self.total)} at its peak ({self.phase})"
        name, biggest = max(self.parts.items(), key=lambda kv: kv[1])
        return (
            f"about {byte_text(self.total)} at its peak ({self.phase}; "
            f"{name} alone {byte_text(biggest)})"
        )


def dense_peak(inputs: int, output: int, itemsize: int, calls_alive: int = 1) -> Peak:
    """A single-shape workload as workers.run.execute runs it: host inputs and their
    placed copies throughout; while sampling, `calls_alive` outputs (K in throughput
    mode, else 1); then the output on the host, the reference computed from float64
    copies of the inputs, and the check's float64 output and difference. `inputs` and
    `output` are bytes in the storage type of `itemsize` bytes."""
    widen = F64 / max(itemsize, 1)
    held = {"host and placed inputs": 2 * inputs}
    return Peak.largest(
        {
            "sampling": {**held, "outputs": calls_alive * output},
            "the float64 reference": {
                **held,
                "output": output,
                "float64 inputs": int(widen * inputs),
                "float64 reference": int(widen * output),
            },
            "the correctness check": {
                **held,
                "output": output,
                "float64 reference, output and difference": int(3 * widen * output),
            },
        }
    )


def refusal(peak: Peak, max_bytes: int) -> str | None:
    """Why a job of `peak` may not run under the cap `max_bytes`, or None when it fits."""
    if peak.total <= max_bytes:
        return None
    return f"params: the job needs {peak.text()}, {limit_text(max_bytes)}"
