"""What the tests do when something they need from the machine is missing.

A missing required dependency fails the test that needs it, with how to install it,
unless BOUNDARY_ALLOW_MISSING (names separated by commas or spaces) names it: the test is
then skipped, and the skip says why. Only GPU tests skip otherwise.
"""

from __future__ import annotations

import os

import pytest


def allowed_missing() -> set[str]:
    """The names BOUNDARY_ALLOW_MISSING lists."""
    raw = os.environ.get("BOUNDARY_ALLOW_MISSING", "")
    return {name for name in raw.replace(",", " ").split() if name}


def require(name: str, hint: str) -> None:
    """`name` is missing: fail with `hint`, or skip when BOUNDARY_ALLOW_MISSING names it."""
    if name in allowed_missing():
        pytest.skip(f"{name} is missing and BOUNDARY_ALLOW_MISSING names it: {hint}")
    pytest.fail(f"{name} is missing: {hint}", pytrace=False)
