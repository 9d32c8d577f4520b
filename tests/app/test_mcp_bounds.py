"""/mcp bounded as the API is: GET and DELETE get 405 (no endless stream in stateless
mode); a POST body has the API's deadline and minimum rate (408); a tool call ends with
its client (the wait for a job is cancelled when the client disconnects), and the waits
one client may hold are capped with its streams."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from app.settings import Settings
from tests.app.built import build_app, state_of
from tests.app.mcp_clients import mcp_client, tool_text

pytestmark = pytest.mark.anyio

COMPILE = {"workload": "matmul", "target": "h100:1", "params": {"m": 256, "n": 256, "k": 256}}
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def tools_call(arguments: dict[str, Any], tool: str = "compile") -> bytes:
    """A JSON-RPC tools/call as an assistant's client posts it."""
    call = {"name": tool, "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode()


Receive = Callable[[], Awaitable[dict[str, Any]]]


async def post_mcp(app: Any, receive: Receive, address: str = "127.0.0.1") -> list[int]:
    """POST /mcp to `app` with the body `receive` gives (and the disconnect it may say);
    the statuses answered."""
    answered: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    headers = [(k.lower().encode(), v.encode()) for k, v in JSON.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": (address, 40000),
        "server": ("testserver", 80),
    }
    await app(scope, receive, send)
    return answered


def then_gone(body: bytes, gone: anyio.Event) -> Receive:
    """The whole body, then the client's disconnect once `gone` is set."""
    parts = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


@pytest.fixture
def app(bench_settings: Settings) -> Any:
    return build_app(bench_settings.model_copy(update={"MCP": True}))


async def wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.01)


async def test_get_and_delete_get_405_and_open_no_stream(app: Any) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        for method in ("GET", "DELETE"):
            r = await http.request(method, "/mcp", headers={"Accept": "text/event-stream"})
            assert r.status_code == 405 and r.headers["allow"] == "POST"
            assert "stateless" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/mcp", "/api/v1/jobs"])
async def test_a_body_a_byte_at_a_time_gets_408_as_on_the_api(
    bench_settings: Settings, path: str
) -> None:
    settings = bench_settings.model_copy(
        update={"MCP": True, "BODY_TIMEOUT_S": 0.3, "BODY_MIN_RATE": 100}
    )
    app = build_app(settings)
    body = tools_call(COMPILE)

    async def a_byte_at_a_time() -> dict[str, Any]:
        await anyio.sleep(0.02)  # the client's own pace: 50 bytes a second
        return {"type": "http.request", "body": b" ", "more_body": True}

    answered: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": headers, "client": ("127.0.0.1", 4),
             "server": ("testserver", 80), "scheme": "http", "root_path": "",
             "asgi": {"version": "3.0"}, "http_version": "1.1"}  # fmt: skip
    with anyio.fail_after(10):
        await app(scope, a_byte_at_a_time, send)
    assert answered == [408]


async def test_a_tool_call_ends_when_its_client_disconnects(app: Any) -> None:
    state = state_of(app)
    gone = anyio.Event()
    answered: list[int] = []

    async def call() -> None:
        answered.extend(await post_mcp(app, then_gone(tools_call(waiting), gone)))

    waiting = {**COMPILE, "timeout_s": 600}
    with anyio.fail_after(20):  # its 600 s wait is cancelled, not run out
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            # The job is queued (no worker) and the call waits for it, holding one stream.
            await wait_until(lambda: state.dispatcher.store.count_queued() == 1)
            await wait_until(lambda: state.streams is not None and state.streams.count() == 1)
            gone.set()
    assert answered == []  # nobody to answer
    assert state.streams is not None and state.streams.count() == 0
    assert state.dispatcher.store.count_queued() == 1  # the job itself stays queued


async def test_the_waits_one_client_holds_are_capped_with_its_streams(
    bench_settings: Settings,
) -> None:
    app = build_app(bench_settings.model_copy(update={"MCP": True, "MAX_STREAMS_PER_CLIENT": 2}))
    state = state_of(app)
    gone = anyio.Event()
    waiting = tools_call({**COMPILE, "timeout_s": 600})
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(post_mcp, app, then_gone(waiting, gone))
            await wait_until(lambda: state.streams is not None and state.streams.count() == 2)
            async with mcp_client(app) as client:
                refused, text = await tool_text(client, "compile", {**COMPILE, "timeout_s": 30})
                assert refused and text.startswith("Error executing tool compile: timeout_s: ")
                assert "this client has 2 live streams and waiting tool calls open" in text
                refused, text = await tool_text(client, "compile", {**COMPILE, "timeout_s": 0})
                assert not refused and json.loads(text)["status"] == "queued"  # no slot held
            async with mcp_client(app, address="10.0.0.9") as other:
                refused, text = await tool_text(other, "compile", {**COMPILE, "timeout_s": 0.2})
                assert not refused and json.loads(text)["next"].startswith("still running")
            gone.set()
    assert state.streams is not None and state.streams.count() == 0
