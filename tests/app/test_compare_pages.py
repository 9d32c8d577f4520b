"""/compare in-process: reachable from a run page, a ratio with its interval for a fair pair
(including one with no measurable difference), no ratio for an unfair one, repeats
queued through the same checks as the API, the IR diff, and the decision record.

Runs are made by the real engine (JAX on the CPU) and posted by a worker played through
the worker API; where a test needs side B to be a different device that is faster, its
runs are real runs relabelled and with their samples halved.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import httpx
import pytest

from app.pages.compare.decision import DecisionRecord
from tests.app.bench_fakes import FakeWorker, capabilities
from workers.measure.stats import summarize
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.anyio

SPEC: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 48, "n": 40, "k": 32},
    "measure": {"samples": 6},
}


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    """Three independent real runs of SPEC, and one of a bigger matmul."""
    spec = JobSpec.model_validate(SPEC)
    found = [run_job(spec).model_dump(mode="json") for _ in range(3)]
    bigger = copy.deepcopy(SPEC)
    bigger["params"]["m"] = 64
    found.append(run_job(JobSpec.model_validate(bigger)).model_dump(mode="json"))
    return found


def faster_elsewhere(result: dict[str, Any]) -> dict[str, Any]:
    """The run relabelled as made on another device that took half the time."""
    out = copy.deepcopy(result)
    for m in out["measurements"]:
        m["samples_s"] = [s * 0.5 for s in m["samples_s"]]
        m["stats"] = summarize(m["samples_s"]).model_dump()
    out["environment"]["device_kind"] = "a faster CPU"
    return out


async def finish(
    client: httpx.AsyncClient, worker: FakeWorker, spec: dict[str, Any], result: dict[str, Any]
) -> str:
    """Submit `spec` through the API, lease it and post `result` for it; the job id. A
    result made on another device kind is posted by a worker registered with that kind
    (the server refuses a run whose environment is not its worker's)."""
    env = result["environment"]
    if env["device_kind"] != worker.caps["device_kind"]:
        platform = "gpu" if env["platform"] == "gpu" else "cpu"
        caps = capabilities(platform, device_kind=env["device_kind"])
        worker = FakeWorker(client, caps)
        await worker.register()
    r = await client.post("/api/v1/jobs", json=spec)
    assert r.status_code == 202, r.text
    grant = await worker.lease()
    assert grant is not None and grant["job_id"] == r.json()["id"]
    body = {
        "worker_id": worker.id,
        "job_id": grant["job_id"],
        "attempt": grant["attempt"],
        "result": {**result, "job": grant["spec"]},
    }
    posted = await worker.post("result", body)
    assert posted.status_code == 200, posted.text
    return str(grant["job_id"])


@pytest.fixture
async def worker(bench_client: httpx.AsyncClient) -> FakeWorker:
    w = FakeWorker(bench_client)
    await w.register()
    return w


async def sides(
    client: httpx.AsyncClient, worker: FakeWorker, a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    ids_a = [await finish(client, worker, SPEC, r) for r in a]
    ids_b = [await finish(client, worker, SPEC, r) for r in b]
    return ids_a, ids_b


def query(a: list[str], b: list[str]) -> str:
    return f"a={','.join(a)}&b={','.join(b)}"


async def test_compare_is_reachable_from_a_run_page(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    (first, second), _ = await sides(bench_client, worker, results[:2], [])
    page = await bench_client.get(f"/runs/{first}")
    assert f'href="/compare?a={first}"' in page.text and "Compare with…" in page.text
    picker = await bench_client.get(f"/compare?a={first}")
    assert picker.status_code == 200
    assert f"/compare?a={first},{second}" in picker.text  # the same spec: offered as a repeat
    assert "Side A lacks 2 repeats" in picker.text


async def test_a_fair_pair_prints_a_ratio_with_its_interval(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    # One real run posted three times a side keeps this machine's run-to-run noise (tens
    # of percent for so small a matmul) out of a test about what the page prints.
    a, b = await sides(bench_client, worker, results[:1] * 3, [faster_elsewhere(results[0])] * 3)
    data = (await bench_client.get(f"/compare.json?{query(a, b)}")).json()
    assert data["guard"]["comparable"] is True
    assert [e["variable"] for e in data["guard"]["experimental"]] == ["device"]
    result = data["result"]
    assert result["ratio"] == pytest.approx(0.5)
    assert result["low"] <= 0.5 <= result["high"] < 1.0
    assert not result["no_difference"]
    assert set(result["noise_floor"]) == {"A", "B"}
    assert result["over"].startswith("3 runs of A and 3 of B")
    html = (await bench_client.get(f"/compare?{query(a, b)}")).text
    assert "B is faster" in html and "95% interval" in html and "A/A noise floor" in html
    assert 'class="dists"' in html and html.count('class="run-median"') == 6


async def test_a_pair_with_no_measurable_difference_says_so(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    # The same three real runs on each side: an A/A comparison by construction.
    a, b = await sides(bench_client, worker, results[:3], results[2::-1])
    data = (await bench_client.get(f"/compare.json?{query(a, b)}")).json()
    assert data["result"]["no_difference"] is True
    assert data["result"]["low"] <= 1.0 <= data["result"]["high"]
    html = (await bench_client.get(f"/compare?{query(a, b)}")).text
    assert "No measurable difference" in html
    assert "is faster" not in html and "is slower" not in html
    assert "A/A comparison" in html
    assert "Identical" in html  # both sides compiled to the same HLO
    assert "Like with like" not in html and html.count('class="panel verdict') == 1
    assert data["verdict"]["kind"] == "a/a"


async def test_compile_times_get_the_a_a_noise_floor_too(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    """The finding: an A/A comparison showed compile medians of 74.5 and 6.8 ms side by
    side with no word of doubt. Cold compiles of five identical runs ranged 5.4–104.7 ms."""

    def compiled_in(result: dict[str, Any], ms: float) -> dict[str, Any]:
        out = copy.deepcopy(result)
        out["stage_seconds"]["compile"] = ms / 1e3
        return out

    side_a = [compiled_in(r, ms) for r, ms in zip(results[:3], (5.4, 74.5, 104.7), strict=True)]
    side_b = [compiled_in(r, ms) for r, ms in zip(results[:3], (6.8, 6.1, 98.2), strict=True)]
    a, b = await sides(bench_client, worker, side_a, side_b)
    data = (await bench_client.get(f"/compare.json?{query(a, b)}")).json()
    (row,) = [r for r in data["stages"] if r["stage"] == "compile"]
    assert (row["a"], row["b"]) == ("74.500 ms", "6.800 ms")
    assert row["ratio"] == pytest.approx(6.8 / 74.5)
    assert row["sentence"].startswith("No measurable difference in compile time")
    assert "A/A noise floor" in row["sentence"]
    html = (await bench_client.get(f"/compare?{query(a, b)}")).text
    assert "No measurable difference in compile time" in html
    assert "compile time ratio" not in html


async def test_a_change_of_path_and_version_is_not_called_like_with_like(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    other = copy.deepcopy(results[0])
    other["environment"].update(jax_version="0.0.1", platform="gpu", device_kind="NVIDIA H200")
    gpu_spec = {**SPEC, "path": "jax-gpu"}
    gpu_worker = FakeWorker(bench_client, capabilities("gpu"))
    await gpu_worker.register()
    a = [await finish(bench_client, worker, SPEC, results[0]) for _ in range(3)]
    b = [await finish(bench_client, gpu_worker, gpu_spec, other) for _ in range(3)]
    data = (await bench_client.get(f"/compare.json?{query(a, b)}")).json()
    assert data["verdict"]["kind"] == "several"
    html = (await bench_client.get(f"/compare?{query(a, b)}")).text
    assert "More than one variable changed" in html and "Like with like" not in html


async def test_the_picker_offers_only_runs_it_can_put_on_side_b(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    a = [await finish(bench_client, worker, SPEC, r) for r in results[:3]]
    other = await finish(bench_client, worker, SPEC, results[0])
    compiled = {**SPEC, "stages": ["compile"]}
    untimed = copy.deepcopy(results[0])
    untimed["measurements"] = []
    compile_only = await finish(bench_client, worker, compiled, untimed)
    html = (await bench_client.get(f"/compare?a={','.join(a)}")).text
    offered = re.findall(r'<td><a href="/runs/([0-9a-f]+)">', html)
    assert offered == [other]  # not the runs on side A, not the compile-only run
    assert compile_only not in offered
    assert "Side A has at least 3 runs" in html and "Each side has" not in html
    assert "<td>1 × CPU</td>" in html


async def test_compare_without_a_query_says_how_to_start(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    empty = await bench_client.get("/compare")
    assert empty.status_code == 200 and "No run has finished on this server yet" in empty.text
    (a,), _ = await sides(bench_client, worker, results[:1], [])
    page = await bench_client.get("/compare")
    assert page.status_code == 200 and f'href="/compare?a={a}"' in page.text
    missing = await bench_client.get("/compare?a=0123456789abcdef")
    assert missing.status_code == 404 and "no run &#39;0123456789abcdef&#39;" in missing.text
    assert "Valid paths" not in missing.text and '<nav aria-label="Site">' in missing.text


async def test_a_bad_price_keeps_the_form_and_names_the_field(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    a, b = await sides(bench_client, worker, results[:1] * 3, [faster_elsewhere(results[0])] * 3)
    fields = {"a": ",".join(a), "b": ",".join(b), "title": "keep me", "price_a": "abc"}
    page = await bench_client.get(
        "/compare/decision.md", params=fields, headers={"Accept": "text/html"}
    )
    assert page.status_code == 422
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="e-d-pa"' in page.text and "is no number" in page.text
    assert 'value="keep me"' in page.text and 'value="abc"' in page.text
    assert 'type="number"' in page.text


async def test_an_unfair_pair_explains_and_prints_no_ratio(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    bigger = copy.deepcopy(SPEC)
    bigger["params"]["m"] = 64
    a = [await finish(bench_client, worker, SPEC, r) for r in results[:3]]
    b = [await finish(bench_client, worker, bigger, results[3]) for _ in range(3)]
    data = (await bench_client.get(f"/compare.json?{query(a, b)}")).json()
    assert data["result"]["ratio"] is None
    assert data["guard"]["mismatches"] == [
        {"variable": "params.m", "a": "48", "b": "64", "why": data["guard"]["mismatches"][0]["why"]}
    ]
    assert data["verdict"]["kind"] == "refused"
    html = (await bench_client.get(f"/compare?{query(a, b)}")).text
    assert "Not comparable: no ratio is printed" in html
    assert "B/A time ratio" not in html
    # One verdict: a refused pair is not also called an A/A comparison, offers no repeats
    # to queue and no decision to record.
    assert html.count('class="panel verdict') == 1
    assert "A/A" not in html and "Nothing differs" not in html
    assert "Queue the missing repeats" not in html and "Queue more repeats" not in html
    assert 'id="decision-form"' not in html and "/compare/decision." not in html
    refused = await bench_client.get(f"/compare/decision.json?{query(a, b)}")
    assert refused.status_code == 422 and "not comparable" in refused.text
    diff = data["diff"]
    assert diff["name"] == "hlo" and not diff["identical"]
    assert diff["added"] > 0 and any("f32[64,40]" in row["right"] for row in diff["rows"])


async def test_missing_repeats_are_queued_with_the_same_spec(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    (a,), (b,) = await sides(bench_client, worker, results[:1], [faster_elsewhere(results[0])])
    page = await bench_client.get(f"/compare?runs={a},{b}")
    assert "Side A lacks 2 repeats; Side B lacks 2 repeats." in page.text
    assert "A ratio needs at least 3 finished, valid runs a side" in page.text
    r = await bench_client.post("/compare/repeat", data={"a": a, "b": b, "side": "both"})
    assert r.status_code == 303
    location = r.headers["location"]
    side_a, side_b = re.match(r"/compare\?a=([^&]+)&b=(.+)", location).groups()  # type: ignore[union-attr]
    assert side_a.split(",")[0] == a and len(side_a.split(",")) == 3
    assert side_b.split(",")[0] == b and len(side_b.split(",")) == 3
    queued = (await bench_client.get("/api/v1/jobs?status=queued")).json()["data"]
    assert len(queued) == 4
    assert all(j["params"] == SPEC["params"] for j in queued)
    pending = await bench_client.get(location)
    assert 'hx-trigger="every 3s"' in pending.text and "2 pending" in pending.text
    # While the repeats wait, the page waits: a queued run has no device yet, which is no
    # mixed side and no reason to refuse the comparison.
    assert "Waiting for 4 repeats to finish" in pending.text
    assert "Not comparable" not in pending.text and "mixes configurations" not in pending.text
    # The heading counts side A first: 3 runs of A against 1 of B.
    uneven = await bench_client.get(f"/compare?a={side_a}&b={b}")
    assert "matmul: 3 runs against 1</h1>" in uneven.text


async def test_a_run_can_be_repeated_with_the_profiler_on(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    (a,), _ = await sides(bench_client, worker, results[:1], [])
    r = await bench_client.post(f"/runs/{a}/repeat", data={"profile": "on"})
    assert r.status_code == 303
    new_id = r.headers["location"].rsplit("/", 1)[1]
    job = (await bench_client.get(f"/api/v1/jobs/{new_id}")).json()
    assert job["measure"]["profile"] is True and job["params"] == SPEC["params"]


async def test_the_decision_record_round_trips(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    a, b = await sides(bench_client, worker, results[:1] * 3, [faster_elsewhere(results[0])] * 3)
    notes = {
        "title": "Move the projection to the faster CPU",
        "bottleneck": "the contraction is compute-bound at this size",
        "deployment_scale": "batch 4096 on 16 hosts",
        "holds": "no",
        "engineering_cost": "two days to port the runner",
        "operating_cost": "one more host class to run",
        "price_a": "3.6",
        "price_b": "7.2",
    }
    fields = {"a": ",".join(a), "b": ",".join(b), **notes}
    got = await bench_client.get("/compare/decision.json", params=fields)
    assert got.status_code == 200, got.text
    record = DecisionRecord.model_validate_json(got.text)
    assert record.model_dump_json(indent=2) == got.text  # JSON → record → the same JSON
    assert DecisionRecord.model_validate(json.loads(got.text)) == record
    assert record.bottleneck == notes["bottleneck"] and record.holds_at_deployment == "no"
    assert record.correctness_within_tolerance and record.comparable
    assert "hardware" in record.layer_changed  # named from the experimental variable
    side_a, side_b = record.sides
    assert side_a.median_s is not None and side_b.median_s is not None
    assert side_a.cost_per_call == pytest.approx(3.6 * side_a.median_s / 3600)
    assert side_b.cost_per_call == pytest.approx(7.2 * side_b.median_s / 3600)
    assert [r.id for r in record.runs] == a + b
    assert all(r.environment["platform"] == "cpu" for r in record.runs)

    md = (await bench_client.get("/compare/decision.md", params=fields)).text
    for name, value in record.model_dump().items():
        if name == "created_at":
            continue  # a second request: the clock may have ticked over a second
        if isinstance(value, str):
            assert value in md, name
    assert "Recorded 20" in md
    # Calls an hour in whole calls with separators, never "1.24183e+06".
    row = next(line for line in md.splitlines() if line.startswith("| A |"))
    assert f"{side_a.calls_per_hour:,.0f}" in row and "e+" not in row
    for key, value in record.controlled.items():
        assert f"{key}: {value}" in md
    for run in record.runs:
        assert run.url in md and json.dumps(run.environment, sort_keys=True) in md
    assert f"{side_a.cost_per_call:.6g}" in md and f"{side_b.cost_per_million_calls:.6g}" in md
    assert record.interval is not None and f"{record.interval[0]:.6g}" in md
    for side, pct in record.noise_floor_pct.items():
        assert f"side {side}: ±{pct:.2f} %" in md


async def test_bad_input_names_its_field(
    bench_client: httpx.AsyncClient, worker: FakeWorker, results: list[dict[str, Any]]
) -> None:
    (a,), (b,) = await sides(bench_client, worker, results[:1], results[1:2])
    page = await bench_client.get("/compare?a=not%20an%20id")
    assert page.status_code == 422 and "a: &#39;not an id&#39; is not a run id" in page.text
    r = await bench_client.get(f"/compare.json?runs={a}")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "runs"
    assert (await bench_client.get(f"/compare.json?a={a}&b=0123456789abcdef")).status_code == 404
    bad_price = await bench_client.get(f"/compare/decision.json?a={a}&b={b}&price_a=cheap")
    assert bad_price.status_code == 422 and bad_price.json()["detail"][0]["field"] == "price_a"
    bad_holds = await bench_client.get(f"/compare/decision.md?a={a}&b={b}&holds=maybe")
    assert bad_holds.status_code == 422 and bad_holds.json()["detail"][0]["field"] == "holds"
    one_side = await bench_client.get(f"/compare/decision.json?a={a}")
    assert one_side.status_code == 422 and one_side.json()["detail"][0]["field"] == "b"
