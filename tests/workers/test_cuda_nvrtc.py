"""The kernels build with NVRTC (cuda-python) where nvcc is absent, as on a machine that
has only the NVIDIA Python wheels. Skipped, with the reason, where NVRTC is missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.dependencies import require
from workers.cuda import env
from workers.cuda.build import build
from workers.cuda.plan import source_kernels
from workers.cuda.sass import parse_ptxas_log, ptx_kernels

TOOLS = env.detect_tools()


@pytest.mark.parametrize("source", ["matmul.cu", "reduction.cu"])
def test_nvrtc_builds_when_nvcc_is_absent(source: str, tmp_path: Path) -> None:
    if TOOLS.nvrtc_version is None:
        require("nvrtc", "NVRTC not importable (pip install -e . brings cuda-bindings)")
    without_nvcc = dataclasses.replace(TOOLS, nvcc=None, nvcc_version=None)
    built = build(source, "sm_90", cache_dir=tmp_path, tools=without_nvcc)
    assert built.compiler.startswith("NVRTC") and not built.cached
    assert sorted(ptx_kernels(built.ptx)) == sorted(source_kernels(source))
    found = parse_ptxas_log(built.ptxas_log, "sm_90")
    assert sorted(r.name for r in found) == sorted(source_kernels(source))
    assert all(r.registers for r in found) and built.cubin.stat().st_size > 0
    # NVRTC wrote into buffers of its own: CPython's shared b" " is still a space (it once
    # became b"\0" for the rest of the process, and every later b" " * n with it).
    spaces = b" " * 3
    assert spaces == bytes([32, 32, 32])
