"""The /mcp endpoint in-process, driven by the MCP SDK's own client over an ASGI transport:
off unless BOUNDARY_MCP=1; its tools described for an assistant; every refusal the HTTP
API's own message as a tool error (no token, a wrong token, a bad target, a parameter over
its cap); a timed run with no capable worker answered at once with the reason it waits;
the reader's cards as resources that cite their sources; answers cut to their bound, and
saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from app.main import create_app
from app.mcp.bounds import MAX_ANSWER_CHARS, bounded
from app.settings import Settings
from tests.app.mcp_clients import mcp_client

pytestmark = pytest.mark.anyio

TOKEN = "mcp-test-submit-token"
MATMUL = {"workload": "matmul", "target": "h100:1", "params": {"m": 256, "n": 256, "k": 256}}
TOOLS = {"list_targets", "list_workloads", "compile", "get_ir", "memory", "compare", "fit", "run"}


def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(DB=tmp_path / "db.sqlite3", CACHE_DIR=tmp_path / "jax-cache", **extra)


@pytest.fixture
def guarded(tmp_path: Path) -> Any:
    """An app with /mcp on and a submission token, and no worker."""
    return create_app(_settings(tmp_path, MCP=True, SUBMIT_TOKEN=TOKEN))


async def _refusal(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.content
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text
    return text


async def test_mcp_is_off_unless_the_setting_turns_it_on(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        off = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert off.status_code == 404


async def test_the_tools_are_described_for_an_assistant(guarded: Any) -> None:
    async with mcp_client(guarded, TOKEN) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 60
        assert tool.input_schema["type"] == "object"
    compile_args = tools["compile"].input_schema["properties"]
    assert {"target", "workload", "artifact", "params", "timeout_s"} <= set(compile_args)
    assert "v6e:2x4" in compile_args["target"]["description"]
    assert tools["get_ir"].input_schema["properties"]["max_chars"]["maximum"] <= 16_000


async def test_without_the_token_submission_is_refused_as_the_api_refuses_it(
    guarded: Any,
) -> None:
    async with mcp_client(guarded) as client:
        missing = await _refusal(client, "compile", MATMUL)
        assert "HTTP 401" in missing and "job submission: missing bearer token" in missing
        listed = await client.call_tool("list_targets", {})  # reads need none, as on the API
        assert not listed.is_error
    async with mcp_client(guarded, "a-wrong-token-of-some-length") as client:
        said = await _refusal(client, "fit", {"workload": "attention", "targets": ["h100:1"]})
        assert "HTTP 401" in said and "wrong bearer token" in said
    with_curl = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guarded), base_url="http://testserver"
    )
    async with with_curl:
        api = await with_curl.post("/api/v1/jobs", json={**MATMUL, "path": "jax-gpu"})
    assert api.status_code == 401 and api.json()["detail"] in missing  # the API's own words


async def test_a_bad_target_and_a_value_over_its_cap_are_named(guarded: Any) -> None:
    async with mcp_client(guarded, TOKEN) as client:
        said = await _refusal(client, "compile", {**MATMUL, "target": "v6e:3x3"})
        assert "HTTP 422" in said and "target: 'v6e:3x3' is not a v6e slice that is sold" in said
        over = {**MATMUL, "params": {"m": 10**6}}
        said = await _refusal(client, "compile", over)
        assert "params.m: m must be at most 16384 (allowed: 1 ≤ m ≤ 16384)" in said
        said = await _refusal(client, "list_workloads", {"workload": "nothing"})
        assert "no workload 'nothing'" in said and "matmul" in said
        said = await _refusal(client, "get_ir", {"run_id": "0123456789abcdef"})
        assert "HTTP 404" in said and "no job '0123456789abcdef'" in said


async def test_a_timed_run_with_no_capable_worker_answers_at_once_with_the_reason(
    guarded: Any,
) -> None:
    async with mcp_client(guarded, TOKEN) as client:
        result = await client.call_tool("run", {**MATMUL, "timeout_s": 600})
    assert not result.is_error, result.content
    answer = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert answer["status"] == "queued" and answer["measurements"] == []
    assert "no worker for jax-gpu on 1 real NVIDIA H100 SXM" in answer["reason"]
    assert answer["address"].endswith(f"/runs/{answer['run_id']}")


async def test_the_reader_cards_are_resources_that_cite_their_sources(guarded: Any) -> None:
    async with mcp_client(guarded) as client:
        listed = (await client.list_resources()).resources
        uris = {str(r.uri) for r in listed}
        assert len(uris) == 9 and "boundary://cards/jax-tpu/compile" in uris
        read = await client.read_resource("boundary://cards/jax-tpu/compile")
    text = read.contents[0].text  # type: ignore[union-attr]
    assert text.startswith("# JAX on TPU v6e")
    assert "## Sources" in text and "https://docs.jax.dev/" in text
    assert "http://testserver/read/jax-tpu/compile" in text


def test_an_answer_over_the_bound_is_cut_and_says_its_whole_size() -> None:
    buffers = [{"bytes": i, "shape": "f32[1024,1024]", "source": "model.py:12"} for i in range(900)]
    answer = {"run_id": "r", "buffers": buffers, "note": "x" * 30_000}
    whole = len(json.dumps(answer, ensure_ascii=False, separators=(", ", ": ")))
    text = bounded(answer)
    cut = json.loads(text)
    assert len(text) <= MAX_ANSWER_CHARS < whole
    assert cut["truncated"] is True and cut["total_chars"] == whole
    assert cut["run_id"] == "r" and cut["buffers"][0] == buffers[0]
    assert 0 < len(cut["buffers"]) < 900 and cut["note"].endswith("[cut]")
    small = {"run_id": "r"}
    assert json.loads(bounded(small)) == small  # nothing cut, nothing said
