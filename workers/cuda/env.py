"""What this machine has for the CUDA path, found by looking, never assumed.

- `detect_tools()`: the CUDA compiler (nvcc, else NVRTC through cuda-python) and a SASS
  disassembler (cuobjdump or nvdisasm), searched on PATH, in CUDA_HOME and in the NVIDIA
  PyPI wheels (`site-packages/nvidia/*/bin`).
- `probe_gpu()`: whether CuPy sees an NVIDIA GPU, and which.
- `gpu_facts()`: the GPU environment record of a run: driver, CUDA runtime and cuBLAS
  versions, clocks, power limit, ECC and MIG state (NVML through nvidia-ml-py where it is
  installed, else nvidia-smi).
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ARCH = "sm_90"
"""The architecture compiled for when no GPU says otherwise (H100 and H200)."""

ARCH_ENV = "BOUNDARY_CUDA_ARCH"
"""Environment variable naming the architecture a compile-only job targets."""

COMPILER_ENV = "BOUNDARY_CUDA_COMPILER"
"""`nvrtc` forces NVRTC even where nvcc is found; `nvcc` forbids the NVRTC fallback."""

_ARCH = re.compile(r"^sm_(\d{2,3})[af]?$")


def check_arch(arch: str) -> str:
    """`arch` if it names a real SM architecture (sm_90, sm_100, sm_90a), else ValueError."""
    if not _ARCH.match(arch):
        raise ValueError(f"arch: {arch!r} is no SM architecture (expected e.g. sm_90 or sm_100)")
    return arch


def _wheel_dirs(sub: str) -> list[Path]:
    """`nvidia/*/{sub}` folders of the NVIDIA wheels on sys.path, e.g. nvidia/cu13/bin."""
    found: list[Path] = []
    for entry in sys.path:
        for match in sorted(glob.glob(os.path.join(entry, "nvidia", "*", sub))):
            path = Path(match)
            if path.is_dir() and path not in found:
                found.append(path)
    return found


def find_tool(name: str) -> str | None:
    """The path of CUDA tool `name`, or None.

    Order: BOUNDARY_<NAME> (e.g. BOUNDARY_NVCC), PATH, $CUDA_HOME/bin, $CUDA_PATH/bin,
    /usr/local/cuda/bin, then the bin folders of NVIDIA wheels on sys.path.
    """
    override = os.environ.get(f"BOUNDARY_{name.upper()}")
    if override:
        return override if os.access(override, os.X_OK) else None
    on_path = shutil.which(name)
    if on_path:
        return on_path
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    candidates = [Path(root) / "bin" for root in roots if root] + _wheel_dirs("bin")
    for folder in candidates:
        tool = folder / name
        if tool.is_file() and os.access(tool, os.X_OK):
            return str(tool)
    return None


def _first_line_matching(command: list[str], pattern: str) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(pattern, done.stdout + done.stderr)
    return found.group(1) if found else None


def _nvrtc_version() -> str | None:
    """NVRTC's version through cuda-python, or None where it is missing or cannot load."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return None
    try:
        result = nvrtc.nvrtcVersion()
    except Exception:  # noqa: BLE001 - a missing libnvrtc raises the loader's own error types
        return None
    if int(result[0]) != 0:
        return None
    return f"{result[1]}.{result[2]}"


@dataclass(frozen=True)
class CudaTools:
    """The CUDA tools this machine has; None where one is missing."""

    nvcc: str | None
    nvcc_version: str | None
    nvrtc_version: str | None
    cuobjdump: str | None
    nvdisasm: str | None
    nvcc_problem: str | None = None
    """Why an nvcc that was found is not used (it failed to compile a trivial kernel)."""

    @property
    def can_compile(self) -> bool:
        """True when a CUDA compiler is present (nvcc, or NVRTC as a fallback)."""
        return self.nvcc is not None or self.nvrtc_version is not None

    @property
    def compiler(self) -> str:
        """The compiler builds use, e.g. 'nvcc 13.0.88' or 'NVRTC 13.5'."""
        if self.nvcc is not None:
            return f"nvcc {self.nvcc_version or 'unknown version'}"
        if self.nvrtc_version is not None:
            return f"NVRTC {self.nvrtc_version}"
        return "none"

    def describe(self) -> str:
        """One line naming what was found and what was not."""
        parts = [
            f"nvcc: {self.nvcc or self.nvcc_problem or 'not found'}",
            f"NVRTC: {self.nvrtc_version or 'not found (pip install cuda-python)'}",
            f"cuobjdump: {self.cuobjdump or 'not found'}",
            f"nvdisasm: {self.nvdisasm or 'not found'}",
        ]
        return "; ".join(parts)

    def facts(self) -> dict[str, str]:
        """What an environment record says about the toolchain."""
        facts = {"cuda_compiler": self.compiler}
        if self.cuobjdump or self.nvdisasm:
            facts["disassembler"] = "cuobjdump" if self.cuobjdump else "nvdisasm"
        return facts


def _nvcc_problem(nvcc: str) -> str | None:
    """None if `nvcc` compiles a trivial kernel to PTX, else why not. nvcc needs a host
    compiler even for device code, which a wheel-only machine may lack."""
    with tempfile.TemporaryDirectory(prefix="boundary-nvcc-") as folder:
        source = Path(folder) / "probe.cu"
        source.write_text('extern "C" __global__ void probe(float* x) { x[0] = 1.0f; }\n')
        command = [nvcc, "-ptx", str(source), "-o", str(Path(folder) / "probe.ptx")]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{nvcc} could not run ({exc})"
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"{nvcc} failed a trivial compile ({last[0][:200]})"
    return None


@functools.cache
def detect_tools() -> CudaTools:
    """The CUDA tools of this machine (looked up once per process). An nvcc that cannot
    compile a trivial kernel is set aside, so NVRTC serves instead where it is present."""
    choice = os.environ.get(COMPILER_ENV, "").strip().lower()
    if choice not in ("", "nvcc", "nvrtc"):
        raise ValueError(f"{COMPILER_ENV}: expected nvcc or nvrtc, got {choice[:20]!r}")
    nvcc = find_tool("nvcc") if choice != "nvrtc" else None
    problem = _nvcc_problem(nvcc) if nvcc else None
    if choice == "nvrtc":
        problem = f"not used ({COMPILER_ENV}=nvrtc)"
    if problem is not None:
        nvcc = None
    version = (
        _first_line_matching([nvcc, "--version"], r"release [\d.]+, V([\d.]+)") if nvcc else None
    )
    return CudaTools(
        nvcc=nvcc,
        nvcc_version=version,
        nvrtc_version=_nvrtc_version() if choice != "nvcc" else None,
        cuobjdump=find_tool("cuobjdump"),
        nvdisasm=find_tool("nvdisasm"),
        nvcc_problem=problem,
    )


@dataclass(frozen=True)
class GpuProbe:
    """What CuPy sees: device count, the first device's name and architecture."""

    count: int
    name: str | None = None
    arch: str | None = None
    l2_bytes: int | None = None
    reason: str | None = None
    """Why there is no usable GPU, when count is 0."""


@functools.cache
def probe_gpu() -> GpuProbe:
    """Whether CuPy sees an NVIDIA GPU (looked up once per process)."""
    try:
        import cupy
    except ImportError:
        return GpuProbe(0, reason="CuPy is not installed (pip install cupy-cuda13x)")
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install fails inside CuPy's import
        return GpuProbe(0, reason=f"CuPy failed to import: {type(exc).__name__}: {exc}")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - no driver raises CUDARuntimeError
        return GpuProbe(0, reason=f"CuPy found no usable GPU ({type(exc).__name__}: {exc})")
    if count == 0:
        return GpuProbe(0, reason="CuPy found no GPU (0 devices)")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    raw_name = props.get("name", b"")
    name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
    arch = f"sm_{props['major']}{props['minor']}"
    l2 = props.get("l2CacheSize")
    return GpuProbe(count, name=name, arch=arch, l2_bytes=int(l2) if l2 else None)


def cuda_capabilities() -> dict[str, bool]:
    """The worker capabilities `cuda_compile` and `cuda_run`, detected here and now."""
    tools = detect_tools()
    return {
        "cuda_compile": tools.can_compile,
        "cuda_run": tools.can_compile and probe_gpu().count > 0,
    }


def target_arch(requested: str | None = None) -> str:
    """The architecture to compile for: requested (a job's target), else
    $BOUNDARY_CUDA_ARCH, else the GPU's, else DEFAULT_ARCH."""
    if requested:
        return check_arch(requested)
    configured = os.environ.get(ARCH_ENV)
    if configured:
        return check_arch(configured)
    probe = probe_gpu()
    return probe.arch if probe.arch else DEFAULT_ARCH


# --- the GPU environment record ------------------------------------------------------


def _nvml_facts(index: int) -> dict[str, str]:
    import pynvml

    facts: dict[str, str] = {}
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        driver = pynvml.nvmlSystemGetDriverVersion()
        facts["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        readers: dict[str, Any] = {
            "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(
                handle, pynvml.NVML_CLOCK_MEM
            ),
            "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(
                handle, pynvml.NVML_CLOCK_SM
            ),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
            "ecc": lambda: "on" if pynvml.nvmlDeviceGetEccMode(handle)[0] else "off",
            "mig": lambda: "on" if pynvml.nvmlDeviceGetMigMode(handle)[0] else "off",
        }
        for key, read in readers.items():
            try:
                facts[key] = str(read())
            except pynvml.NVMLError as exc:
                facts[key] = f"unavailable ({exc})"
    finally:
        pynvml.nvmlShutdown()
    facts["gpu_facts_source"] = "NVML (nvidia-ml-py)"
    return facts


_SMI_FIELDS: tuple[tuple[str, str], ...] = (
    ("driver_version", "driver"),
    ("clocks.sm", "sm_clock_mhz"),
    ("clocks.mem", "memory_clock_mhz"),
    ("clocks.max.sm", "max_sm_clock_mhz"),
    ("power.limit", "power_limit_w"),
    ("ecc.mode.current", "ecc"),
    ("mig.mode.current", "mig"),
)


def _smi_facts(index: int) -> dict[str, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpu_facts_source": "none: neither nvidia-ml-py nor nvidia-smi is present"}
    query = ",".join(field for field, _ in _SMI_FIELDS)
    command = [smi, f"--id={index}", f"--query-gpu={query}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"gpu_facts_source": f"nvidia-smi failed: {exc}"}
    values = [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")]
    facts = {key: value for (_, key), value in zip(_SMI_FIELDS, values, strict=False)}
    facts["gpu_facts_source"] = "nvidia-smi"
    return facts


def cublas_module() -> Any:
    """CuPy's cuBLAS wrapper module (its location moved between CuPy releases)."""
    import importlib

    for name in ("cupy_backends.cuda.libs.cublas", "cupy.cuda.cublas"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("this CuPy has no cuBLAS wrapper (cupy_backends.cuda.libs.cublas)")


def gpu_facts(index: int = 0) -> dict[str, str]:
    """Driver, clocks, power limit, ECC and MIG state of GPU `index`, plus versions CuPy
    reports (CUDA runtime, driver API, cuBLAS). Figures that cannot be read say why."""
    import cupy

    facts: dict[str, str] = {}
    try:
        facts = _nvml_facts(index)
    except ImportError:
        facts = _smi_facts(index)
    except Exception as exc:  # noqa: BLE001 - NVML raises its own error hierarchy
        facts = _smi_facts(index)
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
    runtime = cupy.cuda.runtime
    facts["cuda_runtime"] = _cuda_version(runtime.runtimeGetVersion())
    facts["cuda_driver_api"] = _cuda_version(runtime.driverGetVersion())
    try:
        handle = cupy.cuda.device.get_cublas_handle()
        facts["cublas"] = str(cublas_module().getVersion(handle))
    except Exception as exc:  # noqa: BLE001 - report, do not fail the run
        facts["cublas"] = f"unavailable ({type(exc).__name__})"
    facts["cupy"] = str(cupy.__version__)
    props = runtime.getDeviceProperties(index)
    facts["compute_capability"] = f"{props['major']}.{props['minor']}"
    facts["sm_count"] = str(props.get("multiProcessorCount"))
    facts["l2_bytes"] = str(props.get("l2CacheSize"))
    facts["memory_bytes"] = str(props.get("totalGlobalMem"))
    return facts


def _cuda_version(encoded: int) -> str:
    """CUDA's integer version (1000 × major + 10 × minor) as text, e.g. 13000 → '13.0'."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"
