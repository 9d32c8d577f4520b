"""The run page's CUDA panel: the chosen kernel, its resources and the library comparison.

Built from a `cuda` run's `kernel_resources` and `extra["cuda"]` / `extra["comparison"]`
(written by workers.run.cuda); None for every other path, so the panel is absent there.
"""

from __future__ import annotations

from typing import Any

from app.pages.runs.plots import format_seconds
from workers.protocol import PathId, RunResult, StageId


def _rate(value: Any, unit: str) -> str:
    return f"{value / 1e9:.3g} {unit}" if isinstance(value, int | float) and value > 0 else "—"


def _seconds(value: Any) -> str:
    return format_seconds(float(value)) if isinstance(value, int | float) else "—"


def _facts(value: Any) -> dict[str, Any]:
    """A dict from `extra` as stored; the gate checks its types (`CudaFacts`), but a run
    stored before it did may hold anything."""
    return value if isinstance(value, dict) else {}


def _grouped(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive identical launches folded into one entry with a count."""
    groups: list[dict[str, Any]] = []
    for launch in launches:
        same = groups and all(groups[-1][k] == launch.get(k) for k in ("kernel", "grid", "block"))
        if same:
            groups[-1]["count"] += 1
        else:
            groups.append({**launch, "count": 1})
    return groups


def cuda_view(run: RunResult) -> dict[str, Any] | None:
    """What the CUDA panel shows for `run`; None unless the run is on the cuda path."""
    if run.job.path is not PathId.CUDA:
        return None
    facts = _facts(run.extra.get("cuda"))
    build = _facts(facts.get("build"))
    timing = (
        "read from the build cache"
        if build.get("cache") == "hit"
        else f"PTX in {_seconds(build.get('ptx_s') or 0)}, "
        f"cubin in {_seconds(build.get('cubin_s') or 0)}"
    )
    comparison = [
        {
            "subject": row.get("subject") or "",
            "boundary": row.get("boundary") or "",
            "median": format_seconds(float(row["median_s"])),
            "rounds": row.get("rounds"),
            "flops": _rate(row.get("flops_per_s"), "GFLOP/s"),
            "bytes": _rate(row.get("bytes_per_s"), "GB/s"),
            "speedup": (
                f"{row['speedup_over_kernel']:.2f}×"
                if isinstance(row.get("speedup_over_kernel"), int | float)
                else "—"
            ),
        }
        for row in run.extra.get("comparison") or []
        if isinstance(row, dict) and isinstance(row.get("median_s"), int | float)
    ]
    return {
        "compile_only": StageId.EXECUTE not in run.job.stages,
        "kernel": facts.get("kernel") or "",
        "description": facts.get("description") or "",
        "source": facts.get("source") or "kernels/",
        "arch": build.get("arch") or run.environment.extra.get("target_arch", ""),
        "compiler": build.get("compiler") or "",
        "timing": timing,
        "launches": _grouped([x for x in facts.get("launches") or [] if isinstance(x, dict)]),
        "resources": [r.model_dump() for r in run.kernel_resources],
        "comparison": comparison,
    }
