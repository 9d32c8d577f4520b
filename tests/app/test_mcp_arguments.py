"""MCP tools as an assistant uses them, in-process: an id is never a path (`../workers`,
`A/../B` get a 404-style refusal naming the argument, and no traceback in the log); a
NaN or 1e999 is refused naming its field; a refused `get_ir` lists what this run has;
`compare` with an unknown run says so; `compile` takes `compiler_options` and answers
with them and the `dims` it compiled with; `memory` lists the buffers live at the peak."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.bench_fakes import MATMUL, FakeWorker, capabilities
from tests.app.built import build_app
from tests.app.fit_fakes import symbolic_artifact
from tests.app.mcp_clients import mcp_client, tool_text
from workers.protocol import JobSpec

pytestmark = pytest.mark.anyio

COMPILE = {"workload": "matmul", "target": "h100:1", "params": {"m": 256, "n": 256, "k": 256}}


@pytest.fixture
def app(bench_settings: Settings) -> Any:
    return build_app(bench_settings.model_copy(update={"MCP": True}))


@pytest.fixture
async def client(app: Any) -> Any:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as c:
        yield c


async def finished(client: httpx.AsyncClient, spec: dict[str, Any], **result: Any) -> str:
    """A job of `spec` leased and finished by a worker (with `result`'s fields); its id."""
    assert (await client.post("/api/v1/jobs", json=spec)).status_code == 202
    worker = FakeWorker(client, capabilities("cpu", targets=[]))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    assert (await worker.finish(grant, **result)).status_code == 200
    return str(grant["job_id"])


async def test_ids_are_checked_before_they_reach_a_url(
    app: Any, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    run = await finished(client, MATMUL)
    async with mcp_client(app) as mcp:
        with caplog.at_level(logging.INFO):
            refused, said = await tool_text(
                mcp, "get_ir", {"run_id": run, "artifact": "../../../workers"}
            )
            assert refused and said.endswith(
                f"artifact: run {run} has no artifact '../../../workers' "
                "(it has hlo, jaxpr, stablehlo)"
            )
            refused, said = await tool_text(mcp, "memory", {"run_id": f"{run}/../{run}"})
            assert refused and said.endswith(
                f"run_id: no run '{run}/../{run}' on this server (HTTP 404)"
            )
            refused, said = await tool_text(mcp, "compile", {"run_id": "../workers"})
            assert refused and said.endswith(
                "run_id: no run '../workers' on this server (HTTP 404)"
            )
            refused, said = await tool_text(mcp, "get_ir", {"run_id": run, "artifact": "ptx"})
            assert refused and "(it has hlo, jaxpr, stablehlo)" in said  # the API's, this run's
            refused, said = await tool_text(mcp, "compare", {"a": run, "b": "0123456789abcdef"})
            assert refused and said.endswith(
                "b: no run '0123456789abcdef' on this server (HTTP 404)"
            )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def raw_call(app: Any, tool: str, arguments: str) -> tuple[bool, str]:
    """A tools/call whose arguments are JSON text as a client wrote it (the SDK's own client
    writes NaN as null): whether it was refused, and its text."""
    body = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", '
        f'"params": {{"name": "{tool}", "arguments": {arguments}}}}}'
    )
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        answer = (await http.post("/mcp", content=body, headers=headers)).json()["result"]
    text: str = answer["content"][0]["text"]
    assert "Traceback" not in text
    return bool(answer["isError"]), text


async def test_a_nan_or_1e999_is_refused_naming_its_field(app: Any) -> None:
    matmul = '"workload": "matmul", "target": "h100:1"'
    refused, said = await raw_call(app, "compile", f'{{{matmul}, "params": {{"k": 1e999}}}}')
    assert refused and said.endswith("params.k: inf is not a finite number (NaN and 1e999 are not)")
    refused, said = await raw_call(app, "compile", f'{{{matmul}, "params": {{"m": NaN}}}}')
    assert refused and said.endswith("params.m: nan is not a finite number (NaN and 1e999 are not)")
    measure = '"workload": "matmul", "measure": {"samples": 1e999}'
    refused, said = await raw_call(app, "run", f"{{{measure}}}")
    assert refused and "measure.samples: inf is not a finite number" in said
    refused, said = await raw_call(app, "compile", f'{{{matmul}, "timeout_s": NaN}}')
    assert refused and "timeout_s" in said


async def test_compile_takes_compiler_options_and_answers_them_with_its_dims(
    app: Any, client: httpx.AsyncClient
) -> None:
    upload = await client.post(
        "/api/v1/artifacts",
        params={"kind": "exported"},
        content=symbolic_artifact(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert upload.status_code == 201, upload.text
    options = {"xla_gpu_enable_triton_gemm": False}
    arguments = {"artifact": upload.json()["sha256"], "target": "h100:1", "timeout_s": 0,
                 "params": {"dims": {"b": 64}}, "compiler_options": options}  # fmt: skip
    async with mcp_client(app) as mcp:
        refused, said = await tool_text(mcp, "compile", arguments)
    answer = json.loads(said)
    assert not refused and answer["status"] == "queued"
    assert answer["compiler_options"] == options and answer["dims"] == {"b": 64}
    job = (await client.get(f"/api/v1/jobs/{answer['run_id']}")).json()
    assert job["compiler_options"] == options and job["params"]["dims"] == {"b": 64}


async def test_memory_lists_the_buffers_live_at_the_peak(
    app: Any, client: httpx.AsyncClient
) -> None:
    from workers.run.engine import run_job

    spec = {"workload": "attention", "measure": {"samples": 3},
            "params": {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32}}  # fmt: skip
    compiled = run_job(JobSpec.model_validate(spec)).model_dump(mode="json")
    run = await finished(client, spec, **compiled)
    report = (await client.get(f"/api/v1/runs/{run}/memory")).json()
    live = [b for b in report["buffers"] if b["live_at_peak"]]
    assert live and len(live) < len(report["buffers"])  # some are not live at the peak
    async with mcp_client(app) as mcp:
        refused, said = await tool_text(mcp, "memory", {"run_id": run, "top": 50})
    answer = json.loads(said)
    assert not refused and answer["buffers_live_at_peak"] == len(live)
    listed = [(b["bytes"], b["kind"], b["shape"]) for b in answer["top_buffers"]]
    assert listed == [(b["bytes"], b["kind"], b["shape"]) for b in live][:50]
    assert answer["reason"] is None and answer["peak_bytes"] == report["peak_bytes"]
    bare = await finished(client, MATMUL)  # a run whose worker sent no report: why, not 404
    async with mcp_client(app) as mcp:
        refused, said = await tool_text(mcp, "memory", {"run_id": bare})
    assert not refused and "has no memory report" in json.loads(said)["reason"]
