"""The HLO diff, bounded: reports kept as their JSON within a byte budget, one computation
for identical requests asked at once, the event loop free while a diff is worked out, and
nothing of a diff's objects left once it is answered. And cut means cut: a text the worker
cut to exactly the storage cap is diffed to its last whole instruction, and the diff says
which side was cut, on the page and in its JSON."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import resource
import signal
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest

from app.ir.hlo_graph import HloGraph
from app.pages.compare.forked import ChildFailed, in_child
from app.pages.compare.hlo_changes import HloDiffUnreadable, Side, key_of, report_json
from app.pages.compare.hlo_diffs import DiffCache, HloDiffs
from app.settings import Settings
from tests.app.bench_fakes import MATMUL, FakeWorker
from tests.app.built import build_app, state_of
from tests.app.hlo_modules import BASE, GATHERED, RELAID, SPLIT, large
from workers.agent.link import cap_artifacts
from workers.protocol.hlo import HloModule

pytestmark = pytest.mark.anyio

CAP = 64 * 1024


@pytest.fixture
def app(bench_settings: Settings) -> Any:
    return build_app(bench_settings.model_copy(update={"ARTIFACT_MAX_BYTES": CAP}))


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


def diffs_of(app: Any) -> HloDiffs:
    found = state_of(app).hlo_diffs
    assert found is not None
    return found


async def posted(client: httpx.AsyncClient, hlo: str, **changes: Any) -> str:
    """A job whose run's optimized HLO is `hlo` (and whose result has `changes`): its id."""
    worker = FakeWorker(client)
    await worker.register()
    assert (await client.post("/api/v1/jobs", json=MATMUL)).status_code == 202
    grant = await worker.lease()
    assert grant is not None
    answer = await worker.finish(grant, artifacts={"hlo": hlo}, **changes)
    assert answer.status_code == 200, answer.text
    return str(grant["job_id"])


async def diff(client: httpx.AsyncClient, a: str, b: str) -> httpx.Response:
    return await client.get(f"/api/v1/compare/hlo-diff?a={a}&b={b}")


def test_reports_are_kept_within_their_bytes_least_recently_used_first() -> None:
    report = report_json(Side("a", BASE, False, "x"), Side("b", GATHERED, False, "x"))
    keys = [key_of(Side("a", BASE, False, "x"), Side("b", t, False, "x"))
            for t in (GATHERED, RELAID, SPLIT, large(3))]  # fmt: skip
    cache = DiffCache(3 * len(report))
    for key in keys[:3]:
        cache.put(key, report)
    cache.put(keys[0], report)  # kept again: counted once, and now the most recent
    assert cache.held_bytes == 3 * len(report)
    assert cache.get(keys[1]) == report  # used: the least recent is now keys[2]
    cache.put(keys[3], report)
    assert cache.get(keys[2]) is None and cache.held_bytes == 3 * len(report)
    assert all(cache.get(k) == report for k in (keys[0], keys[1], keys[3]))
    small = DiffCache(len(report) - 1)
    small.put(keys[0], report)  # larger than the whole budget: not kept
    assert small.get(keys[0]) is None and small.held_bytes == 0


async def test_identical_requests_at_once_share_one_diff(
    app: Any, client: httpx.AsyncClient
) -> None:
    a, b = await posted(client, large(20)), await posted(client, large(20, variant=True))
    other = await posted(client, large(20, variant=True).replace("jit_large", "jit_other"))
    diffs = diffs_of(app)
    answers = await asyncio.gather(*(diff(client, a, b) for _ in range(8)), diff(client, a, other))
    assert {r.status_code for r in answers} == {200}
    assert len({r.content for r in answers[:8]}) == 1
    assert diffs.worked_out == 2  # one per pair, however many asked
    again = await diff(client, a, b)
    assert again.content == answers[0].content and diffs.worked_out == 2  # kept
    assert diffs.cache.held_bytes == len(answers[0].content) + len(answers[8].content)


async def test_no_report_kept_without_a_budget(bench_settings: Settings) -> None:
    app = build_app(bench_settings.model_copy(update={"HLO_DIFF_CACHE_BYTES": 0}))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        a, b = await posted(client, BASE), await posted(client, GATHERED)
        for _ in range(2):
            assert (await diff(client, a, b)).status_code == 200
        assert diffs_of(app).worked_out == 2 and diffs_of(app).cache.held_bytes == 0


async def test_the_event_loop_answers_while_a_diff_is_worked_out(
    bench_app: Any, bench_client: httpx.AsyncClient
) -> None:
    a = await posted(bench_client, large(800))
    b = await posted(bench_client, large(800, variant=True))
    diffs = diffs_of(bench_app)
    asked = asyncio.create_task(diff(bench_client, a, b))
    while diffs.working == 0:
        await asyncio.sleep(0.005)
    health = await bench_client.get("/healthz")
    assert health.status_code == 200
    assert not asked.done() and diffs.worked_out == 0  # answered while the diff ran
    assert (await asked).status_code == 200 and diffs.worked_out == 1


def read_objects() -> int:
    """Modules read and graphs built that are still alive, after a full collection."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, HloGraph | HloModule))


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def test_a_diff_is_worked_out_outside_the_server_and_leaves_only_its_report(
    bench_app: Any, bench_client: httpx.AsyncClient
) -> None:
    a = await posted(bench_client, large(200))
    b = await posted(bench_client, large(200, variant=True))
    diffs = diffs_of(bench_app)
    objects, cpu = read_objects(), children_cpu()
    answer = await diff(bench_client, a, b)
    assert answer.status_code == 200
    while diffs.working:  # the memory of the texts it read being given back
        await asyncio.sleep(0.005)
    assert children_cpu() > cpu  # a child process paired the instructions
    assert read_objects() == objects  # none of its modules or graphs were built here
    assert diffs.cache.held_bytes == len(answer.content)  # what is kept: the JSON


async def test_a_text_the_worker_cut_is_diffed_to_its_last_whole_instruction(
    app: Any, client: httpx.AsyncClient
) -> None:
    whole = large(60, variant=True)
    capped = cap_artifacts({"artifacts": {"hlo": whole}}, CAP)  # as the worker sends it
    kept = capped["artifacts"]["hlo"]
    assert len(kept.encode()) == CAP and capped["artifacts_cut"] == ["hlo"]
    a = await posted(client, large(40))
    b = await posted(client, kept, artifacts_cut=capped["artifacts_cut"])
    stored = await client.get(f"/api/v1/jobs/{b}/artifacts/hlo")
    assert len(stored.content) == CAP  # the server sees exactly the cap: only the mark says cut
    body = (await diff(client, a, b)).json()
    assert body["truncated"] == {"a": False, "b": True}
    # B stops inside layer 37: its scale (the last whole line) pairs with A's, its negate
    # (the line the cap went through) is not read, so A's is A's alone.
    assert kept.rstrip().endswith("%v_neg.37 = f32[64,128]{1,0} negate(%v_")
    only_a = {i["name"] for i in body["only_a"]}
    assert "o_scale.37" not in only_a and {"o_neg.37", "o_copy.37"} <= only_a
    assert "B's HLO was cut at the storage cap" in " ".join(body["sentences"])
    page = (await client.get(f"/compare/hlo-diff?a={a}&b={b}")).text
    assert "(B, <strong>only the beginning of its HLO kept</strong>)" in page
    assert "(A)" in page  # A is whole
    twin = (await client.get(f"/compare.json?a={a}&b={b}")).json()
    assert twin["hlo_changes"]["truncated"] == {"a": False, "b": True}
    # The same bytes without the worker's mark read as a whole text, which ends mid-line.
    unmarked = await posted(client, kept)
    refused = await diff(client, a, unmarked)
    line = kept.count("\n") + 1
    assert refused.status_code == 422
    (problem,) = refused.json()["detail"]
    assert problem["field"] == "b"
    assert f"line {line}: its operand list never closes" in problem["message"]


def test_a_forked_child_answers_raises_or_is_named_when_it_dies() -> None:
    assert int(in_child(lambda: str(os.getpid()).encode())) != os.getpid()
    with pytest.raises(HloDiffUnreadable, match=re.escape("job 'b''s optimized HLO does not")):
        in_child(partial(report_json, Side("a", BASE, False, "x"), Side("b", "?", False, "x")))
    with pytest.raises(ChildFailed, match="signal SIGKILL"):
        in_child(lambda: os.kill(os.getpid(), signal.SIGKILL) or b"")


def test_a_forked_child_that_raises_what_cannot_be_pickled_says_what_it_was() -> None:
    class Local(Exception):
        """Defined in a function: pickle cannot find it by name."""

    def work() -> bytes:
        raise Local("the reason")

    with pytest.raises(ChildFailed, match="Local: the reason"):
        in_child(work)
