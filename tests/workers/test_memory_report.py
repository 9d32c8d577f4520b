"""The memory report from the compiler's own buffer assignment: real compiles on this
machine's CPU and, without the hardware, for a TPU v6e chip and an H100, each run
through the worker's path and the server's rules; an uploaded program's buffers named by
the user's lines (the library's beside them) and its parameters by their paths; on
made-up plans, the rule that the peak adds up (values sharing bytes, an output's buffer
lent to a temporary, a TPU's VMEM block), the bounds (200 buffers, 2,000 curve points)
and the server's refusals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from workers.compiler.buffer_dump import Allocation, AssignedValue, BufferDump
from workers.compiler.memory_report import memory_report, thinned
from workers.compiler.source_tags import place_positions
from workers.protocol import JobSpec, MemoryReport, RunResult
from workers.protocol.hlo import Frame, read_hlo
from workers.protocol.memory import (
    MAX_BUFFERS,
    MAX_TIMELINE,
    live_at_peak_bytes,
    published_report,
)
from workers.run.engine import run_job

MATMUL = "workers/workloads/matmul.py"


def compiled(
    workload: str, path: str, target: str | None, tmp_path: Path, **params: Any
) -> RunResult:
    body: dict[str, Any] = {"workload": workload, "path": path, "params": params}
    if target is not None:
        body |= {"target": target, "stages": ["compile"], "dumps": "later"}
    else:
        body |= {"measure": {"samples": 3}}
    return run_job(JobSpec.model_validate(body), cache_dir=tmp_path / "cache")


def holds_together(run: RunResult) -> MemoryReport:
    """What every published report must say of itself: it adds up to a peak within 1% of
    memory_analysis()'s, with under 5% of it unattributed."""
    report = run.memory_report
    assert report is not None and report.withheld is None and report.difference is None
    curve = dict(report.timeline)
    assert max(curve.values()) == report.peak_bytes == curve[report.peak_step]
    counted = sum(k.counted_bytes for k in report.blocks)
    assert live_at_peak_bytes(report) + counted + report.unattributed_bytes == report.peak_bytes
    assert sum(report.by_kind.values()) == live_at_peak_bytes(report)
    assert report.unattributed_bytes < 0.05 * report.peak_bytes
    assert report.compared_bytes is not None
    assert abs(report.peak_bytes - report.compared_bytes) <= 0.01 * report.compared_bytes
    assert [b.bytes for b in report.buffers] == sorted(
        (b.bytes for b in report.buffers), reverse=True
    )
    hlo = run.artifacts.hlo or ""
    # Each buffer at the peak names its one defining instruction (bytes two values share
    # there are given to one of them).
    assert all(len(b.instructions) == 1 for b in report.buffers if b.live_at_peak)
    for b in report.buffers:
        assert b.live[0] <= b.live[1] < report.steps
        assert b.instructions and all(
            re.search(rf"%?{re.escape(i)} = ", hlo) for i in b.instructions
        )
    return report


def test_a_cpu_run_reports_what_the_compiler_planned(tmp_path: Path) -> None:
    run = compiled(
        "attention", "jax-cpu", None, tmp_path, batch=1, heads=2, seq_len=64, head_dim=32
    )
    report = holds_together(run)
    assert run.memory_analysis is not None
    ma = run.memory_analysis
    # CPU: its own peak and its temporaries' block, which that peak leaves out.
    assert report.compared_bytes == (ma.peak_bytes or 0) + (ma.temp_bytes or 0)
    assert report.by_kind["parameter"] == ma.argument_bytes
    assert {b.kind for b in report.buffers} >= {"parameter", "output"}
    assert report.cost and "timed compile also wrote" in report.cost


def test_a_v6e_compile_reads_its_tiled_layouts_and_the_users_lines(tmp_path: Path) -> None:
    run = compiled(
        "matmul", "jax-tpu", "v6e:1x1", tmp_path, m=1000, n=1000, k=1000, dtype="bfloat16"
    )
    report = holds_together(run)
    output = next(b for b in report.buffers if b.kind == "output")
    assert output.layout is not None and "T(8,128)(2,1)" in output.layout
    assert output.source is not None and output.source.split(":")[0].endswith(MATMUL)
    assert output.op_name is not None and "dot_general" in output.op_name
    assert run.target is not None and run.target.compile_timing
    assert "xla_dump_to" in run.target.compile_timing


def test_bf16_on_v6e_pads_shapes_that_are_not_tile_multiples_and_only_those(
    tmp_path: Path,
) -> None:
    odd = holds_together(
        compiled("matmul", "jax-tpu", "v6e:1x1", tmp_path, m=1000, n=1000, k=1000, dtype="bfloat16")
    )
    even = holds_together(
        compiled("matmul", "jax-tpu", "v6e:1x1", tmp_path, m=1024, n=1024, k=1024, dtype="bfloat16")
    )
    assert odd.padding_bytes > 0
    padded = [b for b in odd.buffers if b.logical_bytes and b.bytes > b.logical_bytes]
    assert padded and all(b.shape == "bf16[1000,1000]" for b in padded)
    assert even.padding_bytes == 0
    assert all(b.bytes == b.logical_bytes for b in even.buffers if b.live_at_peak)


def test_an_h100_compile_splits_the_temporary_block_into_its_values(tmp_path: Path) -> None:
    run = compiled(
        "attention", "jax-gpu", "h100:1", tmp_path, batch=1, heads=4, seq_len=256, head_dim=64
    )
    report = holds_together(run)
    temporaries = [b for b in report.buffers if b.kind == "temporary"]
    # XLA:GPU puts every temporary in one preallocated allocation: several values in it.
    assert len({b.allocation for b in temporaries}) == 1 < len(temporaries)
    assert any(b.source and "attention.py" in b.source for b in temporaries)
    # XLA:GPU's own peak, to the byte: the block's values at the peak's step, each byte once.
    assert run.memory_analysis is not None
    assert report.peak_bytes == report.compared_bytes == run.memory_analysis.peak_bytes
    assert report.compared_rule.startswith("XLA:GPU's own peak")
    [block] = report.blocks
    assert block.live_bytes <= block.bytes and block.set_by is not None


@pytest.mark.slow
def test_an_uploaded_programs_buffers_name_the_users_lines(
    own_exports: dict[str, Any], tmp_path: Path
) -> None:
    """The tests' own optax train step, uploaded: its buffers name the user's lines with
    optax's beside them, its parameters their paths (`params/…`, never `leaves[3]`)."""
    from workers.files import FileCache

    files = FileCache(tmp_path / "files")
    train = own_exports["train"]
    params = {"artifact": files.put(train.artifact.read_bytes())}
    body = {"workload": "exported", "path": "jax-gpu", "target": "h100:1", "params": params}
    job = JobSpec.model_validate({**body, "stages": ["compile"], "dumps": "later"})
    report = holds_together(run_job(job, files_dir=files.directory))
    live = [b for b in report.buffers if b.live_at_peak]
    named = [b for b in live if b.source]
    mine = [b for b in named if b.source and "tests/workers/own_model.py:" in b.source]
    assert named and len(mine) >= len(named) / 2
    assert not [b for b in report.buffers if b.source and "/workers/export/" in b.source]
    assert any(b.library and "/optax/" in b.library for b in mine)
    paths = {b.parameter_path for b in live if b.kind == "parameter"}
    assert "params/embed/embedding" in paths and "tokens" in paths
    assert not [p for p in paths if p is None or p.startswith("leaves")]


def test_an_uploaded_programs_hlo_carries_the_whole_stack_and_the_argument_paths() -> None:
    """The source positions written into a compiled upload's HLO are read back by the one
    reader as a stack: the user's frame, the library's inside it, a parameter's path."""
    hlo = (
        "HloModule jit_call, is_scheduled=true\n\n"
        "ENTRY %main.4 (leaves_0_.1: f32[4]) -> f32[4] {\n"
        '  %leaves_0_.1 = f32[4]{0} parameter(0), metadata={op_name="leaves[0]"}\n'
        "  ROOT %multiply.2 = f32[4]{0} multiply(%leaves_0_.1, %leaves_0_.1), "
        'metadata={op_name="jit(call)/mul#0"}\n'
        "}\n"
    )
    flax = "/venv/lib/python3.11/site-packages/flax/nnx/nn/linear.py"
    location = (
        f'loc("jit(call)/mul"(callsite("Linear.__call__"("{flax}":422:8 to 428:5) at '
        'callsite("forward"("/home/me/model.py":21:4) at "step"("/home/me/model.py":40:2)))))'
    )
    placed = read_hlo(place_positions(hlo, {0: location}, own=lambda _: False, names=("params/w",)))
    mul = placed.by_name["multiply.2"]
    assert mul.op_name == "jit(call)/mul" and mul.source is not None
    assert mul.source.user == Frame("/home/me/model.py", 21, "forward")
    assert mul.source.library == Frame(flax, 422, "Linear.__call__")
    assert [f.line for f in mul.source.stack] == [422, 21, 40]
    assert placed.by_name["leaves_0_.1"].parameter_path == "params/w"


# --- the bounds, and the server's refusals, on made-up plans -----------------------------


def plan(values: int, steps: int) -> BufferDump:
    """A heap block holding `values` values one after another, plus one parameter."""
    parameter = Allocation(
        0, 64, 0, 0, False, False, False, False, (AssignedValue("p", "p", 64, 0, "f32[16]{0}"),)
    )
    heap = tuple(
        AssignedValue(f"v{i}", f"v{i}", 4 * (i + 1), 0, f"f32[{i + 1}]{{0}}") for i in range(values)
    )
    block = Allocation(1, 4 * values, 0, None, False, False, False, True, heap)
    sequence = tuple(f"v{i}" for i in range(steps))
    ranges = {"p": (0, steps - 1)} | {f"v{i}": (i % steps, i % steps) for i in range(values)}
    return BufferDump((parameter, block), sequence, ranges)


def test_a_report_keeps_200_buffers_and_counts_the_rest() -> None:
    report = memory_report(plan(values=500, steps=500), None, source="made up")
    assert len(report.buffers) == MAX_BUFFERS
    assert report.other.count == 500 + 1 - MAX_BUFFERS
    assert live_at_peak_bytes(report) + report.unattributed_bytes == report.peak_bytes
    assert report.buffers[0].live_at_peak  # the peak's own buffers are listed first


def test_the_curve_is_thinned_to_2000_points_keeping_the_peak() -> None:
    curve = [i % 7 for i in range(10_001)]
    curve[6_543] = 99
    points = thinned(curve, 6_543)
    assert len(points) <= MAX_TIMELINE and [6_543, 99] in points
    report = memory_report(plan(values=3_000, steps=3_000), None, source="made up")
    assert len(report.timeline) <= MAX_TIMELINE
    assert dict(report.timeline)[report.peak_step] == report.peak_bytes


def shared_plan(vmem: int = 0) -> BufferDump:
    """A parameter; an output whose buffer a temporary borrows before the output is
    written; a heap where one value is made in place of another (they share bytes at the
    step that hands one on); on a TPU, a VMEM block of `vmem` bytes."""

    def value(name: str, size: int, offset: int = 0) -> AssignedValue:
        return AssignedValue(name, name, size, offset, f"f32[{size // 4}]{{0}}")

    parameter = Allocation(0, 64, 0, 0, False, False, False, False, (value("p", 64),))
    output = Allocation(1, 64, 0, None, True, False, False, False, (value("t", 32), value("o", 64)))
    heap = (value("a", 64), value("b", 32, 64), value("c", 64))
    block = Allocation(2, 96, 0, None, False, False, False, True, heap)
    spaces = (Allocation(3, vmem, 1, None, False, False, False, True, (value("v", vmem),)),)
    sequence = ("a", "t", "b", "c", "o")
    ranges = {"p": (0, 4), "t": (1, 3), "o": (4, 4), "a": (0, 2), "b": (2, 3), "c": (2, 4)}
    return BufferDump(
        (parameter, output, block, *(spaces if vmem else ())), sequence, ranges | {"v": (0, 4)}
    )


def test_each_byte_of_the_peak_is_held_by_one_buffer_or_a_block() -> None:
    report = memory_report(shared_plan(), None, source="made up")
    # Heap: a, b and c are live at step 2, but c is made in place of a: 96 bytes, not 160.
    assert [b for _, b in report.timeline] == [128 + 64, 128 + 64, 128 + 96, 128 + 96, 128 + 64]
    assert report.peak_bytes == 224 and report.peak_step == 3  # the step where none share
    held = {b.instructions[0]: b.held_bytes for b in report.buffers if b.live_at_peak}
    # The output's buffer is lent to t: t holds its 32 bytes, the output the other 32.
    assert held == {"p": 64, "t": 32, "o": 32, "b": 32, "c": 64}
    assert report.unattributed_bytes == 0 and report.by_kind["output"] == 32
    [block] = report.blocks
    assert (block.bytes, block.live_bytes, block.counted_bytes) == (96, 96, 0)
    assert block.set_by is not None and block.set_by.instruction == "b"  # its top: 64 + 32
    kept = published_report(report, platform="gpu", peak=224, temp=96)
    assert kept is not None and kept.withheld is None and kept.difference is None


def test_a_tpus_vmem_block_is_counted_whole_where_libtpu_counts_it() -> None:
    report = memory_report(shared_plan(vmem=300), None, source="made up", tpu=True)
    # libtpu's peak: the parameters and outputs, and the larger of the heap (96) and VMEM.
    assert report.peak_bytes == 128 + 300 and report.on_chip_peak_bytes == 300
    vmem = next(k for k in report.blocks if k.name == "VMEM")
    assert vmem.counted_bytes == 300 and vmem.memory_space == 1
    assert live_at_peak_bytes(report) == 128 and report.unattributed_bytes == 0
    # The heap's values are not part of it; the temporary in the output's buffer is.
    assert {b.instructions[0] for b in report.buffers if b.live_at_peak} == {"p", "t", "o"}
    smaller = memory_report(shared_plan(vmem=40), None, source="made up", tpu=True)
    assert smaller.peak_bytes == 224 and all(k.counted_bytes == 0 for k in smaller.blocks)


def published(report: MemoryReport, peak: int | None = None) -> MemoryReport | None:
    return published_report(report, platform="gpu", peak=peak or report.peak_bytes, temp=40)


def test_the_server_withholds_only_a_report_that_does_not_add_up() -> None:
    report = memory_report(plan(values=10, steps=10), None, source="made up")
    kept = published(report)
    assert kept is not None and kept.withheld is None and published(kept) == kept
    inflated = report.model_copy(update={"unattributed_bytes": report.unattributed_bytes + 1})
    refused = published(inflated)
    assert refused is not None and refused.withheld and "add up" in refused.withheld
    assert refused.buffers == [] and refused.timeline == [] and published(refused) == refused
    # Two accounts that differ: both are kept, with why, and nothing is withheld.
    far = published(report, peak=10 * report.peak_bytes)
    assert far is not None and far.withheld is None and far.buffers == report.buffers
    assert far.compared_bytes == 10 * report.peak_bytes and far.difference
    assert f"{report.peak_bytes:,} bytes" in far.difference and "-90.0%" in far.difference
