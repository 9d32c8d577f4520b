"""A profiled run's timeline, on the server: the viewer's copy of a real trace, the
download left byte for byte, and a content security policy loosened for the vendored
viewer's own files only. (What a person sees in the viewer: tests/browser.)"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import threading
from html import unescape
from typing import Any

import httpx
import pytest

from app.pages.runs.timeline import TraceTooLarge, viewer_trace
from app.pages.runs.trace_threads import CALL
from app.web.security import EMPTY_STYLE_HASH, VIEWER_PREFIX
from tests.app.bench_fakes import FakeWorker
from tests.app.ir_runs import post_run

pytestmark = pytest.mark.anyio

PROFILED = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 128, "n": 128, "k": 128},
    "measure": {"samples": 4, "profile": True},
}


@pytest.fixture(scope="module")
def profiled() -> dict[str, Any]:
    """A real run of the CPU path with the JAX profiler on, as a worker posts it."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    return run_job(JobSpec.model_validate(PROFILED)).model_dump(mode="json")


def chrome_member(run: dict[str, Any]) -> bytes:
    """The profiler's own `.trace.json.gz`, out of the archive the worker sent."""
    data = base64.b64decode(run["profile"]["data_b64"])
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        (name,) = [n for n in tar.getnames() if n.endswith(".trace.json.gz")]
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


async def test_the_timeline_reads_a_viewer_copy_and_the_download_is_untouched(
    bench_client: httpx.AsyncClient, profiled: dict[str, Any]
) -> None:
    original = chrome_member(profiled)
    job_id = await post_run(bench_client, profiled)
    page = unescape((await bench_client.get(f"/runs/{job_id}")).text)
    assert f'href="/runs/{job_id}/profile/timeline">Open the timeline' in page
    timeline = (await bench_client.get(f"/runs/{job_id}/profile/timeline")).text
    viewer = f"{VIEWER_PREFIX}index.html#profileURL=%2Fruns%2F{job_id}%2Fprofile%2Ftrace.json"
    assert f'src="{viewer}"' in unescape(timeline)

    download = await bench_client.get(f"/runs/{job_id}/profile/perfetto.json.gz")
    assert download.content == original  # the profiler's file, byte for byte

    copy = await bench_client.get(f"/runs/{job_id}/profile/trace.json")
    assert copy.headers["content-type"] == "application/json"
    events = copy.json()["traceEvents"]  # sent gzip-encoded; httpx inflates it as a browser does
    before = json.loads(gzip.decompress(original))["traceEvents"]
    assert any("ph" not in e for e in before) and all("ph" in e for e in events)
    calls = [e for e in events if e.get("ph") == "X" and str(e.get("name")).startswith(CALL)]
    assert calls
    # The thread that ran most of XLA:CPU's ops opens first: the first process, thread 0.
    assert max(op_time(events).items(), key=lambda kv: kv[1])[0] == (1, 0)
    assert not any("run_id" in (e.get("args") or {}) for e in events)
    # The profiler stopping is left out, the program's work is not: every XLA op stays (a
    # call's last op may begin after the call returned), and nothing begins after them.
    ops = [e for e in events if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {})]
    assert len(ops) == sum(1 for e in before if "hlo_op" in (e.get("args") or {})) > 0
    last_work = max(e["ts"] + e["dur"] for e in [*calls, *ops])
    assert all(e["ts"] <= last_work for e in events if e.get("ph") == "X")
    # Every event kept is one of the profiler's, in its order, with its own times.
    kept = [(e["name"], e.get("ts"), e.get("dur")) for e in events]
    theirs = [(e["name"], e.get("ts"), e.get("dur")) for e in before if "ph" in e]
    it = iter(theirs)
    assert all(any(k == t for t in it) for k in kept)


def op_time(events: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """(pid, tid) → its time in events that name an XLA op, in µs."""
    found: dict[tuple[int, int], float] = {}
    for e in events:
        if e.get("ph") == "X" and "hlo_op" in (e.get("args") or {}):
            key = (e["pid"], e["tid"])
            found[key] = found.get(key, 0.0) + e.get("dur", 0)
    return found


async def test_a_run_without_a_trace_has_no_timeline_page(bench_client: httpx.AsyncClient) -> None:
    from tests.app.ir_runs import attention_result

    job_id = await post_run(bench_client, attention_result())
    page = await bench_client.get(f"/runs/{job_id}/profile/timeline")
    assert page.status_code == 404
    html = unescape(page.text)
    assert "This run has no trace" in html and f'href="/runs/{job_id}">Back to the run' in html
    missing = await bench_client.get("/runs/no-such-run/profile/timeline")
    assert missing.status_code == 404 and "No such run" in missing.text


def test_a_trace_too_large_for_the_viewer_is_refused_and_junk_is_not_a_trace() -> None:
    trace = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "a"}] * 100}).encode())
    with pytest.raises(TraceTooLarge):
        viewer_trace(trace, max_bytes=200)
    with pytest.raises(ValueError, match="not gzip"):
        viewer_trace(b"not a trace")
    with pytest.raises(ValueError, match="no traceEvents"):
        viewer_trace(gzip.compress(b"[1, 2]"))


async def test_only_the_viewers_own_files_get_its_loosened_policy(
    client: httpx.AsyncClient,
) -> None:
    viewer = await client.get(f"{VIEWER_PREFIX}index.html")
    assert viewer.status_code == 200 and "speedscope" in viewer.text
    policy = viewer.headers["content-security-policy"]
    assert "script-src 'self' 'wasm-unsafe-eval';" in policy
    assert f"style-src 'self' {EMPTY_STYLE_HASH};" in policy
    for never in ("unsafe-inline", "unsafe-eval'", "blob:", "http"):
        assert never not in policy.replace("wasm-unsafe-eval", ""), never
    licence = await client.get(f"{VIEWER_PREFIX}LICENSE")
    assert "MIT License" in licence.text and "Jamie Wong" in licence.text
    for other in ("/", "/static/app.css", "/guide"):
        policy = (await client.get(other)).headers["content-security-policy"]
        assert "wasm-unsafe-eval" not in policy and EMPTY_STYLE_HASH not in policy, other


def packed_trace(chrome_json: bytes) -> bytes:
    """A profiler archive (.tar.gz) holding `chrome_json` as its gzip Chrome member."""
    member = gzip.compress(chrome_json, compresslevel=9)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("plugins/profile/r/host.trace.json.gz")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    return buffer.getvalue()


async def test_a_trace_that_inflates_far_past_its_size_is_not_stored(
    bench_client: httpx.AsyncClient,
) -> None:
    event = b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1},'
    chrome = b'{"traceEvents":[' + event * (4 * 2**20 // len(event)) + b"{}]}"
    archive = packed_trace(chrome)
    assert len(archive) < 4096 < 2**20 < len(chrome)  # a few kB that inflate to 4 MB
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=PROFILED)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    profile = {
        "size": len(archive),
        "sha256": hashlib.sha256(archive).hexdigest(),
        "files": ["plugins/profile/r/host.trace.json.gz"],
        "perfetto": "plugins/profile/r/host.trace.json.gz",
        "covers": "the timed calls",
        "data_b64": base64.b64encode(archive).decode(),
    }
    assert (await worker.finish(grant, profile=profile)).status_code == 200
    run = (await bench_client.get(f"/api/v1/jobs/{job_id}")).json()["run"]
    assert run["profile"] is None
    (warning,) = [w for w in run["warnings"] if w.startswith("profile:")]
    assert "inflates to over 1,048,576 bytes" in warning, warning
    assert "100 times" in warning, warning
    for url in ("/profile", "/profile/trace.json", "/profile/perfetto.json.gz"):
        assert (await bench_client.get(f"/runs/{job_id}{url}")).status_code == 404
    page = unescape((await bench_client.get(f"/runs/{job_id}")).text)
    assert "the trace was not stored" in page


async def test_the_viewer_copy_is_made_off_the_event_loop(
    bench_client: httpx.AsyncClient, profiled: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.routes import runs

    threads: list[str] = []

    def watched(stored: bytes, *rest: Any) -> bytes:  # the real conversion, its thread noted
        threads.append(threading.current_thread().name)
        return viewer_trace(stored, *rest)

    monkeypatch.setattr(runs, "viewer_trace", watched)
    job_id = await post_run(bench_client, profiled)
    copy = await bench_client.get(f"/runs/{job_id}/profile/trace.json")
    assert copy.status_code == 200 and copy.json()["traceEvents"]
    assert threads and threads[0] != threading.current_thread().name
