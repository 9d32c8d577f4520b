"""The MCP server: Boundary's tools and the reader's cards, over one `Connect`.

`build_server(connect)` makes the same server for both transports; only `connect`
differs (app.mcp.stdio, app.mcp.mount). Every tool answers JSON text of at most
MAX_ANSWER_CHARS characters (app.mcp.bounds), and every refusal is a tool error with
the HTTP API's own message.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from app.mcp import calls
from app.mcp.api import Connect
from app.mcp.arguments import finite, refused
from app.mcp.bounds import IR_PAGE_CHARS, MAX_ANSWER_CHARS, MAX_IR_PAGE_CHARS, bounded
from app.mcp.catalog import targets_answer, workloads_answer
from app.mcp.resources import add_cards

INSTRUCTIONS = (
    "Boundary compiles real JAX programs for TPU slices (v4, v5e, v5p, v6e, TPU7x) and "
    "NVIDIA GPUs without the hardware, and times runs on real workers. Start with "
    "list_targets and list_workloads; compile a workload (or an uploaded artifact, by its "
    "id) for a target; read memory, get_ir and compare with the run ids it answers. "
    f"Answers are JSON of at most {MAX_ANSWER_CHARS:,} characters; a cut answer says "
    "truncated: true and its total_chars."
)

RunId = Annotated[str, Field(min_length=1, max_length=64, description="A run's id.")]
Target = Annotated[
    str | None,
    Field(
        max_length=40,
        description="What to compile for, e.g. v5e:1x1, v6e:2x4, v5p:2x2x1, h100:8, b200:1.",
    ),
]
Workload = Annotated[
    str | None, Field(max_length=64, description="A catalog workload's name (list_workloads).")
]
Artifact = Annotated[
    str | None,
    Field(
        pattern=r"^[0-9a-f]{64}$",
        description="Instead of a workload: an uploaded exported function's id (its "
        "SHA-256, from `boundary export-fn --upload` or POST /api/v1/artifacts).",
    ),
]
Params = Annotated[
    dict[str, Any] | None,
    Field(description='The workload\'s parameters, e.g. {"m": 1024, "dtype": "bfloat16"}.'),
]
Path = Annotated[
    str | None,
    Field(
        max_length=16,
        description="jax-tpu, jax-gpu, cuda or jax-cpu; by default the target's own "
        "(jax-cpu without a target).",
    ),
]
Wait = Annotated[
    float,
    Field(
        ge=0,
        le=600,
        allow_inf_nan=False,
        description="Seconds to wait for the answer before returning its id.",
    ),
]
CompilerOptions = Annotated[
    dict[str, Any] | None,
    Field(
        description="XLA options for the compile, as the jobs API takes them, e.g. "
        '{"xla_gpu_enable_triton_gemm": false}: from the allow-list of the target\'s '
        "compiler (a controlled variable of a comparison, or its one experimental variable)."
    ),
]


def build_server(connect: Connect) -> MCPServer:
    """Boundary's MCP server: its tools and resources, each reaching the API by `connect`."""
    # WARNING: the SDK configures the root logger when none is set up; at INFO it would
    # log every request of every tool call into the server's log.
    server = MCPServer("boundary", instructions=INSTRUCTIONS, log_level="WARNING")
    _catalog_tools(server, connect)
    _compile_tools(server, connect)
    _run_tool(server, connect)
    _search_tools(server, connect)
    add_cards(server, connect)
    return server


def _catalog_tools(server: MCPServer, connect: Connect) -> None:
    @server.tool(structured_output=False)
    async def list_targets(ctx: Context) -> str:
        """Every target Boundary compiles for (TPU slices of v4, v5e, v5p, v6e and TPU7x;
        NVIDIA GPU hosts), by device model: how many devices, what one device may hold
        (usable_bytes: libtpu's own figure on a TPU, JAX's share on a GPU) beside the
        published HBM, the path it names, and which connected workers compile for it
        without the hardware or could run it on real chips."""
        async with connect(ctx) as api:
            listing = await api.get("/api/v1/targets")
        return bounded(targets_answer(listing))

    @server.tool(structured_output=False)
    async def list_workloads(ctx: Context, workload: Workload = None) -> str:
        """The catalog's workloads with their bounded parameters (type, range, default).
        Give `workload` for one of them with each parameter's description."""
        async with connect(ctx) as api:
            listing = (await api.get("/api/v1/workloads"))["data"]
        try:
            return bounded(workloads_answer(listing, workload))
        except LookupError as exc:
            raise refused("workload", str(exc)) from None


def _compile_tools(server: MCPServer, connect: Connect) -> None:
    @server.tool(name="compile", structured_output=False)
    async def compile_(
        ctx: Context,
        *,
        target: Target = None,
        workload: Workload = None,
        artifact: Artifact = None,
        params: Params = None,
        path: Path = None,
        compiler_options: CompilerOptions = None,
        run_id: Annotated[
            str | None, Field(max_length=64, description="Keep waiting for this compile.")
        ] = None,
        timeout_s: Wait = 120,
    ) -> str:
        """Compile a catalog workload or an uploaded artifact for a target (stages: compile
        only, nothing executes). Waits up to timeout_s, then answers the run's id and
        address, the optimized HLO's summary (fusions, collectives with bytes per device)
        and the memory fit (peak + code per device against its usable bytes, the
        published HBM beside them: fits, or by how much not), with the parameters, dims and
        compiler_options it compiled with. A compile still running answers its run_id: call
        again with it."""
        body = None
        if not run_id:
            body = calls.job_body(
                workload, artifact, params or {}, path, target, compiler_options=compiler_options
            )
        async with connect(ctx) as api:
            return bounded(await calls.compile_run(api, body, run_id, timeout_s))

    @server.tool(structured_output=False)
    async def get_ir(
        ctx: Context,
        run_id: RunId,
        artifact: Annotated[
            str,
            Field(
                max_length=32,
                description="jaxpr, stablehlo, hlo (optimized), ptx, sass, mosaic, bundles, "
                "triton, mosaic_gpu or pipeline: those the run made (compile lists them).",
            ),
        ] = "hlo",
        offset: Annotated[int, Field(ge=0, description="Character to start at.")] = 0,
        max_chars: Annotated[
            int, Field(ge=1, le=MAX_IR_PAGE_CHARS, description="Characters in this page.")
        ] = IR_PAGE_CHARS,
    ) -> str:
        """One page of one artifact of a run: its text from `offset`, at most max_chars
        characters, with total_chars and next_offset (null on the last page)."""
        async with connect(ctx) as api:
            return bounded(await calls.ir_page(api, run_id, artifact, offset, max_chars))

    @server.tool(structured_output=False)
    async def memory(
        ctx: Context,
        run_id: RunId,
        top: Annotated[int, Field(ge=1, le=50, description="Buffers to list.")] = 10,
    ) -> str:
        """A compiled run's memory report for one device: the peak (memory_analysis()'s, by
        its platform's rule) and what makes it up (parameters, outputs, temporaries, the
        blocks reserved whole and what sets their size), and the largest buffers with their
        shape, live range, the line of your code that made them (the library's beside it)
        or a parameter's argument path (XLA's own buffer assignment). A run without a
        report says why."""
        async with connect(ctx) as api:
            return bounded(await calls.memory_report(api, run_id, top))


def _run_tool(server: MCPServer, connect: Connect) -> None:
    @server.tool(structured_output=False)
    async def run(
        ctx: Context,
        *,
        workload: Workload = None,
        artifact: Artifact = None,
        params: Params = None,
        path: Path = None,
        target: Target = None,
        measure: Annotated[
            dict[str, Any] | None,
            Field(description='Measurement options, e.g. {"mode": "latency", "samples": 20}.'),
        ] = None,
        compiler_options: CompilerOptions = None,
        run_id: Annotated[
            str | None, Field(max_length=64, description="Look at this run again.")
        ] = None,
        timeout_s: Wait = 120,
    ) -> str:
        """A timed run (compile and execute) on a real worker. Answers only what the
        result gate published: validity, the correctness check, statistics per timing
        boundary. With no worker able to run it (e.g. no real GPU attached), it answers at
        once with the reason it waits."""
        body = None
        if not run_id:
            body = calls.job_body(
                workload, artifact, params or {}, path, target, compiler_options=compiler_options
            )
            body["stages"] = ["compile", "execute"]
            finite("measure", measure)
            if measure:
                body["measure"] = measure
        async with connect(ctx) as api:
            return bounded(await calls.timed_run(api, body, run_id, timeout_s))


def _search_tools(server: MCPServer, connect: Connect) -> None:
    @server.tool(structured_output=False)
    async def compare(ctx: Context, a: RunId, b: RunId) -> str:
        """Two runs side by side: the guard's verdict (what is held equal, the one variable,
        or why no ratio is fair), each side's compile and memory, and the HLO diff's
        summary sentences and collectives."""
        async with connect(ctx) as api:
            return bounded(await calls.compare_runs(api, a, b))

    @server.tool(structured_output=False)
    async def fit(
        ctx: Context,
        *,
        dimension: Annotated[
            str,
            Field(
                max_length=64,
                description="The integer searched: a workload's integer parameter or an "
                "artifact's symbolic dimension.",
            ),
        ] = "batch",
        lo: Annotated[int, Field(ge=0, description="Smallest value tried.")] = 1,
        hi: Annotated[int, Field(ge=0, description="Largest value tried.")] = 1024,
        targets: Annotated[
            list[str] | None, Field(max_length=8, description='Targets, e.g. ["h100:1"].')
        ] = None,
        workload: Workload = None,
        artifact: Artifact = None,
        params: Params = None,
        step: Annotated[int, Field(ge=1, description="Values are lo + k × step.")] = 1,
        fit_id: Annotated[
            str | None, Field(max_length=64, description="Keep waiting for this search.")
        ] = None,
        timeout_s: Wait = 180,
    ) -> str:
        """The largest value of one integer whose compile fits each target's memory, proved
        by compiles on either side. Answers the table when done, or the search's id while it
        runs (call again with fit_id)."""
        body = None
        if not fit_id:
            if (workload is None) == (artifact is None):
                raise refused(
                    "workload, artifact", "give either workload (a catalog name) or artifact"
                )
            finite("params", params)
            program = {"workload": workload} if workload else {"artifact": artifact}
            body = {**program, "params": params or {}, "dimension": dimension,
                    "range": [lo, hi], "step": step, "targets": targets or []}  # fmt: skip
        async with connect(ctx) as api:
            return bounded(await calls.fit_search(api, body, fit_id, timeout_s))
