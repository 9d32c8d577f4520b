"""The artifact page's "Does it fit?" table compares like with like: every row is a
compile at the same values of the symbolic dimensions (named on the table and on each
row), a target's compiles at other values are linked from its row or listed apart, and
a fit search's probes, newer as they are, never take a row: they are counted and linked
to their search."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.app.fit_fakes import affine, play, probe_worker, symbolic_artifact

pytestmark = [pytest.mark.anyio]
OCTET = {"Content-Type": "application/octet-stream"}
PEAK = affine(10**9, 10**7)


async def compile_at(client: httpx.AsyncClient, sha: str, target: str, b: int) -> str:
    path = "jax-tpu" if target.startswith("v6e") else "jax-gpu"
    params = {"artifact": sha, "dims": {"b": b}}
    job = {"workload": "exported", "path": path, "target": target, "stages": ["compile"]}
    queued = await client.post("/api/v1/jobs", json={**job, "params": params})
    assert queued.status_code == 202, queued.text
    job_id: str = queued.json()["id"]
    return job_id


async def test_the_table_compares_compiles_at_the_same_values_and_keeps_probes_apart(
    bench_client: httpx.AsyncClient,
) -> None:
    up = await bench_client.post(
        "/api/v1/artifacts", params={"kind": "exported"}, content=symbolic_artifact(), headers=OCTET
    )
    assert up.status_code == 201, up.text
    sha = up.json()["sha256"]
    worker = await probe_worker(bench_client, ["h100:1", "b200:1", "v6e:1x1"])
    older = await compile_at(bench_client, sha, "h100:1", 8)
    await compile_at(bench_client, sha, "v6e:1x1", 16)
    shown = {t: await compile_at(bench_client, sha, t, 64) for t in ("h100:1", "b200:1")}
    search = {"artifact": sha, "dimension": "b", "range": [8, 4096], "step": 8}
    fit = await bench_client.post("/api/v1/fits", json={**search, "targets": ["h100:1"]})
    assert fit.status_code == 202, fit.text
    fit_id = fit.json()["id"]
    await play(worker, PEAK, name="b")
    probes = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()["targets"][0]["probes"]

    page: dict[str, Any] = (await bench_client.get(f"/artifacts/{sha}.json")).json()
    assert page["fit_compared"] == "b=64"
    assert [(r["target"], r["options"], r["job"]) for r in page["fit"]] == [
        ("b200:1", "b=64", shown["b200:1"]),
        ("h100:1", "b=64", shown["h100:1"]),
    ]
    assert page["fit"][1]["variants"] == [
        {"options": "b=8", "link": f"/runs/{older}", "target": "h100:1"}
    ]
    assert page["fit_elsewhere"] == [
        {"options": "b=16", "link": page["fit_elsewhere"][0]["link"], "target": "v6e:1x1"}
    ]
    (apart,) = page["fit_probes"]
    assert apart["link"] == f"/fits/{fit_id}" and apart["probes"] == len(probes)
    values = sorted(p["value"] for p in probes)
    assert apart["span"] == f"{values[0]:,} to {values[-1]:,}"
    assert {p["run_id"] for p in probes}.isdisjoint(r["job"] for r in page["fit"])

    html = (await bench_client.get(f"/artifacts/{sha}")).text
    table = html.split('id="fit-table"', 1)[1].split("</div>\n</section>", 1)[0]
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", table))
    assert "every row at b=64 :" in words
    assert words.count("compiled with b=64") == 2
    assert "Compiled at other values or options, not compared here: v6e:1x1 with b=16" in words
    assert f'href="/fits/{fit_id}"' in table and "Kept apart: the probes of" in words

    # A newer compile at other values takes the table there, for every target at them.
    newest = await compile_at(bench_client, sha, "b200:1", 8)
    await play(worker, PEAK, name="b")
    page = (await bench_client.get(f"/artifacts/{sha}.json")).json()
    assert page["fit_compared"] == "b=8"
    assert [(r["target"], r["job"]) for r in page["fit"]] == [
        ("b200:1", newest),
        ("h100:1", older),
    ]
    assert page["fit"][1]["compare"] == f"/compare?a={newest}&b={older}&ir=hlo"
