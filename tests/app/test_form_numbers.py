"""Numbers typed into forms: a Unicode digit or a number of thousands of digits is a 422
in plain words in every form (/runs, /matrices, /artifacts/{sha}/runs, /compare/repeat),
never a 500 and never another number; and /compare/repeat queues both sides in one
admission call, so a refusal leaves nothing half queued.

Before: '²' (`isdigit()` true, `int()` raises) and 5,000 digits (`int()` refuses more
than 4,300) gave 500s; '٣' (an Arabic-Indic three) was read as 3 and queued."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.routes.forms import FormValueError, number, sample_count, typed_value, whole_number
from app.settings import Settings
from tests.app.bench_fakes import FakeWorker
from workers.protocol import JobSpec
from workers.run.engine import run_job

pytestmark = pytest.mark.anyio

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
HUGE = "9" * 5000
BAD = ["²", "٣", HUGE, "1e999", "nan", "12abc"]
SPEC: dict[str, Any] = {
    "workload": "matmul",
    "path": "jax-cpu",
    "params": {"m": 16, "n": 16, "k": 16},
    "measure": {"samples": 3},
}


@pytest.fixture
def bench_settings(bench_settings: Settings) -> Settings:
    # Room for three queued jobs: one side's two repeats fit, both sides' four do not.
    return bench_settings.model_copy(update={"MAX_QUEUE": 3})


async def queued(client: httpx.AsyncClient) -> int:
    found = (await client.get("/api/v1/jobs?status=queued")).json()
    return int(found["count"])


@pytest.mark.parametrize("text", ["²", "٣", "𝟠", HUGE, "9" * 13, "1 2", "1_000"])
def test_a_whole_number_is_ascii_digits_and_short(text: str) -> None:
    with pytest.raises(FormValueError) as caught:
        whole_number("m", text)
    assert str(caught.value).startswith("m") and len(str(caught.value)) < 120
    with pytest.raises(FormValueError):
        sample_count(text)


def test_the_readers_keep_what_was_right() -> None:
    assert whole_number("m", " 0512 ") == 512
    assert sample_count("auto") == "auto" and sample_count("20") == 20
    assert number("tolerance", "1e-3") == 0.001 and number("price", ".5") == 0.5
    assert typed_value("v", "8") == 8 and typed_value("v", "0.25") == 0.25
    assert typed_value("v", "true") is True and typed_value("v", "pow2") == "pow2"
    for text in ("nan", "inf", "1e999", "٣.5", "0x10"):
        with pytest.raises(FormValueError):
            number("tolerance", text)
    with pytest.raises(FormValueError, match="1,001 is out of range"):
        whole_number("samples", "1001", low=1, high=1000)


async def refused_in_words(client: httpx.AsyncClient, url: str, forms: list[str]) -> None:
    """Each form posted to `url` is a 422 that says what is wrong with its number."""
    for form in forms:
        r = await client.post(url, content=form.encode(), headers=FORM)
        assert r.status_code == 422, (form[:60], r.status_code)
        assert any(words in r.text for words in ("digits", "no number", "too large"))
    assert await queued(client) == 0


@pytest.mark.parametrize("bad", BAD)
async def test_the_run_form_answers_422_in_words(bench_client: httpx.AsyncClient, bad: str) -> None:
    base = "workload=matmul&path=jax-cpu&stages=compile&stages=execute"
    fields = [f"param.m={bad}&measure.samples=5", f"param.m=8&measure.samples={bad}"]
    await refused_in_words(bench_client, "/runs", [f"{base}&{f}" for f in fields])


@pytest.mark.parametrize("bad", BAD)
async def test_the_matrix_form_answers_422_in_words(
    bench_client: httpx.AsyncClient, bad: str
) -> None:
    fields = [f"axis.name=m&axis.values=8&samples={bad}"]
    if bad not in ("nan", "12abc"):  # words are values too (a cell then says why it has no job)
        fields += [
            f"axis.name=m&axis.values=8,{bad}&samples=5",
            f"axis.name=shape&axis.values=m={bad},n=8,k=8&samples=5",
            f"axis.name=m&axis.values=8&columns.name=n&columns.values={bad}&samples=5",
        ]
    base = "workload=matmul&paths=jax-cpu"
    await refused_in_words(bench_client, "/matrices", [f"{base}&{f}" for f in fields])


@pytest.mark.parametrize("bad", BAD)
async def test_the_uploaded_function_form_answers_422_in_words(
    bench_client: httpx.AsyncClient, cpu_artifact_sha: str, bad: str
) -> None:
    url = f"/artifacts/{cpu_artifact_sha}/runs"
    for field in (f"samples={bad}", f"samples=5&tolerance={bad}"):
        r = await bench_client.post(url, content=f"path=jax-cpu&{field}".encode(), headers=FORM)
        assert r.status_code == 422, (field[:40], r.status_code)
    assert await queued(bench_client) == 0


@pytest.fixture
async def cpu_artifact_sha(bench_client: httpx.AsyncClient) -> str:
    from tests.app.test_artifacts import export

    r = await bench_client.post(
        "/api/v1/artifacts",
        params={"kind": "exported"},
        content=export(["cpu"]),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["sha256"])


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return run_job(JobSpec.model_validate(SPEC)).model_dump(mode="json")


async def two_runs(client: httpx.AsyncClient, result: dict[str, Any]) -> tuple[str, str]:
    """Side A and side B: one finished run each, made by a worker played here."""
    worker = FakeWorker(client)
    await worker.register()
    ids = []
    for _ in range(2):
        r = await client.post("/api/v1/jobs", json=SPEC)
        assert r.status_code == 202, r.text
        grant = await worker.lease()
        assert grant is not None
        body = {"worker_id": worker.id, "job_id": grant["job_id"], "attempt": grant["attempt"]}
        posted = await worker.post("result", {**body, "result": {**result, "job": grant["spec"]}})
        assert posted.status_code == 200, posted.text
        ids.append(str(grant["job_id"]))
    return ids[0], ids[1]


@pytest.mark.parametrize("bad", BAD)
async def test_a_repeat_count_answers_422_in_words(
    bench_client: httpx.AsyncClient, result: dict[str, Any], bad: str
) -> None:
    a, b = await two_runs(bench_client, result)
    form = {"a": a, "b": b, "side": "a", "extra_a": bad}
    r = await bench_client.post("/compare/repeat", data=form)
    assert r.status_code == 422, r.status_code
    assert "extra_a" in r.text and HUGE not in r.text
    assert await queued(bench_client) == 0


async def test_repeats_for_both_sides_queue_whole_or_not_at_all(
    bench_client: httpx.AsyncClient, result: dict[str, Any]
) -> None:
    a, b = await two_runs(bench_client, result)
    # Each side lacks two repeats; the queue has room for three jobs.
    r = await bench_client.post("/compare/repeat", data={"a": a, "b": b, "side": "both"})
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert await queued(bench_client) == 0  # before: side A's two queued, then the 429
    again = await bench_client.post("/compare/repeat", data={"a": a, "b": b, "side": "a"})
    assert again.status_code == 303
    assert await queued(bench_client) == 2
