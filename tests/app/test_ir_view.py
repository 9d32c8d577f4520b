"""The IR view, in-process, on a real attention run: source shown and linked both ways to
the jaxpr, StableHLO and optimized HLO; metadata folded; search and paging without
JavaScript."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from tests.app.ir_runs import attention_result, post_run

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def attention() -> dict[str, Any]:
    return attention_result()


def _line_of(source: dict[str, Any], needle: str) -> int:
    for offset, line in enumerate(source["text"].split("\n")):
        if needle in line:
            return int(source["first_line"]) + offset
    raise AssertionError(f"{needle!r} not in the source")


async def test_the_run_carries_the_source_it_ran(
    bench_client: httpx.AsyncClient, attention: dict[str, Any]
) -> None:
    import hashlib

    source = attention["source"]
    assert source["path"] == "workers/workloads/attention.py"
    assert "def attention(q" in source["text"] and "jax.nn.softmax" in source["text"]
    assert source["sha256"] == hashlib.sha256(source["text"].encode()).hexdigest()
    job_id = await post_run(bench_client, attention)
    page = (await bench_client.get(f"/runs/{job_id}/ir/hlo")).text
    assert "jax.nn.softmax" in unescape(re.sub(r"<[^>]+>", "", page))
    assert source["sha256"][:12] in page


@pytest.mark.parametrize("artifact", ["jaxpr", "stablehlo", "hlo"])
async def test_a_source_line_links_to_its_ir_lines_and_back(
    bench_client: httpx.AsyncClient, attention: dict[str, Any], artifact: str
) -> None:
    job_id = await post_run(bench_client, attention)
    softmax = _line_of(attention["source"], "jax.nn.softmax")
    base = f"/runs/{job_id}/ir/{artifact}"
    page = (await bench_client.get(base)).text
    # The source line is a link to the first IR line it became, selecting it.
    row = re.search(rf'<div class="sl s\d" id="S-{softmax}" data-src="{softmax}">(.*?)</div>', page)
    assert row, f"source line {softmax} is not linked in the {artifact} view"
    href = unescape(re.search(r'<a class="n" href="([^"]+)"', row.group(1)).group(1))
    assert href.startswith(f"{base}?src={softmax}#L")
    selected = (await bench_client.get(href.split("#")[0])).text
    marked = re.findall(rf'<div class="l s\d sel[^"]*" id="L(\d+)" data-src="{softmax}">', selected)
    assert marked, "no IR line is marked for the selected source line"
    assert f'id="L{href.split("#L")[1]}"' in selected
    # Each IR line from that source line links back to it.
    back = re.search(
        rf'<div class="l[^"]*" id="L{marked[0]}" data-src="{softmax}"><a class="n"[^>]*>\d+</a>'
        rf'<a class="sr" href="([^"]+)"',
        selected,
    )
    assert back and unescape(back.group(1)) == f"{base}?src={softmax}#S-{softmax}"
    # And the source line itself is marked on that page.
    assert re.search(rf'<div class="sl s\d sel" id="S-{softmax}"', selected)


async def test_hlo_metadata_and_tables_are_folded_and_the_download_is_complete(
    bench_client: httpx.AsyncClient, attention: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, attention)
    page = (await bench_client.get(f"/runs/{job_id}/ir/hlo")).text
    lines = re.findall(r'<div class="l[^"]*" id="L\d+".*?</div>', page)
    assert lines
    for line in lines:
        shown = re.sub(r'<span class="fd">.*?</span></code>', "</code>", line)
        if 'class="l fb' not in line:  # a folded table line is hidden whole
            assert "metadata=" not in re.sub(r"<[^>]+>", "", shown), line
    assert "source tables (FileNames, FunctionNames, FileLocations, StackFrames)" in page
    tables = [ln for ln in lines if "FileLocations" in ln or "file_name_id" in ln]
    assert tables and all('class="l fb' in ln for ln in tables)
    assert 'id="ir-unfold"' in page  # the one toggle
    full = (await bench_client.get(f"/api/v1/jobs/{job_id}/artifacts/hlo")).text
    assert "FileLocations" in full and "stack_frame_id=" in full and "metadata={" in full


async def test_search_without_javascript_filters_on_the_server(
    bench_client: httpx.AsyncClient, attention: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, attention)
    page = (await bench_client.get(f"/runs/{job_id}/ir/hlo", params={"q": "FUSION("})).text
    hits = re.findall(r'<div class="l[^"]* hit" id="L(\d+)"', page)
    expected = sum("fusion(" in line.lower() for line in attention["artifacts"]["hlo"].splitlines())
    assert expected > 0 and len(hits) == expected
    assert f"{expected} matching line" in page
    nothing = (await bench_client.get(f"/runs/{job_id}/ir/hlo", params={"q": "no-such-op"})).text
    assert "0 matching lines" in nothing and 'class="l' not in nothing
    too_long = await bench_client.get(f"/runs/{job_id}/ir/hlo", params={"q": "x" * 201})
    assert too_long.status_code == 422 and "q" in too_long.text


async def test_the_summary_explains_each_fusion_with_its_source_lines(
    bench_client: httpx.AsyncClient, attention: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, attention)
    run = (await bench_client.get(f"/runs/{job_id}.json")).json()["run"]
    explained = {e["name"]: e for e in run["hlo_explained"]}
    fusions = [e for e in explained.values() if e["op"] == "fusion"]
    assert len(fusions) == len(run["hlo_summary"]["fusions"]) > 0
    softmax = str(_line_of(attention["source"], "jax.nn.softmax"))
    assert any(softmax in e["source"] for e in fusions)
    for e in fusions:
        assert e["kind"] and e["shape"].startswith("f32[") and e["bytes"] > 0
        assert e["made_by"] is None  # no pipeline captured: no pass named
    page = (await bench_client.get(f"/runs/{job_id}")).text
    assert "Each fusion, library call and collective" in page
    assert f"/runs/{job_id}/ir/hlo?src={softmax}" in page


def test_shape_bytes_counts_every_array() -> None:
    from workers.protocol.hlo import shape_bytes

    assert shape_bytes("f32[2,64]{1,0}") == 512
    assert shape_bytes("(bf16[8]{0}, pred[3]{0})") == 19
    assert shape_bytes("f32[]") == 4 and shape_bytes("token[]") is None


async def test_source_line_numbers_of_thousands_of_digits_break_neither_the_post_nor_the_pages(
    bench_client: httpx.AsyncClient,
) -> None:
    from tests.app.bench_fakes import MATMUL, FakeWorker, run_result

    big = "9" * 5000
    worker = FakeWorker(bench_client)
    await worker.register()
    job_id = (await bench_client.post("/api/v1/jobs", json=MATMUL)).json()["id"]
    grant = await worker.lease()
    assert grant is not None
    hlo = (
        'HloModule m\n\nFileNames\n1 "/x/y.py"\n\nFileLocations\n'
        f"1 {{file_name_id=1 function_name_id=1 line={big} end_line=1}}\n{big} {{line=3}}\n\n"
        f"StackFrames\n1 {{file_location_id={big} parent_frame_id=1}}\n\n"
        "ENTRY %main {\n"
        '  %a = f32[2] parameter(0), metadata={op_name="a" stack_frame_id=1}\n'
        f'  ROOT %b = f32[2] add(%a, %a), metadata={{source_file="/x/y.py" source_line={big}}}\n'
        "}\n"
    )
    artifacts = {
        "jaxpr": "{ lambda ; a:f32[2]. let\n"
        f"    b:f32[2] = add a a  # /x/y.py:{big}\n  in (b,) }}",
        "stablehlo": "module {\n  %0 = stablehlo.add %a, %a loc(#loc1)\n}\n"
        f'#loc1 = loc("/x/y.py":{big}:3)\n',
        "hlo": hlo,
    }
    result = run_result(grant["spec"]) | {"artifacts": artifacts}
    r = await worker.post("result", {"worker_id": worker.id, "job_id": job_id, "result": result})
    assert r.status_code == 200, r.text
    for name, words in (("jaxpr", "add a a"), ("stablehlo", "stablehlo.add"), ("hlo", "add(")):
        page = await bench_client.get(f"/runs/{job_id}/ir/{name}")
        assert page.status_code == 200, (name, page.text[:300])
        assert words in unescape(re.sub(r"<[^>]+>", "", page.text)), name


async def test_the_explained_table_sorts_by_bytes_without_javascript(
    bench_client: httpx.AsyncClient, attention: dict[str, Any]
) -> None:
    job_id = await post_run(bench_client, attention)
    page = (await bench_client.get(f"/runs/{job_id}")).text
    link = f'href="/runs/{job_id}?explain=bytes#explain-h"'
    assert link in page
    sorted_page = (await bench_client.get(f"/runs/{job_id}?explain=bytes")).text
    table = sorted_page.split('id="explain-h"', 1)[1].split("</table>", 1)[0]
    shown = [int(b.replace(",", "")) for b in re.findall(r"<td>([\d,]+)</td>", table)]
    assert shown == sorted(shown, reverse=True) and len(shown) > 1
    assert "in program order" in table
