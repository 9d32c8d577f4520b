"""`shape-sweep`: a list (or seeded distribution) of sizes sent through one jitted function,
without and with bucketing, so the retrace-versus-padding trade-off is measured."""

from __future__ import annotations

import math
import random
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, field_validator

from workers.catalog.base import DTYPE_BYTES, Dtype, Lax, Precision, WorkloadParams
from workers.catalog.elementwise import ElementwiseParams
from workers.catalog.peak import COMPILE_BYTES, F64, Peak
from workers.catalog.tolerances import contraction_tolerance

MAX_SHAPES = 512
MAX_SIZE = 8192
BUCKETING = re.compile(r"^(none|pow2|multiple:([1-9][0-9]{0,3}))$")
DIGITS = re.compile(r"[0-9]{1,6}")
"""A size typed as text: ASCII digits only ('²'.isdigit() is true, and int('²') fails)."""
CHAIN_LENGTH = 8
"""Operations in the elementwise op's chain (as in the elementwise workload's default)."""


class SweepOp(StrEnum):
    """What the jitted function does to each [size, features] input."""

    MATMUL = "matmul"
    ELEMENTWISE = "elementwise"


def bucket(size: int, policy: str) -> int:
    """The size a call of `size` rows runs at under `policy` (none, pow2 or multiple:N)."""
    if policy == "none":
        return size
    if policy == "pow2":
        return 1 << (size - 1).bit_length()
    step = int(policy.removeprefix("multiple:"))
    return -(-size // step) * step


class ShapeSweepParams(WorkloadParams):
    workload = "shape-sweep"
    no_target = "it times every shape's executions, so it runs only where it compiles"
    title = "Shape sweep (retracing vs padding)"
    summary = (
        "Many input sizes through one jitted function: every new shape is a new trace and "
        "compilation, unless sizes are bucketed, which pads and so computes more. Both run "
        "side by side, so the trade-off is measured, not guessed."
    )

    shapes: tuple[Annotated[int, Field(ge=1, le=MAX_SIZE)], ...] | None = Field(
        default=None,
        description=(
            "The leading size of each call, in order, e.g. 3,5,8,3,5 (a JSON list or "
            "comma-separated text). Empty: a seeded distribution of `count` sizes."
        ),
    )
    count: int = Field(default=24, ge=1, le=MAX_SHAPES, description="Sizes drawn when empty.")
    min_size: int = Field(default=1, ge=1, le=MAX_SIZE, description="Smallest size drawn.")
    max_size: int = Field(default=256, ge=1, le=MAX_SIZE, description="Largest size drawn.")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seed of the drawn sizes.")
    op: Annotated[SweepOp, Lax] = Field(
        default=SweepOp.MATMUL,
        description="matmul: [size, features] @ [features, out_features]; elementwise: a chain.",
    )
    features: int = Field(default=256, ge=1, le=4096, description="Columns of each input.")
    out_features: int = Field(default=256, ge=1, le=4096, description="matmul output columns.")
    bucketing: str = Field(
        default="pow2",
        max_length=16,
        pattern=BUCKETING.pattern,
        description="The policy run beside no bucketing: pow2, multiple:N (1–9999) or none.",
    )
    dtype: Annotated[Dtype, Lax] = Field(default=Dtype.FLOAT32, description="Storage type.")

    @field_validator("shapes", mode="before")
    @classmethod
    def _read_shapes(cls, value: Any) -> Any:
        """Accept a JSON list or text such as '3, 5, 8' (what an HTML form sends)."""
        if isinstance(value, str):
            parts = [p.strip() for p in value.replace(";", ",").split(",") if p.strip()]
            if not parts:
                return None
            if not all(DIGITS.fullmatch(p) for p in parts):
                raise ValueError("give whole numbers separated by commas, e.g. 3,5,8")
            value = [int(p) for p in parts]
        if isinstance(value, list):
            if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
                raise ValueError("every size must be a whole number")
            value = tuple(value)
        if isinstance(value, tuple) and len(value) > MAX_SHAPES:
            raise ValueError(f"at most {MAX_SHAPES} sizes")
        if isinstance(value, tuple) and not value:
            return None
        return value

    @field_validator("bucketing", mode="before")
    @classmethod
    def _known_policy(cls, value: Any) -> Any:
        if isinstance(value, str) and not BUCKETING.match(value):
            raise ValueError("use none, pow2 or multiple:N with 1 ≤ N ≤ 9999, e.g. multiple:8")
        return value

    @field_validator("max_size")
    @classmethod
    def _ordered(cls, value: int, info: Any) -> int:
        low = info.data.get("min_size")
        if isinstance(low, int) and value < low:
            raise ValueError(f"must be at least min_size ({low})")
        return value

    def sizes(self) -> list[int]:
        """Every call's size, in order: the given list, or a log-uniform seeded draw."""
        if self.shapes is not None:
            return list(self.shapes)
        rng = random.Random(self.seed)
        low, high = math.log(self.min_size), math.log(self.max_size + 1)
        return [
            min(self.max_size, max(self.min_size, int(math.exp(rng.uniform(low, high)))))
            for _ in range(self.count)
        ]

    def policies(self) -> list[str]:
        """The policies this job runs, in order: always none first."""
        return ["none"] if self.bucketing == "none" else ["none", self.bucketing]

    def chain(self, elements: int) -> ElementwiseParams:
        """The elementwise op as the elementwise workload: CHAIN_LENGTH operations over
        `elements` values (at least one) in the sweep's storage type."""
        return ElementwiseParams(n=max(1, elements), ops=CHAIN_LENGTH, dtype=self.dtype)

    def flop_count_at(self, rows: int) -> float:
        """FLOPs of one call at `rows` rows (analytic)."""
        if self.op is SweepOp.MATMUL:
            return 2.0 * rows * self.features * self.out_features
        return self.chain(rows * self.features).flop_count()

    def byte_count_at(self, rows: int) -> float:
        """Bytes one call at `rows` rows must at least read and write."""
        size = DTYPE_BYTES[self.dtype.value]
        if self.op is SweepOp.MATMUL:
            w = self.features * self.out_features
            return float(size * (rows * self.features + w + rows * self.out_features))
        return float(size * 2 * rows * self.features)

    def pass_flops(self) -> float:
        """Useful FLOPs of one pass over every size, unpadded: the sweep's unit of work
        (its rate basis spans len(sizes()) calls, not one)."""
        return sum(self.flop_count_at(n) for n in self.sizes())

    def pass_bytes(self) -> float:
        """Bytes one pass over every size, unpadded, must at least move."""
        return sum(self.byte_count_at(n) for n in self.sizes())

    def flop_count(self) -> float:
        # A sweep has no single call: its counted unit is one pass (see pass_flops).
        return self.pass_flops()

    def byte_count(self) -> float:
        return self.pass_bytes()

    def tolerance(self) -> float:
        """The relative error allowed, as the matmul and elementwise workloads declare it."""
        if self.op is SweepOp.MATMUL:
            return contraction_tolerance(self.dtype, Precision.DEFAULT, self.features)
        return self.chain(self.features).tolerance()

    def policy_figures(self, policy: str) -> tuple[list[int], float, float, float]:
        """What one pass under `policy` computes, from the parameters alone: every call's
        padded size, in order; the FLOPs executed (padding included); the useful FLOPs
        (unpadded); and the padding waste, in percent of the useful FLOPs."""
        sizes = self.sizes()
        padded = [bucket(n, policy) for n in sizes]
        useful = sum(self.flop_count_at(n) for n in sizes)
        executed = sum(self.flop_count_at(m) for m in padded)
        waste = (executed - useful) / useful * 100.0 if useful > 0 else 0.0
        return padded, executed, useful, waste

    def input_bytes(self) -> int:
        size = DTYPE_BYTES[self.dtype.value]
        rows = max(bucket(s, p) for s in self.sizes() for p in self.policies())
        out = self.out_features if self.op is SweepOp.MATMUL else self.features
        weight = self.features * self.out_features if self.op is SweepOp.MATMUL else 0
        # One input per distinct size of each policy stays placed for the steady passes.
        placed = sum(sum({bucket(s, p) for s in self.sizes()}) for p in self.policies())
        return size * (placed * self.features + rows * out + weight)

    def peak(self, calls_alive: int = 1) -> Peak:
        """As workers.run.sweep runs it, phase by phase:

        - the steady passes of policy p: the host inputs (one per distinct size) and the
          weight; the outputs every earlier policy keeps for the check; this policy's
          placed inputs (a padded input and a copy of the weight per distinct size) and
          its outputs (one per distinct size);
        - the check: host inputs, every policy's kept outputs, the float64 reference (one
          block per call, repeats included), the previous policy's float64 output, and
          this policy's float64 output, built as a list and then joined (twice its size).

        Each compiled program keeps about COMPILE_BYTES besides.
        """
        itemsize = DTYPE_BYTES[self.dtype.value]
        sizes = self.sizes()
        distinct = sorted(set(sizes))
        matmul = self.op is SweepOp.MATMUL
        feat = self.features
        out = self.out_features if matmul else feat
        weight = feat * self.out_features * itemsize if matmul else 0
        host = sum(distinct) * feat * itemsize + weight
        kept: list[int] = []
        phases: dict[str, dict[str, int]] = {}
        compiled = 0
        for policy in self.policies():
            padded = [bucket(n, policy) for n in distinct]
            compiled += len(set(padded))
            phases[f"the steady passes, bucketing {policy}"] = {
                "host inputs": host,
                "earlier policies' outputs": sum(kept),
                "placed inputs": sum(padded) * feat * itemsize + len(distinct) * weight,
                "outputs": (sum(padded) + max(padded)) * out * itemsize,
                "compiled programs": compiled * COMPILE_BYTES,
            }
            kept.append(sum(padded) * out * itemsize)
        rows = sum(sizes) * out * F64  # one float64 block per call, repeats included
        phases["the correctness check"] = {
            "host inputs": host,
            "kept outputs": sum(kept),
            "float64 reference": rows,
            "float64 outputs": (1 + (2 if len(kept) > 1 else 1)) * rows,
            "compiled programs": compiled * COMPILE_BYTES,
        }
        return Peak.largest(phases)
