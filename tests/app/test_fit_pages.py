"""A fit search's pages, in-process: the form from the catalog's run form and from an
upload's page, a bad form kept with each field's problem, the live page (htmx every
2 s, a refresh without JavaScript, a cancel button), the table, the chart with each
target's HBM and the probes as points, and the .json and .csv twins."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import httpx
import pytest

from app.mcp.answers import fit_answer
from tests.app.fit_fakes import affine, aligned, play, probe_worker, symbolic_artifact

pytestmark = pytest.mark.anyio
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
GOOD = (
    "workload=attention&params=heads%3D8+seq_len%3D1024+head_dim%3D64&dimension=batch"
    "&lo=1&hi=256&step=1&targets=h100%3A1&targets=v6e%3A1x1"
)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


async def test_the_form_is_reached_from_the_catalog_and_names_the_integers(
    bench_client: httpx.AsyncClient,
) -> None:
    run_form = (await bench_client.get("/runs/new?workload=attention")).text
    assert 'href="/fits/new?workload=attention"' in run_form
    form = (await bench_client.get("/fits/new?workload=attention")).text
    assert 'name="dimension" value="batch"' in form
    for name in ("batch", "heads", "seq_len", "head_dim"):
        assert f'<option value="{name}">' in form
    assert 'value="v6e:1x1" checked' in form and 'value="h100:1" checked' in form


async def test_a_bad_form_comes_back_with_each_field_s_problem_and_its_values(
    bench_client: httpx.AsyncClient,
) -> None:
    bad = GOOD.replace("hi=256", "hi=1000").replace("dimension=batch", "dimension=batch")
    answer = await bench_client.post("/fits", content=bad, headers=FORM)
    assert answer.status_code == 422
    assert "range: " in answer.text and "1 ≤ batch ≤ 256" in answer.text
    assert 'value="1000"' in answer.text  # what was typed stays
    worse = GOOD.replace("lo=1", "lo=one").replace("&targets=h100%3A1&targets=v6e%3A1x1", "")
    answer = await bench_client.post("/fits", content=worse, headers=FORM)
    assert answer.status_code == 422
    assert (
        "from must be a whole number" in answer.text and "tick at least one target" in answer.text
    )


async def test_the_live_page_then_its_answer_chart_and_twins(
    bench_client: httpx.AsyncClient,
) -> None:
    created = await bench_client.post("/fits", content=GOOD, headers=FORM)
    assert created.status_code == 303, created.text
    page_url = created.headers["location"]
    fit_id = page_url.rsplit("/", 1)[1]
    live = (await bench_client.get(page_url)).text
    assert 'hx-trigger="every 2s"' in live and '<meta http-equiv="refresh" content="3">' in live
    assert f'action="/fits/{fit_id}/cancel"' in live
    assert "Search queued" in text(live)
    fragment = await bench_client.get(page_url, headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<div id="fit-live"')

    await play(await probe_worker(bench_client, ["h100:1", "v6e:1x1"]), affine(10**9, 3 * 10**8))
    done = (await bench_client.get(page_url)).text
    assert "every 2s" not in done and "Cancel the search" not in done
    words = text(done)
    assert "Search done" in words
    assert re.search(r"h100:1 \(jax-gpu\) 196 ", words), words
    assert "197 : 60.1 GB (60,100,000,000 bytes)" in words
    assert "fits when memory_analysis() peak ≤ 0.75 × 80 GB HBM3 = 60,000,000,000 bytes" in words
    assert "108 " in words and "refused by libtpu" in words
    svg = done.split('<svg class="fit-chart"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="limit hbm') == 2 and svg.count('class="limit usable') == 1
    points = re.findall(r'<circle[^>]*class="probe (fits|over) t\d"[^>]*data-value="(\d+)"', svg)
    api = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()
    probes = [p for t in api["targets"] for p in t["probes"]]
    assert len(points) == len(probes)
    assert sorted((v, k == "fits") for k, v in points) == sorted(
        (str(p["value"]), p["fits"]) for p in probes
    )
    assert (await bench_client.get(f"/fits/{fit_id}.json")).json() == api
    rows = list(csv.DictReader(io.StringIO((await bench_client.get(f"/fits/{fit_id}.csv")).text)))
    assert [(r["target"], r["largest_fitting"]) for r in rows] == [
        ("h100:1", "196"),
        ("v6e:1x1", "108"),
    ]
    assert rows[0]["peak_bytes_above"] == str(10**9 + 3 * 10**8 * 197)
    listed = (await bench_client.get("/fits")).text
    assert f'href="/fits/{fit_id}"' in listed


async def test_the_cancel_button_cancels_without_javascript(
    bench_client: httpx.AsyncClient,
) -> None:
    created = await bench_client.post("/fits", content=GOOD, headers=FORM)
    page_url = created.headers["location"]
    fit_id = page_url.rsplit("/", 1)[1]
    cancelled = await bench_client.post(f"/fits/{fit_id}/cancel", content="", headers=FORM)
    assert cancelled.status_code == 303 and cancelled.headers["location"] == page_url
    page = text((await bench_client.get(page_url)).text)
    assert "Search cancelled: cancelled on request" in page
    assert (await bench_client.get("/fits/nope")).status_code == 404


async def test_an_upload_s_page_leads_to_a_search_over_its_symbolic_dimension(
    bench_client: httpx.AsyncClient,
) -> None:
    up = await bench_client.post(
        "/api/v1/artifacts",
        params={"kind": "exported"},
        content=symbolic_artifact(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert up.status_code == 201, up.text
    sha = up.json()["sha256"]
    page = (await bench_client.get(f"/artifacts/{sha}")).text
    link = f"/fits/new?artifact={sha}&amp;dimension=b"
    assert f'href="{link}"' in page
    form = (await bench_client.get(link.replace("&amp;", "&"))).text
    assert f'name="artifact" value="{sha}"' in form and 'name="dimension" value="b"' in form
    body = f"artifact={sha}&dimension=b&lo=8&hi=65536&step=8&targets=b200%3A1"
    created = await bench_client.post("/fits", content=body, headers=FORM)
    assert created.status_code == 303, created.text
    grants: list[dict[str, Any]] = await play(
        await probe_worker(bench_client, ["b200:1"]), affine(10**9, 10**7), name="b"
    )
    assert all(g["spec"]["params"]["dims"]["b"] % 8 == 0 for g in grants)
    done = text((await bench_client.get(created.headers["location"])).text)
    assert "b200:1 (jax-gpu) 13,400 " in done  # 1e9 + 1e7 b ≤ 0.75 × 180 GB up to 13,400


async def test_a_peak_that_falls_is_flagged_checked_and_said_on_every_rendering(
    bench_client: httpx.AsyncClient,
) -> None:
    """Batches that are not multiples of 8 need 1.3 times the memory per batch: 151 fits,
    152 fits with less, 153 does not; the check of the rest finds 192."""
    search = {
        "workload": "attention",
        "params": {"heads": 8, "seq_len": 1024, "head_dim": 64},
        "dimension": "batch",
        "range": [1, 256],
        "targets": ["h100:1"],
    }
    fit_id = (await bench_client.post("/api/v1/fits", json=search)).json()["id"]
    peak = aligned(10**9, 3 * 10**8, 8, 1.3)
    await play(await probe_worker(bench_client, ["h100:1"]), peak)
    (target,) = (await bench_client.get(f"/api/v1/fits/{fit_id}")).json()["targets"]
    assert target["status"] == "found" and target["non_monotone"] is True
    assert target["largest_fitting"] == 192 == max(v for v in range(1, 257) if peak(v) <= 60e9)
    assert target["value_above"] == 193 and target["peak_bytes_above"] == peak(193)
    values = {p["value"]: p for p in target["probes"]}
    for low, high in target["non_monotone_probes"]:  # each pair shows the peak falling
        a, b = values[low], values[high]
        assert low < high and (b["peak_bytes"] < a["peak_bytes"] or (b["fits"] and not a["fits"]))
    assert {160, 192} <= {v for v, p in values.items() if p["fits"]}  # found by the check
    assert 0 < target["checks_done"] < target["probes_done"]

    words = text((await bench_client.get(f"/fits/{fit_id}")).text)
    assert "h100:1: Not monotone: the peak falls as batch grows" in words
    assert "192 (not monotone)" in words
    assert f"{target['probes_done'] - target['checks_done']} compiles + " in words
    rows = list(csv.DictReader(io.StringIO((await bench_client.get(f"/fits/{fit_id}.csv")).text)))
    assert rows[0]["non_monotone"] == "true" and rows[0]["checks_done"] == str(
        target["checks_done"]
    )
    # What the MCP tool answers: the flag, the pairs, and the sentence the page shows.
    (mcp,) = fit_answer((await bench_client.get(f"/api/v1/fits/{fit_id}")).json(), "x")["table"]
    assert mcp["non_monotone"] is True and mcp["non_monotone_probes"]
    assert mcp["warning"].startswith("Not monotone: the peak falls as batch grows")
