"""The server's side of an uploaded model: its names, which targets it fits, and every
refusal before a job is queued (422 naming the field: the target's device count, the
platform, an input rule's path, a sampled reference's result), the artifact page's
compiles through the one admission, and matrices whose target columns take it."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from app.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OCTET = {"Content-Type": "application/octet-stream"}


async def upload(client: httpx.AsyncClient, data: bytes, kind: str = "exported") -> str:
    r = await client.post("/api/v1/artifacts", params={"kind": kind}, content=data, headers=OCTET)
    assert r.status_code == 201, r.text
    sha: str = r.json()["sha256"]
    return sha


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


async def refused(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, str]:
    r = await client.post("/api/v1/jobs", json={"workload": "exported", **body})
    assert r.status_code == 422, r.text
    problem: dict[str, str] = r.json()["detail"][0]
    return problem


async def test_an_upload_names_its_arguments_and_results_by_path(
    client: httpx.AsyncClient, own_exports: dict[str, Any]
) -> None:
    train = own_exports["dp"]
    sha = await upload(client, train.artifact.read_bytes())
    header = (await client.get(f"/api/v1/artifacts/{sha}")).json()["header"]
    assert header["nr_devices"] == 8  # several devices and several results are accepted
    assert header["argument_names"] == train.summary["arguments"]
    assert header["result_names"] == train.summary["results"]
    page = (await client.get(f"/artifacts/{sha}")).text
    assert "opt_state/0/nu/embed/embedding" in page and "out2/0/count" in page
    assert "Compile for v6e-8, H100 ×8, B200 ×8" in page
    assert 'value="v6e:1x1"' not in page and 'value="b200:1"' not in page  # too few devices
    twin = (await client.get(f"/artifacts/{sha}.json")).json()
    assert [t["id"] for t in twin["fitting"]][:2] == ["v6e:2x4", "v6e:4x4"]
    assert twin["one_click"] == ["v6e:2x4", "h100:8", "b200:8"] and twin["fit"] == []


async def test_targets_are_refused_for_too_few_devices_or_another_platform(
    client: httpx.AsyncClient, own_exports: dict[str, Any], tmp_path: Path
) -> None:
    dp = await upload(client, own_exports["dp"].artifact.read_bytes())
    for target, count in (("b200:1", 1), ("v6e:1x1", 1), ("h100:4", 4)):
        path = "jax-tpu" if target.startswith("v6e") else "jax-gpu"
        problem = await refused(
            client, {"path": path, "target": target, "params": {"artifact": dp}}
        )
        assert problem["field"] == "target"
        assert f"exported for 8 devices and {target} has {count}" in problem["message"]
    from tests.workers.own_exports import export_program

    cpu_only = export_program("forward", tmp_path, "--platforms", "cpu")
    sha = await upload(client, cpu_only.artifact.read_bytes())
    problem = await refused(
        client, {"path": "jax-tpu", "target": "v6e:1x1", "params": {"artifact": sha}}
    )
    assert problem["field"] == "target" and problem["message"] == (
        "target: the artifact was exported for cpu only, and v6e:1x1 needs tpu: export it "
        "again with --platforms cpu,tpu"
    )
    ok = await client.post(
        "/api/v1/jobs",
        json={
            "workload": "exported",
            "path": "jax-tpu",
            "target": "v6e:2x4",
            "params": {"artifact": dp},
        },
    )
    assert ok.status_code == 202, ok.text
    cpu = await client.post(
        "/api/v1/jobs", json={"workload": "exported", "path": "jax-cpu", "params": {"artifact": dp}}
    )
    assert cpu.status_code == 202  # it waits for a worker with 8 (virtual) CPU devices
    assert (
        "with 8 devices" in (await client.get(f"/api/v1/jobs/{cpu.json()['id']}")).json()["reason"]
    )


@pytest.mark.parametrize(
    ("rules", "field", "words"),
    [
        ({"tokens": {"kind": "gaussian"}}, "tokens", "unknown kind 'gaussian'"),
        ({"tokenz": {"kind": "zeros"}}, "tokenz", "did you mean: tokens"),
        (
            {"params/ln_f/scale": {"kind": "int", "low": 0, "high": 3}},
            "params/ln_f/scale",
            "int on params/ln_f/scale, which is float32[32]",
        ),
        ({"tokens": {"kind": "int", "low": 9, "high": 2}}, "tokens", "low 9 must be below high 2"),
    ],
)
async def test_input_rules_are_refused_naming_the_argument_path(
    client: httpx.AsyncClient,
    own_exports: dict[str, Any],
    rules: dict[str, Any],
    field: str,
    words: str,
) -> None:
    sha = await upload(client, own_exports["forward"].artifact.read_bytes())
    body = {"path": "jax-cpu", "params": {"artifact": sha, "input_rules": rules}}
    problem = await refused(client, body)
    assert problem["field"] == f"params.input_rules.{field}" and words in problem["message"]


async def test_a_sampled_reference_is_checked_against_the_results(
    client: httpx.AsyncClient, own_exports: dict[str, Any]
) -> None:
    train = own_exports["train"]
    sha = await upload(client, train.artifact.read_bytes())
    good = await upload(client, train.sample.read_bytes(), "npz")
    ok = await client.post(
        "/api/v1/jobs",
        json={
            "workload": "exported",
            "path": "jax-cpu",
            "params": {"artifact": sha, "reference": good},
        },
    )
    assert ok.status_code == 202, ok.text
    by_path = await upload(  # members named by path, whole or sampled
        client,
        npz(
            **{
                "out1/ln_f/scale.indices": np.array([0, 99], np.int64),
                "out1/ln_f/scale.values": np.zeros(2, np.float32),
            }
        ),
        "npz",
    )
    problem = await refused(
        client, {"path": "jax-cpu", "params": {"artifact": sha, "reference": by_path}}
    )
    assert problem["field"] == "params.reference"
    assert (
        "out1/ln_f/scale: index 99 is out of range for a result of 32 elements"
        in problem["message"]
    )
    short = await upload(
        client,
        npz(**{"out0.indices": np.array([0], np.int64), "out0.values": np.zeros(2, np.float32)}),
        "npz",
    )
    problem = await refused(
        client, {"path": "jax-cpu", "params": {"artifact": sha, "reference": short}}
    )
    assert "out0: 1 indices but 2 values" in problem["message"]
    sneaky = await client.post(
        "/api/v1/artifacts",
        params={"kind": "npz"},
        content=npz(**{"../x": np.ones(1)}),
        headers=OCTET,
    )
    assert sneaky.status_code == 422


@pytest.fixture
async def slow_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """An app that lets one client queue two jobs a minute."""
    from app.main import create_app

    settings = Settings(DB=tmp_path / "db.sqlite3", CACHE_DIR=tmp_path / "jax", SUBMIT_RATE=2)
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def test_the_page_queues_one_compile_per_target_through_one_admission(
    slow_client: httpx.AsyncClient, own_exports: dict[str, Any]
) -> None:
    sha = await upload(slow_client, own_exports["dp"].artifact.read_bytes())  # one of two
    three = "target=v6e:2x4&target=h100:8&target=b200:8"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = await slow_client.post(f"/artifacts/{sha}/compile", content=three, headers=form)
    assert r.status_code == 429  # three jobs do not pass a rate that allows one more
    assert "submissions a minute" in r.text
    assert (await slow_client.get("/api/v1/jobs")).json()["count"] == 0  # none, not some
    r = await slow_client.post(f"/artifacts/{sha}/compile", content="target=h100:8", headers=form)
    assert r.status_code == 303 and r.headers["location"] == f"/artifacts/{sha}?target=h100:8#fit-h"
    jobs = (await slow_client.get("/api/v1/jobs")).json()["data"]
    assert [(j["target"], j["stages"], j["path"]) for j in jobs] == [
        ("h100:8", ["compile"], "jax-gpu")
    ]
    page = (await slow_client.get(f"/artifacts/{sha}")).text
    assert 'data-target="h100:8"' in page and "queued" in page
    fragment = (await slow_client.get(f"/artifacts/{sha}/fit")).text
    assert fragment.startswith('<div id="fit-table"') and 'hx-trigger="every 2s"' in fragment


async def test_matrix_target_columns_take_an_artifact_where_its_devices_fit(
    client: httpx.AsyncClient, own_exports: dict[str, Any]
) -> None:
    forward = await upload(client, own_exports["forward"].artifact.read_bytes())
    dp = await upload(client, own_exports["dp"].artifact.read_bytes())
    spec = {
        "workload": "exported",
        "axis": {"name": "artifact", "values": [forward, dp]},
        "targets": ["v6e:1x1", "v6e:2x4", "h100:8"],
    }
    r = await client.post("/api/v1/matrices", json=spec)
    assert r.status_code == 201, r.text
    matrix = (await client.get(f"/api/v1/matrices/{r.json()['id']}")).json()
    cells = {(c["row"], c["col"]): c for row in matrix["rows"] for c in row["cells"]}
    assert all(cells[(0, col)]["status"] == "queued" for col in range(3))  # forward: all
    assert cells[(1, 0)]["status"] == "not run"
    assert "exported for 8 devices and v6e:1x1 has 1" in cells[(1, 0)]["reason"]
    assert cells[(1, 1)]["status"] == cells[(1, 2)]["status"] == "queued"


async def test_a_run_names_its_arguments_and_each_results_check(
    bench_client: httpx.AsyncClient, own_exports: dict[str, Any], tmp_path: Path
) -> None:
    from tests.app.test_artifacts import run_one
    from workers.files import FileCache

    train = own_exports["train"]
    sha = await upload(bench_client, train.artifact.read_bytes())
    sample = await upload(bench_client, train.sample.read_bytes(), "npz")
    params = {"artifact": sha, "reference": sample, "input_rules": train.rules}
    r = await bench_client.post(
        "/api/v1/jobs",
        json={
            "workload": "exported",
            "path": "jax-cpu",
            "params": params,
            "measure": {"samples": 3},
        },
    )
    assert r.status_code == 202, r.text
    job = await run_one(bench_client, FileCache(tmp_path / "files"))
    assert job["run"]["correctness"]["passed"]
    page = (await bench_client.get(f"/runs/{job['id']}")).text
    assert "Arguments and results" in page
    assert f"{len(train.summary['results'])} results, each checked on its own" in page
    count = page.split('data-result="out2/0/count"', 1)[1].split("</tr>", 1)[0]
    assert "passed" in count and "1 sampled element<" in count  # a scalar: all of it
    kernel = page.split('data-result="out1/blocks/0/attn/key/kernel"', 1)[1].split("</tr>")[0]
    assert "passed" in kernel and "64 sampled elements" in kernel
    assert "opt_state/0/nu/embed/embedding" in page and "drawn under the job" in page
