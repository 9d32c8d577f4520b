"""Both MCP transports against a real `boundary serve` and its real local worker, driven by
the SDK's own client: streamable HTTP at the server's /mcp, and `boundary mcp` over stdio.

A sharded matmul compiled for v6e:2x4 shows its all-reduce and its memory fit; its memory
report lists the buffers with their source lines; its HLO pages; compared with the same
program for h100:8, the guard names the target as the one variable and the HLO diff says
what became what; a fit search over an upload's symbolic batch answers its table. Every
answer stays within its bound."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from app.mcp.bounds import MAX_ANSWER_CHARS
from tests.app.fit_fakes import symbolic_artifact
from tests.servers import ROOT, upload_exported, wait_for_target

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHARDED = {"m": 512, "n": 512, "k": 512, "dtype": "bfloat16", "sharding": "tensor"}


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's answer, read as JSON, after checking it is no error and within its bound."""
    result = await client.call_tool(tool, arguments)
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    assert len(text) <= MAX_ANSWER_CHARS
    answer: dict[str, Any] = json.loads(text)
    return answer


def over_mcp(url: str, steps: Callable[[Client], Awaitable[Any]]) -> Any:
    """`steps` run with the SDK's client of `url` (a server's /mcp), in their own loop."""

    async def session() -> Any:
        async with Client(url) as client:
            return await steps(client)

    return anyio.run(session)


@pytest.fixture(scope="module")
def compiled(bench_server: str) -> dict[str, dict[str, Any]]:
    """The sharded matmul compiled through /mcp for v6e:2x4 and for h100:8."""
    wait_for_target(bench_server, "h100:8")

    async def both(client: Client) -> dict[str, dict[str, Any]]:
        found = {}
        for target in ("v6e:2x4", "h100:8"):
            asked = {"workload": "sharded-matmul", "target": target, "params": SHARDED}
            found[target] = await call(client, "compile", {**asked, "timeout_s": 240})
        return found

    answers: dict[str, dict[str, Any]] = over_mcp(f"{bench_server}/mcp", both)
    return answers


def test_a_compile_for_a_tpu_slice_shows_its_all_reduce_and_its_fit(
    bench_server: str, compiled: dict[str, dict[str, Any]]
) -> None:
    tpu = compiled["v6e:2x4"]
    assert tpu["status"] == "done" and tpu["compiler"].startswith("libtpu")
    assert tpu["address"] == f"{bench_server}/runs/{tpu['run_id']}"
    (reduce,) = tpu["hlo_summary"]["collectives"]
    assert reduce["kind"] == "all-reduce" and reduce["bytes"] == 512 * 512 * 2
    assert reduce["groups"] == [list(range(8))]
    fit = tpu["memory_fit"]
    assert fit["fits"] is True and fit["over_bytes"] == 0 and fit["hbm_bytes"] == 32 * 2**30
    assert fit["usable_bytes"] is not None and fit["usable_bytes"] < fit["hbm_bytes"]
    assert fit["verdict"].startswith("Fits: ")
    assert tpu["warnings"][0].startswith("Compiled without the hardware")


def test_memory_ir_and_compare_read_the_runs_it_made(
    bench_server: str, compiled: dict[str, dict[str, Any]]
) -> None:
    a, b = compiled["v6e:2x4"]["run_id"], compiled["h100:8"]["run_id"]

    async def read(client: Client) -> tuple[dict[str, Any], ...]:
        memory = await call(client, "memory", {"run_id": a, "top": 2})
        first = await call(client, "get_ir", {"run_id": a, "artifact": "hlo", "max_chars": 800})
        second = await call(client, "get_ir", {"run_id": a, "offset": first["next_offset"],
                                               "max_chars": 800})  # fmt: skip
        compare = await call(client, "compare", {"a": a, "b": b})
        return memory, first, second, compare

    memory, first, second, compare = over_mcp(f"{bench_server}/mcp", read)
    assert memory["peak_make_up"]["output"] == 512 * 512 * 2 and memory["buffers_listed"] == 2
    top = memory["top_buffers"][0]
    # The matmul's own line (the HLO reader reads jax 0.10's stack frames one higher than
    # they print, which put it on the line of its `def` before).
    assert top["kind"] == "output" and top["source"].endswith("sharded_matmul.py:51")
    assert first["text"].startswith("HloModule jit_sharded_matmul") and first["chars"] == 800
    assert second["offset"] == 800 and first["total_chars"] == second["total_chars"] > 1600
    assert compare["guard"]["comparable"] is True
    assert compare["guard"]["experimental"] == [{"variable": "target", "a": "v6e:2x4",
                                                 "b": "h100:8"}]  # fmt: skip
    assert any("all-reduce is on both sides" in s for s in compare["hlo_diff"]["sentences"])
    assert compare["hlo_diff"]["collectives"][0]["bytes_a"] == 512 * 512 * 2


def test_a_fit_search_over_an_uploads_symbolic_batch_answers_its_table(
    bench_server: str,
) -> None:
    wait_for_target(bench_server, "h100:1")
    artifact = upload_exported(bench_server, symbolic_artifact())
    search = {"artifact": artifact, "dimension": "b", "lo": 8, "hi": 1024, "step": 8,
              "targets": ["h100:1"], "timeout_s": 240}  # fmt: skip

    async def fit(client: Client) -> dict[str, Any]:
        return await call(client, "fit", search)

    answer = over_mcp(f"{bench_server}/mcp", fit)
    assert answer["status"] == "done" and answer["dimension"] == "b"
    (row,) = answer["table"]
    assert row["target"] == "h100:1" and row["status"] == "found"
    assert row["largest_fitting"] == 1024 and row["largest_is_hi"] is True
    assert row["non_monotone"] is False and row["non_monotone_probes"] == []
    assert row["checks_done"] == 0 and "warning" not in row
    assert answer["address"] == f"{bench_server}/fits/{answer['fit_id']}"


def test_boundary_mcp_over_stdio_lists_compiles_and_refuses(bench_server: str) -> None:
    wait_for_target(bench_server, "h100:1")
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", "--server", bench_server],
        cwd=str(ROOT),
    )

    async def session() -> tuple[dict[str, Any], dict[str, Any], str]:
        async with Client(command) as client:
            targets = await call(client, "list_targets", {})
            small = {"workload": "matmul", "target": "h100:1", "timeout_s": 240,
                     "params": {"m": 256, "n": 256, "k": 256, "dtype": "bfloat16"}}  # fmt: skip
            compiled = await call(client, "compile", small)
            refused = await client.call_tool("compile", {**small, "target": "h100:3"})
            assert refused.is_error
            return targets, compiled, refused.content[0].text  # type: ignore[union-attr]

    targets, compiled, refused = anyio.run(session)
    h100s = next(m for m in targets["models"] if m["model"] == "h100")
    h100 = next(t for t in h100s["targets"] if t["id"] == "h100:1")
    assert h100["compiled_by"] and "executed_by" not in h100
    assert h100["usable_bytes"] == 60 * 10**9  # JAX's 0.75 of 80 GB
    assert compiled["status"] == "done" and compiled["target"] == "h100:1"
    assert compiled["memory_fit"]["fits"] is True
    assert "HTTP 422" in refused and "h100 takes a GPU count of one HGX host" in refused
