"""Required dependencies of the suite: a missing one fails the test that needs it.

A test that cannot run without a tool or package (NVRTC, JAX's CUDA plugin, libtpu, a
SASS disassembler, a C++ compiler) calls `require(name, hint)` when it finds the
dependency missing. The test then fails with the hint, so a venv that lost a package
fails the suite instead of passing with fewer tests. A machine that cannot have it says
so by name: `BOUNDARY_ALLOW_MISSING=nvrtc,libtpu` turns those failures into skips that
give the reason. Only tests that need a GPU or TPU device skip on their own.
"""

from __future__ import annotations

import os

import pytest

ALLOW_ENV = "BOUNDARY_ALLOW_MISSING"
"""Comma-separated dependency names whose absence skips instead of failing."""


def allowed_missing() -> frozenset[str]:
    """The names `BOUNDARY_ALLOW_MISSING` lists."""
    raw = os.environ.get(ALLOW_ENV, "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def require(name: str, hint: str) -> None:
    """The dependency `name` is missing: fail the calling test with `hint`, or skip it
    with the same words when `BOUNDARY_ALLOW_MISSING` names it."""
    if name in allowed_missing():
        pytest.skip(f"{name} is missing ({hint}); allowed by {ALLOW_ENV}")
    pytest.fail(
        f"required dependency {name} is missing: {hint}. "
        f"Install it, or set {ALLOW_ENV}={name} on a machine that cannot have it.",
        pytrace=False,
    )
