"""A run's correctness verdict: its output, or each of its results, against a reference."""

from __future__ import annotations

from pydantic import Field

from workers.protocol.base import OpenModel


class ResultCheck(OpenModel):
    """One result of a function that returns several, checked on its own."""

    name: str = Field(description="The result's path, e.g. out0 or out1/blocks/0/mlp/kernel.")
    passed: bool
    checked: bool = Field(
        default=True, description="False when the reference has nothing for this result."
    )
    error: float | None = Field(default=None, description="||out - ref|| / ||ref||.")
    tolerance: float
    detail: str | None = None
    sampled: int | None = Field(
        default=None, description="Elements compared, when the reference is a sample."
    )


class Correctness(OpenModel):
    """The output checked against a float64 reference."""

    passed: bool
    error: float | None = Field(description="||out - ref|| / ||ref||; None if not finite.")
    tolerance: float
    reference: str = "float64 NumPy"
    detail: str | None = None
    checked: bool = Field(
        default=True,
        description="False when there was nothing to check the output against and the output "
        "is finite: `passed` is then false too, yet the run stays valid and its timings stand "
        "(see `detail`). NaN or Inf fails the run, checked or not.",
    )
    results: list[ResultCheck] = Field(
        default_factory=list,
        description="A function returning several results: each one's check, in order. The "
        "verdict above is the worst one's.",
    )
    worst: str | None = Field(
        default=None, description="The result the verdict above is about, when there are several."
    )
    arithmetic: str | None = Field(
        default=None, description="What the float32 products ran at (float32 … bf16x1)."
    )
    arithmetic_words: str | None = Field(default=None, description="The same, in words.")
