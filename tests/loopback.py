"""HTTP from the tests to the servers they start on 127.0.0.1.

httpx's module-level functions (`httpx.get`, `httpx.post`, `httpx.stream`) build a client
for each call, and every client httpx builds loads the CA bundle into a TLS context of its
own (about 22 ms of CPU) though no request here uses TLS: the tests' polling loops built
thousands, some 45 s of a full run's CPU. These do the same, a client and a connection
per call (so no test's connection counts change), with one TLS context for the process.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

TLS = ssl.create_default_context()
"""The one context every client here is given (unused on http://, as every URL here is)."""


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=TLS, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=TLS, **kwargs)


def stream(method: str, url: str, **kwargs: Any) -> Any:
    return httpx.stream(method, url, verify=TLS, **kwargs)


def Client(**kwargs: Any) -> httpx.Client:
    return httpx.Client(verify=TLS, **kwargs)
