"""The HLO diff through the server: "What changed" on the compare page (server-rendered,
so it is there without JavaScript), its full listing, and the JSON API with its 404s.

Runs are posted through the worker API by a worker the test plays, each carrying a small
hand-written optimized HLO (tests/app/hlo_modules.py).
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import MATMUL, FakeWorker
from tests.app.hlo_modules import BASE, GATHERED, SPLIT, gathered, wide

pytestmark = pytest.mark.anyio


async def post_run(client: httpx.AsyncClient, worker: FakeWorker, hlo: str) -> str:
    """Queue a matmul, lease it and post a run whose optimized HLO is `hlo`; the job id."""
    queued = await client.post("/api/v1/jobs", json=MATMUL)
    assert queued.status_code == 202, queued.text
    grant = await worker.lease()
    assert grant is not None
    artifacts = {"jaxpr": "{ lambda ; a b. }", "stablehlo": "module {}", "hlo": hlo}
    posted = await worker.finish(grant, artifacts=artifacts)
    assert posted.status_code == 200, posted.text
    return str(grant["job_id"])


@pytest.fixture
async def worker(bench_client: httpx.AsyncClient) -> FakeWorker:
    w = FakeWorker(bench_client)
    await w.register()
    return w


def section(html: str) -> str:
    """The "What changed" section of a page, as text a person reads (tags dropped)."""
    found = re.search(r'<section id="hlo-diff".*?</section>', html, re.DOTALL)
    assert found is not None, "no What changed section"
    return found[0]


def words(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def body_rows(table: str) -> int:
    return table.split("<tbody>", 1)[1].count("<tr>")


def line_of(text: str, name: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if f"%{name} = " in line)


async def test_what_changed_says_it_in_words_and_links_both_sides(
    bench_client: httpx.AsyncClient, worker: FakeWorker
) -> None:
    changed = gathered(SPLIT, "fusion.4")
    a = await post_run(bench_client, worker, BASE)
    b = await post_run(bench_client, worker, changed)
    page = await bench_client.get(f"/compare?a={a}&b={b}")
    assert page.status_code == 200
    html = section(page.text)
    text = words(html)
    assert "What changed" in text
    assert "B adds 1 all-gather moving 16.4 kB per device" in text
    # In the user's words first: the source line and the JAX operation, then the kernels.
    assert (
        "model.py:11 mul: A's loop fusion (fusion.3) computing add and mul is split in two in "
        "B: a loop fusion (fusion.3) computing add and a loop fusion (fusion.4) computing mul"
    ) in text
    assert "<code>model.py:12 neg</code>" in html  # each row leads with its source line
    # Collectives come first, with their bytes and replica groups on each side.
    assert text.index("Collectives") < text.index("Fusions split or merged")
    assert "16.4 kB" in text and "{{0,1,2,3}}" in text
    # Each instruction links to its line in its own run's HLO view.
    start = line_of(changed, "all-gather-start")
    assert f'href="/runs/{b}/ir/hlo?start=1#L{start}"' in html
    assert f'href="/runs/{a}/ir/hlo?start=1#L{line_of(BASE, "fusion.3")}"' in html
    assert f'href="/runs/{b}/ir/hlo?start=1#L{line_of(changed, "fusion.4")}"' in html
    # The cost each side states: bytes from the shapes, where the HLO estimates nothing.
    assert "in and out (from shapes)" in text
    # Server-rendered: the section is in the first answer, loaded by no script.
    assert "hx-get" not in html.split("What changed")[0][-300:]
    # The page's JSON twin carries the same summary.
    twin = (await bench_client.get(f"/compare.json?a={a}&b={b}")).json()
    assert twin["hlo_changes"]["summary"]["splits"] == 1
    assert twin["hlo_changes"]["sentences"] == words_list(html)


def words_list(html: str) -> list[str]:
    """The section's sentences (its paragraphs before the first group)."""
    head = html.split("<details", 1)[0]
    return [words(p) for p in re.findall(r"<p>(.*?)</p>", head, re.DOTALL)]


async def test_a_long_group_shows_its_top_and_all_on_request(
    bench_client: httpx.AsyncClient, worker: FakeWorker
) -> None:
    a = await post_run(bench_client, worker, BASE)
    b = await post_run(bench_client, worker, wide(BASE, 25))
    html = section((await bench_client.get(f"/compare?a={a}&b={b}")).text)
    only_b = html.split('id="hd-only-b"')[1].split("</details>")[0]
    assert body_rows(only_b) == 10 and "Show all 25" in only_b
    full = await bench_client.get(f"/compare/hlo-diff?a={a}&b={b}")
    assert full.status_code == 200
    rows = section(full.text).split('id="hd-only-b"')[1].split("</details>")[0]
    assert body_rows(rows) == 25 and "spare.24" in rows
    fragment = await bench_client.get(
        f"/compare/hlo-diff?a={a}&b={b}", headers={"HX-Request": "true"}
    )
    assert fragment.text.lstrip().startswith("{#") or "<html" not in fragment.text
    assert 'id="hlo-diff"' in fragment.text


async def test_the_api_answers_the_contract_and_404_names_the_id(
    bench_client: httpx.AsyncClient, worker: FakeWorker
) -> None:
    a = await post_run(bench_client, worker, BASE)
    b = await post_run(bench_client, worker, GATHERED)
    r = await bench_client.get(f"/api/v1/compare/hlo-diff?a={a}&b={b}")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    assert body["summary"] == {
        "identical": 3,
        "changed": 1,
        "only_a": 0,
        "only_b": 2,
        "splits": 0,
        "merges": 0,
        "guesses": 0,
    }
    assert body["truncated"] == {"a": False, "b": False}
    (pair,) = body["changed"]
    assert pair["a"]["name"] == pair["b"]["name"] == "neg.1" and pair["what"] == ["operands"]
    assert (pair["label"], pair["step"], pair["guess"]) == ("model.py:12 neg", "metadata", False)
    assert pair["a"]["source"] == {"file": "/src/model.py", "line": 12, "place": "model.py:12"}
    assert (pair["a"]["jax_op"], pair["a"]["work"]) == ("neg", "op")
    assert {i["name"] for i in body["only_b"]} == {"all-gather-start", "slice.1"}
    (collective,) = body["collectives"]
    assert collective == {
        "label": "model.py:12 all_gather",
        "a": None,
        "b": "all-gather-start",
        "kind": "all-gather",
        "bytes_a": None,
        "bytes_b": 16384,
        "groups_a": None,
        "groups_b": "{{0,1,2,3}}",
        "lines": {"a": None, "b": line_of(GATHERED, "all-gather-start")},
    }
    gather = next(i for i in body["only_b"] if i["name"] == "all-gather-start")
    assert gather["opcode"] == "all-gather" and gather["shape"] == "f32[32,128]{1,0}"
    assert gather["cost"] == {"cycles": None, "bytes": 16384 + 4096}
    missing = await bench_client.get(f"/api/v1/compare/hlo-diff?a={a}&b=nosuchjob")
    assert missing.status_code == 404 and "'nosuchjob'" in missing.json()["detail"]
    queued = (await bench_client.post("/api/v1/jobs", json=MATMUL)).json()["id"]
    no_hlo = await bench_client.get(f"/api/v1/compare/hlo-diff?a={queued}&b={a}")
    assert no_hlo.status_code == 404 and queued in no_hlo.json()["detail"]
    assert "no optimized HLO" in no_hlo.json()["detail"]
    # The compare page of a side without HLO yet has no section, and no error.
    page = await bench_client.get(f"/compare?a={queued}&b={a}")
    assert page.status_code == 200 and 'id="hlo-diff"' not in page.text
    # HLO that does not parse is refused naming the job and the line, on the page too.
    broken = await post_run(bench_client, worker, BASE.replace("negate(%fusion.3)", "negate("))
    refused = await bench_client.get(f"/api/v1/compare/hlo-diff?a={a}&b={broken}")
    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["detail"]
    said = problem["message"]
    assert problem["field"] == "b"  # the side whose HLO does not parse
    assert broken in said and f"line {line_of(BASE, 'neg.1')}: its operand list" in said
    page = await bench_client.get(f"/compare?a={a}&b={broken}")
    assert page.status_code == 200 and "does not parse" in unescape(page.text)


async def test_a_run_against_itself_and_its_repeat_changes_nothing(
    bench_client: httpx.AsyncClient, worker: FakeWorker
) -> None:
    a = await post_run(bench_client, worker, GATHERED)
    again = await post_run(bench_client, worker, GATHERED)
    for b in (a, again):
        body = (await bench_client.get(f"/api/v1/compare/hlo-diff?a={a}&b={b}")).json()
        assert body["summary"]["changed"] == body["summary"]["only_a"] == 0
        assert body["summary"]["only_b"] == 0 and body["summary"]["identical"] == 6
        assert body["sentences"][0].startswith("Both modules compute the same way")
