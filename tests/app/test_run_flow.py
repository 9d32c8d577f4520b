"""What a new user meets in the run flow, in-process: the form starts on what a connected
worker can do and says why, ticks only the stages it can do, sends `kernel` only for the
CUDA path, keeps measurement options across a change of workload, lands on the run page,
and cancels; error pages are site pages in their section's words."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.bench_fakes import FakeWorker, capabilities

pytestmark = pytest.mark.anyio


def selected_path(html: str) -> str:
    select = html[html.index('name="path"') :]
    found = re.search(r'<option value="([a-z-]+)" selected>', select)
    assert found, "no path selected"
    return found.group(1)


def ticked_stages(html: str) -> list[str]:
    return re.findall(r'name="stages" value="([a-z]+)" checked', html)


async def test_the_form_starts_on_a_path_a_connected_worker_runs(
    bench_client: httpx.AsyncClient,
) -> None:
    await FakeWorker(bench_client).register()  # a CPU worker: jax-cpu only
    html = (await bench_client.get("/runs/new?path=jax-gpu")).text
    assert selected_path(html) == "jax-cpu"
    assert "No connected worker runs jax-gpu, so the form starts on jax-cpu" in html
    assert 'id="path-note"' in html
    # A path a worker runs is kept as asked, without a note.
    html = (await bench_client.get("/runs/new?path=jax-cpu")).text
    assert selected_path(html) == "jax-cpu" and 'id="path-note"' not in html
    # Picked in the form itself (shown_path is sent), the user's path stands, with a warning.
    html = (await bench_client.get("/runs/new?path=jax-gpu&shown_path=jax-cpu")).text
    assert selected_path(html) == "jax-gpu" and "No connected worker runs jax-gpu." in html


async def test_only_stages_a_connected_worker_can_do_are_ticked(
    bench_client: httpx.AsyncClient,
) -> None:
    caps = capabilities("cpu", paths=["jax-cpu", "cuda"], cuda_compile=True, cuda_run=False)
    await FakeWorker(bench_client, caps).register()
    html = (await bench_client.get("/runs/new?path=cuda")).text
    assert selected_path(html) == "cuda"
    assert ticked_stages(html) == ["compile"]
    assert "can compile for cuda but not execute it" in html
    assert "Connected workers offer: jax-cpu, cuda (compile only)." in html  # as /workers says
    html = (await bench_client.get("/runs/new?path=jax-cpu")).text
    assert ticked_stages(html) == ["compile", "execute"]


async def test_kernel_offers_each_paths_own_implementations(
    bench_client: httpx.AsyncClient,
) -> None:
    def options(html: str, name: str) -> list[str]:
        found = re.search(rf'name="param.{name}">(.*?)</select>', html, re.S)
        return re.findall(r"<option[^>]*>([^<]+)</option>", found.group(1)) if found else []

    cpu = (await bench_client.get("/runs/new?path=jax-cpu")).text
    assert options(cpu, "kernel") == ["xla", "pallas"]
    assert 'name="param.block_m"' in cpu and 'name="param.pallas_backend"' not in cpu
    gpu = (await bench_client.get("/runs/new?path=jax-gpu&shown_path=jax-gpu")).text
    assert options(gpu, "pallas_backend") == ["triton", "mosaic-gpu"]
    cuda = (await bench_client.get("/runs/new?path=cuda&shown_path=cuda")).text
    assert options(cuda, "kernel") == ["tiled", "naive"]
    assert 'name="param.block_m"' not in cuda
    reduction = (await bench_client.get("/runs/new?workload=reduction&path=jax-cpu")).text
    assert 'name="param.kernel"' not in reduction  # XLA's is the only one there
    # A stale kernel= from the cuda path, posted with a JAX path, is dropped, not carried.
    r = await bench_client.post(
        "/runs",
        data={
            "workload": "matmul",
            "path": "jax-cpu",
            "param.m": "16",
            "param.kernel": "naive",
            "param.block_m": "0",
            "stages": "compile",
        },
    )
    assert r.status_code == 303
    job = (await bench_client.get(r.headers["location"] + ".json")).json()
    assert "kernel" not in job["params"]
    page = (await bench_client.get(r.headers["location"])).text
    assert "kernel=naive" not in page


async def test_changing_the_workload_keeps_the_measurement_options(
    bench_client: httpx.AsyncClient,
) -> None:
    query = {
        "workload": "attention",
        "shown": "matmul",
        "shown_path": "jax-cpu",
        "path": "jax-cpu",
        "param.m": "96",
        "measure.samples": "50",
        "measure.cache": "warm",
    }
    html = (await bench_client.get("/runs/new", params=query)).text
    assert 'name="measure.samples" value="50"' in html
    assert "<option selected>warm</option>" in html
    assert 'name="param.m"' not in html  # matmul's parameters went with matmul
    same = {**query, "workload": "matmul"}
    html = (await bench_client.get("/runs/new", params=same)).text
    assert 'name="param.m" value="96"' in html  # same workload: typed values stay


async def test_the_token_box_appears_only_when_the_server_needs_one(
    bench_client: httpx.AsyncClient, bench_settings: Settings
) -> None:
    assert 'name="token"' not in (await bench_client.get("/runs/new")).text
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"SUBMIT_TOKEN": "s3cret"}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        assert 'name="token"' in (await c.get("/runs/new")).text


async def test_an_htmx_submit_goes_to_the_run_page(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post(
        "/runs",
        data={"workload": "matmul", "path": "jax-cpu", "param.m": "16", "stages": "compile"},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200
    assert re.fullmatch(r"/runs/[0-9a-f]{16}", r.headers["hx-redirect"])


async def test_cancel_from_the_run_page(bench_client: httpx.AsyncClient) -> None:
    r = await bench_client.post(
        "/runs", data={"workload": "matmul", "path": "jax-gpu", "stages": "compile"}
    )
    url = r.headers["location"]
    page = (await bench_client.get(url)).text
    assert f'action="{url}/cancel"' in page and "Cancel this run" in page
    cancelled = await bench_client.post(f"{url}/cancel")
    assert cancelled.status_code == 303 and cancelled.headers["location"] == url
    job: dict[str, Any] = (await bench_client.get(url + ".json")).json()
    assert job["status"] == "cancelled"
    page = (await bench_client.get(url)).text
    assert "Cancel this run" not in page and 'id="verdict"' in page
    # From the page with JavaScript, the page stays and its live stream says it ended.
    assert (
        await bench_client.post(f"{url}/cancel", headers={"HX-Request": "true"})
    ).status_code == 204
    # Cancelling again is harmless; a missing run is a 404 page.
    assert (await bench_client.post(f"{url}/cancel")).status_code == 303
    assert (await bench_client.post("/runs/0123456789abcdef/cancel")).status_code == 404


async def test_cancel_needs_the_token_where_submission_does(bench_settings: Settings) -> None:
    from app.main import create_app

    app = create_app(bench_settings.model_copy(update={"SUBMIT_TOKEN": "s3cret"}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        form = {"workload": "matmul", "path": "jax-gpu", "stages": "compile", "token": "s3cret"}
        r = await c.post("/runs", data=form)
        url = r.headers["location"]
        assert (await c.post(f"{url}/cancel", data={"token": "wrong"})).status_code == 401
        assert (await c.post(f"{url}/cancel", data={"token": "s3cret"})).status_code == 303


async def test_a_server_fault_is_a_site_page_and_json_for_clients(
    bench_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.app.built import state_of

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a template bug")

    # The history page and the API's list both read the jobs through this app's store.
    dispatcher = state_of(bench_app).dispatcher
    monkeypatch.setattr(dispatcher.store, "list_jobs", broken)
    transport = httpx.ASGITransport(app=bench_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        page = await c.get("/runs")
        assert page.status_code == 500
        assert "Something broke on this server" in page.text
        assert '<nav aria-label="Site">' in page.text and 'href="/runs"' in page.text
        assert "a template bug" not in page.text
        api_error = await c.get("/api/v1/jobs")
        assert api_error.status_code == 500 and "detail" in api_error.json()
