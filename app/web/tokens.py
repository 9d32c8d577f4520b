"""Tokens: one reading of `Authorization: Bearer <token>` and one constant-time
comparison, for the worker endpoints (the body limit and the worker API) and for job
submission (admission and the upload form)."""

from __future__ import annotations

import hmac


def bearer_of(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header's value, or None."""
    scheme, _, given = authorization.partition(" ")
    return given if scheme.lower() == "bearer" else None


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Whether `presented` is the token, compared in constant time (surrounding spaces
    ignored); never when the server has no token to compare with."""
    if presented is None or expected is None:
        return False
    return hmac.compare_digest(presented.strip().encode(), expected.encode())
