"""How a dense product's output is checked, decided from its shape alone, and the host
memory that check needs. No jax, no NumPy: the server reckons a job's peak with it.

A product whose float64 copies of A, B and C take at most EXACT_CHECK_BYTES is checked
exactly: A·B in float64 against the whole output, as every other workload is. A larger one
would need those copies on the host (8192³ bfloat16: 1.6 GB of them, and the float64
product's 2·m·n·k operations), so its check estimates the same relative error,
‖C − A·B‖ / ‖A·B‖ (Frobenius norms), from PROJECTIONS random Gaussian projections of the
whole product, widening one block of rows at a time to float64
(workers.measure.projected). docs/design/product-check.md says why, and how far the
estimate may stray from the exact figure.
"""

from __future__ import annotations

from workers.catalog.peak import F64, Peak, float64_rows

EXACT_CHECK_BYTES = 512 * 1024**2
"""The largest float64 copies of A, B and C (together) an exact check makes: 4096³ is
checked exactly (384 MiB), 8192³ by projections."""
PROJECTIONS = 32
"""Gaussian vectors the whole product is projected on (the estimate's spread: the design
note)."""
PROJECTION_SEED = 20_240_601
"""Seed of the projections' vectors: fixed, so a job's verdict is reproducible, and apart
from the inputs' own seed."""


def projected(m: int, n: int, k: int) -> bool:
    """Whether an (m × k) @ (k × n) product is checked by projections rather than exactly."""
    return F64 * (m * k + k * n + m * n) > EXACT_CHECK_BYTES


def projected_reference(count: int = PROJECTIONS) -> str:
    """The verdict's `reference` when the check projected: what it covered, in words."""
    return f"float64 reference, estimated from {count} random projections of the whole product"


def product_peak(
    shape: tuple[int, int, int],
    itemsize: int,
    calls_alive: int = 1,
    placed: tuple[int, int] | None = None,
) -> Peak:
    """The peak host memory of a run of the (m, n, k) product in storage of `itemsize`
    bytes, as workers.run.execute runs it: the host inputs and their placed copies
    throughout; while sampling, `calls_alive` outputs; then the output on the host and its
    check. `placed` gives the bytes of inputs and of one call's output placed on the
    devices when a layout differs from one copy of each (a sharded product: every device's
    shards, a replicated array whole on each).

    A narrow storage type (bfloat16, float16) counts the float32 copies of the placed
    operands and output that XLA's CPU dot works in (its `memory_analysis()` temporaries:
    4·(m·k + k·n + m·n) bytes for one device), in every phase: the runner's resident
    memory keeps them after the call. An exact check then holds the float64 inputs and
    product, and the product, output and difference; a projected one one float64 block of
    rows and the projections (PROJECTIONS columns each of R, B·R, C·R and A·B·R).
    """
    m, n, k = shape
    inputs, output = itemsize * (m * k + k * n), itemsize * m * n
    placed_inputs, placed_output = placed if placed is not None else (inputs, output)
    held = {"host and placed inputs": inputs + placed_inputs}
    if itemsize < 4:
        held["float32 temporaries"] = 4 * (placed_inputs + placed_output) // itemsize
    phases = {"sampling": {**held, "outputs": calls_alive * placed_output}}
    checked = {**held, "output": output}
    if not projected(m, n, k):
        phases["the float64 reference"] = {
            **checked,
            "float64 inputs": F64 * (m * k + k * n),
            "float64 reference": F64 * m * n,
        }
        phases["the correctness check"] = {
            **checked,
            "float64 reference, output and difference": 3 * F64 * m * n,
        }
        return Peak.largest(phases)
    widest = max(float64_rows(m, k) * k, float64_rows(k, n) * n, float64_rows(m, n) * n)
    phases["the projected check"] = {
        **checked,
        "a float64 block of rows": F64 * widest,
        "projections": F64 * PROJECTIONS * (n + k + 2 * m),
    }
    return Peak.largest(phases)
