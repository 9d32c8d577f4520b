"""The memory report from the compiler's own buffer assignment: real compiles on this
machine's CPU and, without the hardware, for a TPU v6e chip and an H100, each run
through the worker's path and the server's rules; the bounds (200 buffers, 2,000 curve
points) and the server's refusals on made-up reports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from workers.compiler.buffer_dump import Allocation, AssignedValue, BufferDump
from workers.compiler.memory_report import memory_report, thinned
from workers.protocol import JobSpec, MemoryReport, RunResult
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
    """What every published report must say of itself (the issue's bounds)."""
    report = run.memory_report
    assert report is not None and report.withheld is None
    curve = dict(report.timeline)
    assert max(curve.values()) == report.peak_bytes == curve[report.peak_step]
    assert live_at_peak_bytes(report) + report.unattributed_bytes == report.peak_bytes
    assert sum(report.by_kind.values()) == live_at_peak_bytes(report)
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
    # CPU: arguments + outputs + temporaries (its own peak leaves the temporaries out).
    assert report.compared_bytes == (ma.argument_bytes or 0) + (ma.output_bytes or 0) + (
        ma.temp_bytes or 0
    ) - (ma.alias_bytes or 0)
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
    assert report.compared_rule.startswith("memory_analysis()")


@pytest.mark.slow
def test_an_uploaded_programs_buffers_name_the_users_lines(
    own_exports: dict[str, Any], tmp_path: Path
) -> None:
    from workers.files import FileCache

    files = FileCache(tmp_path / "files")
    forward = own_exports["forward"]
    params = {"artifact": files.put(forward.artifact.read_bytes())}
    body = {"workload": "exported", "path": "jax-tpu", "target": "v6e:1x1", "params": params}
    job = JobSpec.model_validate({**body, "stages": ["compile"], "dumps": "later"})
    report = holds_together(run_job(job, files_dir=files.directory))
    sources = {b.source.rsplit(":", 1)[0] for b in report.buffers if b.source}
    assert any(s.endswith("tests/workers/own_model.py") for s in sources)
    assert not [s for s in sources if "/workers/export/" in s]


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


def published(report: MemoryReport) -> MemoryReport | None:
    return published_report(
        report, tpu=False, argument=64, output=0, temp=4 * 10, alias=0, peak=None
    )


def test_the_server_withholds_a_report_whose_figures_do_not_add_up() -> None:
    report = memory_report(plan(values=10, steps=10), None, source="made up")
    kept = published(report)
    assert kept is not None and kept.withheld is None and published(kept) == kept
    inflated = report.model_copy(update={"unattributed_bytes": report.unattributed_bytes + 1})
    refused = published(inflated)
    assert refused is not None and refused.withheld and "add up" in refused.withheld
    assert refused.buffers == [] and refused.timeline == [] and published(refused) == refused
    far = published_report(report, tpu=False, argument=640, output=0, temp=40, alias=0, peak=None)
    assert far is not None and far.withheld and "more than 1%" in far.withheld
    assert far.compared_bytes == 680 and far.peak_bytes == report.peak_bytes
