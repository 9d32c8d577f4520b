"""Targets on the pages, in-process: the run form's targets, the reader cards' own jobs
(through the one run path and admission; never in the embed), matrices with target
columns, the compile-only comparison guard, memory fit, and the byte cap of a job that
only compiles."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from chart_markup import render_chart

from app.main import create_app
from app.pages.compare.guard import guard, run_facts
from app.pages.runs.memory_fit import memory_fit
from app.reader.content import load_content
from app.settings import Settings
from tests.app.bench_fakes import FakeWorker, capabilities
from workers.protocol import TARGET_IDS, TPU_TARGET_IDS

pytestmark = pytest.mark.anyio

FORM = {"content-type": "application/x-www-form-urlencoded"}
CONTENT = load_content()


def compiler_caps() -> dict[str, Any]:
    return capabilities("cpu", targets=list(TARGET_IDS))


def options(html: str) -> dict[str, str]:
    """The target select's options: id → label."""
    select = re.search(r'<select id="f-target".*?</select>', html, re.S)
    assert select, "no target select"
    return dict(re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', select.group(0)))


def ticked(html: str) -> list[str]:
    return re.findall(r'name="stages" value="(\w+)" checked', html)


async def test_the_run_form_offers_targets_per_path(bench_client: httpx.AsyncClient) -> None:
    await FakeWorker(bench_client, compiler_caps()).register()
    tpu = options(
        (await bench_client.get("/runs/new?workload=matmul&path=jax-tpu&shown_path=jax-tpu")).text
    )
    assert list(tpu) == ["v6e:1x1", "v5e:1x1"]  # matmul runs on one device: one chip only
    assert "compiled without the hardware" in tpu["v6e:1x1"]
    assert "TPU v5e, 1 chip" in tpu["v5e:1x1"]
    slices = options(
        (
            await bench_client.get(
                "/runs/new?workload=sharded-matmul&path=jax-tpu&shown_path=jax-tpu"
            )
        ).text
    )
    assert list(slices) == list(TPU_TARGET_IDS)  # every generation's slices
    assert "TPU v4, 4 chips, 8 devices" in slices["v4:2x2x1"]
    gpu = options(
        (await bench_client.get("/runs/new?workload=matmul&path=jax-gpu&shown_path=jax-gpu")).text
    )
    assert list(gpu) == ["b200:1", "h100:1", "h200:1"]
    gpus = options(
        (
            await bench_client.get(
                "/runs/new?workload=sharded-matmul&path=jax-gpu&shown_path=jax-gpu"
            )
        ).text
    )
    assert "h100:8" in gpus and "b200:2" in gpus
    cuda = options(
        (await bench_client.get("/runs/new?workload=matmul&path=cuda&shown_path=cuda")).text
    )
    assert list(cuda) == ["b200:1", "h100:1", "h200:1"]


async def test_a_jax_path_no_worker_runs_leads_to_its_targets(
    bench_client: httpx.AsyncClient,
) -> None:
    await FakeWorker(bench_client, compiler_caps()).register()
    # From the reader: no worker runs jax-tpu, but one compiles for its targets, so the form
    # starts on jax-tpu with the first target it compiles for, compile only, and says why.
    html = (await bench_client.get("/runs/new?workload=matmul&path=jax-tpu")).text
    assert re.search(r'<option value="jax-tpu" selected', html)
    assert re.search(r'<option value="v6e:1x1" selected', html)
    assert ticked(html) == ["compile"]
    assert "compiles for its targets without the hardware, so the form starts on v6e:1x1" in html
    # Choosing jax-tpu in the form: the note points at its targets; none is forced on.
    html = (
        await bench_client.get("/runs/new?workload=matmul&path=jax-tpu&shown_path=jax-cpu")
    ).text
    assert "Or choose a target below (v6e:1x1, v5e:1x1, …)" in html
    assert re.search(r'<option value="" selected>none', html)
    assert ticked(html) == ["compile", "execute"]


async def test_a_real_worker_unmarks_its_targets(bench_client: httpx.AsyncClient) -> None:
    await FakeWorker(
        bench_client,
        capabilities("tpu", device_kind="TPU v6 lite", device_count=8, paths=["jax-tpu"]),
    ).register()
    html = (await bench_client.get("/runs/new?workload=sharded-matmul&path=jax-tpu")).text
    found = options(html)
    assert "on real devices" in found["v6e:2x4"]
    assert "compiled without the hardware" in found["v6e:4x4"]  # 16 chips: more than 8
    assert "no connected worker compiles for it" in found["v6e:4x4"]


async def test_a_target_implies_compile_only_and_jax_cpu_clears_it(
    bench_client: httpx.AsyncClient,
) -> None:
    await FakeWorker(bench_client, compiler_caps()).register()
    query = {
        "workload": "matmul",
        "path": "jax-tpu",
        "shown": "matmul",
        "shown_path": "jax-tpu",
        "shown_target": "",
        "target": "v6e:1x1",
        "stages": ["compile", "execute"],
    }
    html = (await bench_client.get("/runs/new?" + urlencode(query, doseq=True))).text
    assert ticked(html) == ["compile"]
    assert "implies compile only" in html and "no time, no speed" in html
    assert re.search(r'<option value="v6e:1x1" selected', html)
    # Choosing jax-cpu clears the target and ticks execute again.
    query.update(path="jax-cpu", shown_target="v6e:1x1", stages=["compile"])
    html = (await bench_client.get("/runs/new?" + urlencode(query, doseq=True))).text
    assert 'id="f-target"' not in html
    assert ticked(html) == ["compile", "execute"]
    assert 'name="shown_target" value=""' in html


async def test_the_form_queues_a_target_job(
    bench_client: httpx.AsyncClient, bench_dispatcher: Any
) -> None:
    body = {
        "workload": "sharded-matmul",
        "path": "jax-tpu",
        "target": "v6e:2x4",
        "stages": "compile",
        "param.sharding": "tensor",
    }
    r = await bench_client.post("/runs", content=urlencode(body), headers=FORM)
    assert r.status_code == 303, r.text
    job = (await bench_client.get(r.headers["location"] + ".json")).json()
    assert job["target"] == "v6e:2x4" and job["stages"] == ["compile"]
    # No worker compiles for it: the job waits and says why, on its page too.
    assert "v6e:2x4" in (job["reason"] or "")
    page = (await bench_client.get(r.headers["location"])).text
    assert "compiling for v6e:2x4" in page


@pytest.mark.parametrize("key", sorted(k for k, c in CONTENT.cards.items() if c.job))
async def test_a_cards_compile_button_queues_its_job_through_the_run_path(
    bench_client: httpx.AsyncClient, key: tuple[Any, Any]
) -> None:
    path, stage = key
    card = CONTENT.cards[key]
    assert card.job is not None
    html = (await bench_client.get(f"/read/{path.value}/{stage.value}")).text
    form = re.search(
        r'<form method="post" action="/runs" [^>]*id="card-compile">(.*?)</form>', html, re.S
    )
    assert form, "the card has no compile form"
    assert "Compile this for real" in form.group(1)
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(1))
    r = await bench_client.post("/runs", content=urlencode(fields), headers=FORM)
    assert r.status_code == 303, r.text
    job = (await bench_client.get(r.headers["location"] + ".json")).json()
    expected = card.job.body()
    assert (job["workload"], job["path"], job["target"]) == (
        expected["workload"],
        expected["path"],
        expected["target"],
    )
    assert job["stages"] == ["compile"]
    for name, value in expected["params"].items():
        assert job["params"][name] == value, name
    # The embed of the same card shows the job, read-only: nothing that queues work.
    embed = (await bench_client.get(f"/embed/{path.value}/{stage.value}")).text
    assert expected["target"] in embed
    assert "<form" not in embed and "Compile this for real" not in embed
    assert 'method="post"' not in embed.lower()


async def test_the_cards_button_goes_through_admission(tmp_path: Any) -> None:
    settings = Settings(
        DB=tmp_path / "db.sqlite3",
        SUBMIT_TOKEN="s3cret-submit-token",
        WORKER_TOKEN="worker-token-0123456789",
    )
    app = create_app(settings)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        job = CONTENT.cards[next(k for k, c in CONTENT.cards.items() if c.job)].job
        assert job is not None
        from app.reader.card_jobs import form_fields

        r = await client.post("/runs", content=urlencode(form_fields(job)), headers=FORM)
        assert r.status_code == 401
        assert "submission token" in r.text
        listed = (await client.get("/api/v1/jobs")).json()
        assert listed["count"] == 0


async def test_a_compile_only_target_job_has_no_byte_cap(bench_client: httpx.AsyncClient) -> None:
    """It places no array anywhere; whether it fits is what memory_analysis() answers."""
    big = {"batch": 16, "heads": 32, "seq_len": 8192, "head_dim": 128}
    spec = {"workload": "attention", "path": "jax-gpu", "target": "h100:1", "params": big}
    assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
    executes = {**spec, "stages": ["compile", "execute"]}
    r = await bench_client.post("/api/v1/jobs", json=executes)
    assert r.status_code == 422 and "over this server's limit" in r.text
    r = await bench_client.post("/api/v1/jobs", json={**spec, "target": None})
    assert r.status_code == 422


MATMUL_SHAPE = {"name": "shape", "values": [{"m": 256, "n": 256, "k": 256}]}


async def test_a_matrix_with_target_columns(bench_client: httpx.AsyncClient) -> None:
    spec = {"workload": "matmul", "axis": MATMUL_SHAPE, "targets": ["cpu", "v6e:1x1", "b200:1"]}
    r = await bench_client.post("/api/v1/matrices", json=spec)
    assert r.status_code == 201, r.text
    m = r.json()
    assert m["targets"] is True and m["spec"]["stages"] == ["compile"]
    assert [(c["path"], c["target"]) for c in m["columns"]] == [
        ("jax-cpu", None),
        ("jax-tpu", "v6e:1x1"),
        ("jax-gpu", "b200:1"),
    ]
    jobs = [
        (await bench_client.get(f"/api/v1/jobs/{c['job']}")).json() for c in m["rows"][0]["cells"]
    ]
    assert [j.get("target") for j in jobs] == [None, "v6e:1x1", "b200:1"]
    csv = (await bench_client.get(m["links"]["csv"])).text.splitlines()
    assert "fusions" in csv[0] and "memory_needed_bytes" in csv[0] and len(csv) == 4


async def test_a_slice_sweep_is_one_matrix(bench_client: httpx.AsyncClient) -> None:
    slices = ["v6e:2x2", "v6e:2x4", "v6e:4x4", "v6e:8x8", "v6e:16x16"]
    spec = {
        "workload": "sharded-matmul",
        "axis": {"name": "shape", "values": [{"m": 4096, "n": 4096, "k": 4096}]},
        "base_params": {"sharding": "tensor"},
        "targets": slices,
    }
    r = await bench_client.post("/api/v1/matrices", json=spec)
    assert r.status_code == 201, r.text
    cells = r.json()["rows"][0]["cells"]
    devices = [
        (await bench_client.get(f"/api/v1/jobs/{c['job']}")).json()["params"]["devices"]
        for c in cells
    ]
    assert devices == [4, 8, 16, 64, 256]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"targets": ["v6e:32x32"]}, "not a v6e slice that is sold"),
        ({"targets": ["cpu", "cpu"]}, "a target is named twice"),
        ({"targets": ["b200:1"], "stages": ["compile", "execute"]}, "compiles only"),
        ({"targets": None, "paths": []}, "at least one path"),
    ],
)
async def test_a_bad_target_matrix_is_refused_naming_why(
    bench_client: httpx.AsyncClient, change: dict[str, Any], says: str
) -> None:
    spec = {"workload": "matmul", "axis": MATMUL_SHAPE, "targets": ["b200:1"], **change}
    r = await bench_client.post("/api/v1/matrices", json=spec)
    assert r.status_code == 422
    assert says in r.text


def _compiled_job(job_id: str, path: str, target: str | None, device: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "status": "done",
        "workload": "matmul",
        "path": path,
        "target": target,
        "stages": ["compile"],
        "params": {"m": 256, "n": 256, "k": 256},
        "measure": {"cache": "cold" if target else "warm"},
        "run": {
            "valid": True,
            "measurements": [],
            "environment": {
                "platform": "cpu",
                "device_kind": device,
                "device_count": 1,
                "jax_version": "0.10.2",
                "jaxlib_version": "0.10.2",
            },
        },
    }


def test_the_target_is_the_one_experimental_variable_of_a_compile_only_comparison() -> None:
    v6e = run_facts(_compiled_job("a", "jax-tpu", "v6e:1x1", "cpu"))
    b200 = run_facts(_compiled_job("b", "jax-gpu", "b200:1", "cpu"))
    g = guard([v6e], [b200])
    assert g.compile_only and g.comparable
    assert g.experimental == [("target", "v6e:1x1", "b200:1")]  # not path, device, version
    assert not g.warnings and "cache policy" not in g.controlled
    host = run_facts(_compiled_job("c", "jax-cpu", None, "cpu"))
    assert guard([host], [v6e]).experimental[0][0] == "target"
    timed = _compiled_job("d", "jax-cpu", None, "cpu")
    timed["stages"] = ["compile", "execute"]
    refused = guard([run_facts(timed)], [v6e])
    assert not refused.comparable
    assert any("only compiled" in p for p in refused.problems)
    other = _compiled_job("e", "jax-gpu", "b200:1", "cpu")
    other["params"] = {"m": 512, "n": 256, "k": 256}
    assert [m.variable for m in guard([v6e], [run_facts(other)]).mismatches] == ["params.m"]


def test_memory_fit_says_fits_or_by_how_much_it_does_not() -> None:
    base = {
        "argument_bytes": 6 * 10**9,
        "output_bytes": 2 * 10**9,
        "temp_bytes": 10**9,
        "hbm_bytes": 80 * 10**9,
        "hbm_label": "80 GB HBM3 per GPU",
        "source": "x",
    }
    fits = memory_fit({**base, "peak_bytes": 9 * 10**9, "generated_code_bytes": 10**6}, "h100", 1)
    assert fits is not None and fits["fits"] is True
    assert fits["needed_bytes"] == 9 * 10**9 + 10**6
    assert fits["verdict"].startswith("Fits: 9 GB of 80 GB")
    over = memory_fit({**base, "peak_bytes": 283 * 10**9}, "h100", 1)
    assert over is not None and over["fits"] is False
    assert over["verdict"].startswith("Does not fit by 203 GB: needs 283 GB, has 80 GB")
    assert 'class="memory-bars over"' in render_chart(over["chart"])
    assert 'class="memory-bars"' in render_chart(fits["chart"])
    assert over["hbm_gib"] == "74.51 GiB"
    # Without a peak: arguments + outputs + temporaries.
    no_peak = memory_fit(base, "h100", 1)
    assert no_peak is not None and no_peak["needed_bytes"] == 9 * 10**9
    assert memory_fit(None, "h100", 1) is None
    # A GPU target's stored 0 of generated code (runs before the worker said "unknown") is
    # XLA:GPU's unfilled field, not a size; libtpu's own figure stands.
    code = {**base, "peak_bytes": 9 * 10**9, "generated_code_bytes": 0}
    gpu, tpu = memory_fit(code, "h100", 1), memory_fit({**code, "hbm_bytes": 32 * 10**9}, "v6e", 1)
    assert (
        gpu is not None
        and gpu["rows"][3]["gb"] == "not reported by XLA:GPU without the device"
        and gpu["code_note"]
    )
    assert tpu is not None and tpu["rows"][3]["gb"] == "0 bytes" and tpu["code_note"] is None


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('target = "v6e:2x4"', 'target = "b200:8"', "job.target"),
        ("m = 1024, k = 4096", "m = 1024, k = 4095", "job.params"),
        ("pattern = '\\ball-reduce\\('", "pattern = '(unclosed'", "job.claims[0].pattern"),
        ("[job]", "", "field job: a jax-tpu card names its job"),
    ],
)
def test_a_card_job_the_catalog_refuses_stops_the_server(
    tmp_path: Any, old: str, new: str, says: str
) -> None:
    import shutil

    from app.reader.content import CONTENT_DIR, ContentError

    folder = tmp_path / "content"
    shutil.copytree(CONTENT_DIR, folder)
    card = folder / "cards" / "jax-tpu.scale.toml"
    text = card.read_text(encoding="utf-8")
    assert old in text
    if old == "[job]":  # the whole job, claims and all
        text = text[: text.index("[job]")] + text[text.index("[code]") :]
    card.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(ContentError, match=re.escape(says)):
        load_content(folder)
