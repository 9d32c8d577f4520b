"""What every client of the API shares: a refusal in the API's own words, and a wait that
rides out a server restart (connections refused, then a proxy's 503) and stops at its
timeout or when the server stays away too long."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from workers.export.api_client import Refused, ServerLost, refusal_text, wait_ended


def answered(status: int, body: Any = None, **headers: str) -> httpx.Response:
    request = httpx.Request("GET", "http://server/api/v1/jobs/j")
    return httpx.Response(status, json=body, headers=headers, request=request)


def test_a_refusal_names_each_field_once_and_when_to_try_again() -> None:
    detail = [
        {"field": "params.m", "message": "must be at most 16384"},
        {"field": "target", "message": "target: 'v6e:3x3' is not a v6e slice that is sold"},
        {"field": None, "message": "the body is not a job"},
    ]
    assert refusal_text(answered(422, {"detail": detail})) == (
        "HTTP 422: params.m: must be at most 16384; target: 'v6e:3x3' is not a v6e slice "
        "that is sold; the body is not a job"
    )
    full = answered(429, {"detail": "queue full"}, **{"Retry-After": "5"})
    assert refusal_text(full) == "HTTP 429: queue full (retry after 5 s)"
    text = httpx.Response(502, text="Bad Gateway", request=full.request)
    assert refusal_text(text) == "HTTP 502: Bad Gateway"


class Restarting:
    """A server that is down for `down` requests (connections refused), then answers 503
    once (a proxy before it is up), then reports the job's statuses in turn."""

    def __init__(self, down: int, statuses: list[str]) -> None:
        self.down, self.statuses, self.calls = down, statuses, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.calls == self.down + 1:
            return httpx.Response(503, text="starting", request=request)
        status = self.statuses[min(self.calls - self.down - 2, len(self.statuses) - 1)]
        return httpx.Response(200, json={"id": "j", "status": status}, request=request)


def wait(server: Any, **options: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        transport = httpx.MockTransport(server)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            return await wait_ended(client, "/api/v1/jobs/j", pauses_s=(0.01, 0.02), **options)

    return anyio.run(go)


def test_the_wait_rides_out_a_restart_and_returns_the_final_answer() -> None:
    server = Restarting(down=3, statuses=["running", "running", "done"])
    lost: list[str] = []
    seen: list[str] = []
    final = wait(server, lost=lost.append, seen=lambda a: seen.append(a["status"]))
    assert final == {"id": "j", "status": "done"}
    assert lost == ["connection refused"] * 3 + ["HTTP 503"]
    assert seen == ["running", "running", "done"]


def test_the_wait_gives_up_past_its_patience_and_returns_at_its_timeout() -> None:
    with pytest.raises(ServerLost, match="connection refused"):
        wait(Restarting(down=10**6, statuses=["done"]), patience_s=0.1)
    assert wait(Restarting(down=0, statuses=["queued"]), timeout_s=0.1)["status"] == "queued"


def test_any_other_refusal_ends_the_wait_in_the_apis_words() -> None:
    def gone(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "no job 'j'"}, request=request)

    with pytest.raises(Refused, match=r"^HTTP 404: no job 'j'$") as refused:
        wait(gone)
    assert refused.value.status == 404
