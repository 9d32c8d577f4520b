"""The arithmetic a compiled program's products really run at, and what a check allows for it.

A float32 contraction (dot or convolution) does not run in float32 everywhere. The
precision written into the program (`jax.lax.Precision`, in its StableHLO as
`precision = [DEFAULT, DEFAULT]`) is a request that each platform reads its own way:

| platform | DEFAULT | HIGH | HIGHEST |
|---|---|---|---|
| CPU | float32 | float32 | float32 |
| TPU | one bfloat16 pass | three bfloat16 passes | six bfloat16 passes |
| NVIDIA GPU | TF32 | TF32 | float32 |

One bfloat16 pass rounds each operand to bfloat16 (8 significant bits) and accumulates in
float32, so a product is good to about 2⁻⁹; three passes split each operand into a high
and a low bfloat16 part (about 2⁻¹⁷), six are float32 for practical purposes. TF32 keeps
11 significant bits. A check of a program's output against a float64 (or float32 CPU)
reference must allow for the arithmetic the platform used, or every TPU run of a float32
model fails at DEFAULT precision; it must allow no more, or wrong answers pass.

Pydantic-free and jax-free: the worker names the arithmetic it read from the compiled
program, and the server recomputes it (a catalog workload) or bounds it (an uploaded
program: one of the arithmetics its path's platform has) with this same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = [
    "Arithmetic",
    "arithmetic_of",
    "coarsest",
    "phrase",
    "platform_arithmetics",
    "result_tolerance",
]


class Arithmetic(StrEnum):
    """How a float32 product is computed, from the finest to the coarsest."""

    FLOAT32 = "float32"
    BF16X6 = "bf16x6"
    BF16X3 = "bf16x3"
    TF32 = "tf32"
    BF16X1 = "bf16x1"


_ORDER: tuple[Arithmetic, ...] = tuple(Arithmetic)
"""Finest first: `coarsest` takes the last one present."""

_BY_PLATFORM: dict[str, dict[str, Arithmetic]] = {
    "cpu": dict.fromkeys(("default", "high", "highest"), Arithmetic.FLOAT32),
    "tpu": {"default": Arithmetic.BF16X1, "high": Arithmetic.BF16X3, "highest": Arithmetic.BF16X6},
    "gpu": {"default": Arithmetic.TF32, "high": Arithmetic.TF32, "highest": Arithmetic.FLOAT32},
}
"""By platform, then by `jax.lax.Precision` (the catalog's `Precision` values)."""

_PHRASES: dict[Arithmetic, str] = {
    Arithmetic.FLOAT32: "every float32 product in float32",
    Arithmetic.BF16X6: "six bfloat16 passes per float32 product (float32 in practice)",
    Arithmetic.BF16X3: "three bfloat16 passes per float32 product",
    Arithmetic.TF32: "TF32 tensor-core products (11 significant bits)",
    Arithmetic.BF16X1: "one bfloat16 pass per float32 product",
}

# Relative error ‖out − ref‖ / ‖ref‖ a float32 (or complex64) result may show under each
# arithmetic when nothing else says so (an uploaded program's default). One bfloat16 pass
# rounds operands to 2⁻⁹ relative; a network of a few layers measured 0.3 to 0.7 % from its
# float32 CPU reference on a TPU v5e, so 2 % leaves room for depth while a 5 % change of
# any output still fails. JAX's own suite allows 4e-2 elementwise for a float32 matmul on a
# TPU (tests/lax_numpy_test.py, testMatmul) and 1e-3 for float32 elsewhere on a TPU
# (jax/_src/public_test_util.py, default_tolerance); docs/design/checks.md has the rest.
_FLOAT32_RESULT: dict[Arithmetic, float] = {
    Arithmetic.FLOAT32: 1e-4,
    Arithmetic.BF16X6: 1e-4,
    Arithmetic.BF16X3: 1e-3,
    Arithmetic.TF32: 5e-3,
    Arithmetic.BF16X1: 2e-2,
}

_WIDE_RESULTS = frozenset({"float32", "complex64"})
"""Result dtypes whose tolerance follows the products' arithmetic; narrower ones are
dominated by rounding the result itself, wider ones are not computed by contractions that
a platform rounds (float64 stays float64 where it is allowed at all)."""


def arithmetic_of(platform: str, precision: str) -> Arithmetic:
    """What a float32 contraction at `precision` (default, high or highest) runs at on
    `platform` (cpu, gpu or tpu)."""
    return _BY_PLATFORM.get(platform, _BY_PLATFORM["cpu"])[str(precision)]


def platform_arithmetics(platform: str) -> frozenset[Arithmetic]:
    """Every arithmetic a float32 contraction can run at on `platform`."""
    return frozenset(_BY_PLATFORM.get(platform, _BY_PLATFORM["cpu"]).values())


def coarsest(found: Iterable[Arithmetic]) -> Arithmetic | None:
    """The least precise of `found` (what bounds a program's error); None when empty."""
    present = set(found)
    kept = [a for a in _ORDER if a in present]
    return kept[-1] if kept else None


def phrase(arithmetic: Arithmetic) -> str:
    """The arithmetic in words, e.g. 'one bfloat16 pass per float32 product'."""
    return _PHRASES[arithmetic]


def result_tolerance(dtype: str, arithmetic: Arithmetic | None, default: float) -> float:
    """A result's tolerance under `arithmetic`: the arithmetic's for a float32 or complex64
    result (never tighter than `default`, the dtype's own), `default` otherwise."""
    if arithmetic is None or dtype not in _WIDE_RESULTS:
        return default
    return max(default, _FLOAT32_RESULT[arithmetic])
