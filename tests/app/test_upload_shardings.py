"""An uploaded program's shardings as a person reads them: the test model's train step
exported over 8 virtual CPU devices (`boundary export-fn --devices 8`, a fresh process),
its batch split over the mesh axis `data` and its weights replicated. The artifact page,
its JSON twins and the run page of a compile of it name the mesh and each argument's
sharding, read from the artifact's header by the server (no jax)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import AUTH, FakeWorker, capabilities
from tests.workers.own_exports import Exported, export_program

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OCTET = {"Content-Type": "application/octet-stream"}
SPLIT = "P('data',) dim 0 split 8 ways over data; int32[1,16] on each device"
REPLICATED = "P() replicated: all of it on each of 8 devices"


@pytest.fixture(scope="module")
def dp(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The train step on a mesh of 8 (tests/workers/own_model.py's dp_example)."""
    return export_program("dp", tmp_path_factory.mktemp("dp"))


async def upload(client: httpx.AsyncClient, data: bytes) -> str:
    r = await client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=data, headers=OCTET
    )
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


def cell(page: str, table: str, name: str) -> str:
    """The text of the sharding cell of row `name` in the table of class `table`."""
    rows = page.split(f'class="stats {table}"', 1)[1].split("</table>", 1)[0]
    row = rows.split(f"<code>{name}</code>", 1)[1].split("</tr>", 1)[0]
    found = re.search(r'<td class="sharding">(.*?)</td>', row, re.S)
    assert found, row
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", found[1])).split())


async def test_the_api_names_the_mesh_and_each_arguments_sharding(
    client: httpx.AsyncClient, dp: Exported
) -> None:
    sha = await upload(client, dp.artifact.read_bytes())
    header = (await client.get(f"/api/v1/artifacts/{sha}")).json()["header"]
    assert header["nr_devices"] == 8
    assert header["meshes"] == [
        {"axis_names": ["data"], "axis_sizes": [8], "axis_types": ["auto"], "text": "data: 8"}
    ]
    by_name = dict(zip(header["argument_names"], header["in_shardings"], strict=True))
    tokens = by_name["tokens"]
    assert tokens["spec"] == ["data"] and tokens["spec_text"] == "P('data',)"
    assert tokens["words"] == "dim 0 split 8 ways over data; int32[1,16] on each device"
    weights = by_name["params/blocks/0/attn/key/kernel"]
    assert weights["specified"] and weights["spec"] == [] and weights["mesh"] == "data: 8"
    # The step's results were left to the compiler: said so, never invented.
    assert {s["words"] for s in header["out_shardings"]} == {"not specified: the compiler chooses"}
    twin = (await client.get(f"/artifacts/{sha}.json")).json()
    assert twin["mesh"] == "data: 8"
    row = next(a for a in twin["arguments"] if a["name"] == "tokens")
    assert row["aval"] == "int32[8,16]" and row["sharding"]["spec_text"] == "P('data',)"


async def test_the_artifact_page_shows_the_mesh_and_each_sharding(
    client: httpx.AsyncClient, dp: Exported
) -> None:
    sha = await upload(client, dp.artifact.read_bytes())
    page = (await client.get(f"/artifacts/{sha}")).text
    assert '<th scope="row">mesh</th><td class="mesh">data: 8</td>' in page
    assert cell(page, "named-arguments", "tokens") == SPLIT
    assert cell(page, "named-arguments", "params/embed/embedding") == REPLICATED
    assert cell(page, "named-results", "out0") == "not specified: the compiler chooses"


async def test_a_program_of_one_device_has_no_sharding_column(
    client: httpx.AsyncClient,
) -> None:
    from tests.app.test_artifacts import export

    sha = await upload(client, export(["cpu"]))
    page = (await client.get(f"/artifacts/{sha}")).text
    assert '<th scope="col">shape</th></tr>' in page
    assert 'class="sharding"' not in page and 'class="mesh"' not in page
    twin = (await client.get(f"/artifacts/{sha}.json")).json()
    assert twin["mesh"] is None


async def test_the_run_page_of_a_compile_shows_each_arguments_sharding(
    bench_client: httpx.AsyncClient, dp: Exported, tmp_path: Path
) -> None:
    from workers.files import FileCache
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    sha = await upload(bench_client, dp.artifact.read_bytes())
    spec = {"path": "jax-gpu", "target": "h100:8", "stages": ["compile"]}
    r = await bench_client.post(
        "/api/v1/jobs", json={"workload": "exported", **spec, "params": {"artifact": sha}}
    )
    assert r.status_code == 202, r.text
    # A worker that compiles for H100 ×8 without the hardware, played here for real.
    worker = FakeWorker(bench_client, capabilities("cpu", targets=["h100:8"]))
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    files = FileCache(tmp_path / "files")
    got = await bench_client.get(f"/api/v1/worker/files/{sha}", headers=AUTH)
    assert files.put(got.content) == sha
    result: Any = run_job(JobSpec.model_validate(grant["spec"]), files_dir=files.directory)
    body = {
        "worker_id": worker.id,
        "job_id": grant["job_id"],
        "attempt": grant["attempt"],
        "result": result.model_dump(mode="json"),
        "run_seconds": 0.1,
    }
    reply = await worker.post("result", body)
    assert reply.status_code == 200, reply.text
    page = (await bench_client.get(f"/runs/{grant['job_id']}")).text
    assert "each placed on the mesh data: 8 of 8 devices" in page
    assert cell(page, "named-arguments", "tokens") == SPLIT
    assert cell(page, "named-arguments", "opt_state/0/mu/embed/embedding") == REPLICATED
