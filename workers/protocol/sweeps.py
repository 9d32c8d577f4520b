"""Shape sweeps: one jitted function over many sizes, under each bucketing policy."""

from __future__ import annotations

from pydantic import Field

from workers.protocol.base import OpenModel


class SweepPolicy(OpenModel):
    """One bucketing policy of a shape sweep: what it cost to compile and to run."""

    policy: str = Field(description="none, pow2 or multiple:N.")
    padded_sizes: list[int] = Field(description="The size each call actually ran at, in order.")
    traces: int = Field(description="Entries in the jitted function's cache after the sweep.")
    compilations: int = Field(description="Backend compilations counted (jax.monitoring).")
    compile_s: float | None = Field(
        description="Their total backend compile time; None when not reported."
    )
    trace_s: float | None = 0.0
    lower_s: float | None = 0.0
    first_pass_s: float | None = Field(
        description="The first pass, compiles included (host-sync); None when withheld."
    )
    steady_pass_s: float | None = Field(
        default=None, description="Median of the later passes: every shape once, all compiled."
    )
    steady_call_s: float | None = Field(default=None, description="steady_pass_s per call.")
    flops: float = Field(description="FLOPs executed in one pass, padding included.")
    useful_flops: float = Field(description="FLOPs the unpadded shapes need.")
    padding_waste_pct: float = Field(description="(flops - useful_flops) / useful_flops × 100.")


class SweepResult(OpenModel):
    """A shape sweep: the same sizes through one jitted function under each policy."""

    op: str
    sizes: list[int] = Field(description="The leading dimension of each call, in order.")
    policies: list[SweepPolicy] = Field(default_factory=list)
    note: str = ""
