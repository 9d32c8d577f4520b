"""A large result does not stall the server: the HLO explainer runs off the event loop, on
the text already cut to the artifact cap (one 61 MB result used to block the loop for
3.2 s while the explainer read all of it)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.dispatch import results
from app.ir.explain import explain
from app.settings import Settings
from tests.app.bench_fakes import FakeWorker
from workers.protocol import JobSpec
from workers.protocol.hlo import read_hlo

pytestmark = pytest.mark.anyio

CAP = 64 * 1024


@pytest.fixture(scope="module")
def long_run() -> dict[str, Any]:
    """A real run whose optimized HLO is repeated past the artifact cap, renamed each time
    so every copy's instructions are new ones."""
    from workers.run.engine import run_job

    run = run_job(
        JobSpec.model_validate(
            {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "measure": {"samples": 5}}
        )
    ).model_dump(mode="json")
    hlo = run["artifacts"]["hlo"]
    copies = [
        hlo.replace("%ynn_fusion ", f"%ynn_fusion_c{i} ") for i in range(4 * CAP // len(hlo) + 2)
    ]
    run["artifacts"]["hlo"] = "\n".join(copies)
    assert len(run["artifacts"]["hlo"]) > 3 * CAP
    return run


@pytest.fixture
async def capped_client(bench_settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The bench's app with a small artifact cap."""
    from app.main import create_app

    settings = bench_settings.model_copy(update={"ARTIFACT_MAX_BYTES": CAP})
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


async def test_the_explainer_reads_only_the_capped_text_and_not_on_the_loop(
    capped_client: httpx.AsyncClient, long_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int]] = []

    def watched(module: Any, hlo: str, *rest: Any) -> Any:  # the real one, thread and input noted
        seen.append((threading.current_thread().name, len(hlo.encode())))
        return explain(module, hlo, *rest)

    monkeypatch.setattr(results, "explain", watched)
    worker = FakeWorker(capped_client)
    await worker.register()
    spec = {"workload": "matmul", "params": {"m": 64, "n": 64, "k": 64}, "measure": {"samples": 5}}
    assert (await capped_client.post("/api/v1/jobs", json=spec)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    posted = await worker.post(
        "result",
        {
            "worker_id": worker.id,
            "job_id": grant["job_id"],
            "result": {**long_run, "job": grant["spec"]},
        },
    )
    assert posted.status_code == 200, posted.text
    ((thread, size),) = seen
    assert thread != threading.current_thread().name  # not the event loop's thread
    assert size <= CAP
    run = (await capped_client.get(f"/api/v1/jobs/{grant['job_id']}")).json()["run"]
    cut = long_run["artifacts"]["hlo"].encode()[:CAP].decode(errors="ignore")
    whole = long_run["artifacts"]["hlo"]
    explained = explain(read_hlo(cut, cut=True), cut, None, None)
    assert (
        len(run["hlo_explained"])
        == len(explained)
        < len(explain(read_hlo(whole), whole, None, None))
    )
