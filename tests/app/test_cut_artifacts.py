"""Cut means cut: a worker cuts IR text to exactly the server's cap, so the server cannot
tell it from a whole text of that size; the worker says which it cut (`artifacts_cut`),
the result gate keeps only names of artifacts the run has, and the API, the run's pages
and the MCP tool `get_ir` all say the stored text is only the beginning."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.bench_fakes import MATMUL, FakeWorker, run_result
from tests.app.built import build_app
from tests.app.mcp_clients import mcp_client, tool_text
from workers.agent.link import cap_artifacts

pytestmark = pytest.mark.anyio

CAP = 64 * 1024
LONG_HLO = "HloModule m\n" + "".join(
    f"  %add.{i} = f32[8]{{0}} add(f32[8]{{0}} %p, f32[8]{{0}} %p)\n" for i in range(2000)
)


def test_the_worker_cuts_to_exactly_the_cap_and_says_which() -> None:
    result = {"artifacts": {"hlo": LONG_HLO, "jaxpr": "{ lambda ; a. }", "ptx": None}}
    capped = cap_artifacts(result, CAP)
    assert len(capped["artifacts"]["hlo"].encode()) == CAP < len(LONG_HLO.encode())
    assert capped["artifacts_cut"] == ["hlo"]
    whole = cap_artifacts({"artifacts": {"hlo": "HloModule m\n"}}, CAP)
    assert "artifacts_cut" not in whole


@pytest.fixture
def app(bench_settings: Settings) -> Any:
    return build_app(bench_settings.model_copy(update={"ARTIFACT_MAX_BYTES": CAP, "MCP": True}))


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def run_posted(client: httpx.AsyncClient, **changes: Any) -> str:
    """A job whose worker posts `run_result` with `changes` (through the worker's own cap);
    its id once its run is stored."""
    worker = FakeWorker(client)
    await worker.register()
    assert (await client.post("/api/v1/jobs", json=MATMUL)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    result = cap_artifacts(run_result(grant["spec"]) | changes, CAP)
    body = {"worker_id": worker.id, "job_id": grant["job_id"], "result": result}
    posted = await worker.post("result", body)
    assert posted.status_code == 200, posted.text
    job_id: str = grant["job_id"]
    return job_id


async def test_a_text_the_worker_cut_reads_as_cut_everywhere(
    app: Any, client: httpx.AsyncClient
) -> None:
    artifacts = {"jaxpr": "{ lambda ; a b. }", "hlo": LONG_HLO}
    job_id = await run_posted(client, artifacts=artifacts)
    download = await client.get(f"/api/v1/jobs/{job_id}/artifacts/hlo")
    assert len(download.content) == CAP  # exactly the cap: only the mark tells it was cut
    assert download.headers["x-boundary-truncated"] == "true"
    run = (await client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    assert run["artifacts_cut"] == ["hlo"]
    page = (await client.get(f"/runs/{job_id}/ir/hlo")).text
    assert f"only the first {CAP:,} bytes of this hlo were kept" in page
    assert "Download (as kept)" in page
    assert "only its beginning kept" in (await client.get(f"/runs/{job_id}")).text
    whole = (await client.get(f"/runs/{job_id}/ir/jaxpr")).text
    assert "were kept" not in whole and "Download (complete)" in whole
    missing = await client.get(f"/runs/{job_id}/ir/workers")  # what this run has, only
    assert missing.status_code == 404 and "this run has hlo, jaxpr)" in missing.text
    async with mcp_client(app) as mcp:
        refused, text = await tool_text(mcp, "get_ir", {"run_id": job_id, "artifact": "hlo"})
    answer = json.loads(text)
    assert not refused and answer["stored_truncated"] is True
    assert answer["cut"] == f"only the first {CAP:,} bytes were kept: the text stops there"


async def test_a_whole_text_reads_whole_and_only_names_the_run_has_are_kept(
    client: httpx.AsyncClient,
) -> None:
    exact = "HloModule m\n" + "x" * (CAP - len("HloModule m\n"))
    marks = ["ptx", "../workers", "hlo", "hlo"]
    job_id = await run_posted(client, artifacts={"hlo": exact}, artifacts_cut=marks)
    run = (await client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    assert run["artifacts_cut"] == ["hlo"]  # ptx: this run has none; the rest: no artifact
    other = await run_posted(client, artifacts={"hlo": exact})  # the same size, not cut
    download = await client.get(f"/api/v1/jobs/{other}/artifacts/hlo")
    assert len(download.content) == CAP and "x-boundary-truncated" not in download.headers
    assert (await client.get(f"/api/v1/jobs/{other}")).json()["run"]["artifacts_cut"] == []
