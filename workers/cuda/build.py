"""Compile `kernels/*.cu` to PTX and a cubin for one GPU architecture, with a cache.

The compiler is nvcc where it is found, else NVRTC through cuda-python (the GPU image may
carry only the Python wheels). Each build yields the PTX text, the cubin (the executable
SASS for one architecture), the assembler's resource report (`ptxas -v`) and the wall
time of each step. Builds are cached on disk by a hash of the sources, the architecture,
the compiler and its flags; a `cold` job rebuilds and overwrites its entry.

Also the build script: `python -m workers.cuda.build [--arch sm_90] [--out DIR]` (or
`kernels/build`) compiles every kernel source and prints what ptxas reported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workers.cuda.env import CudaTools, detect_tools, target_arch
from workers.cuda.plan import SOURCES

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"
"""The CUDA C++ sources (and their shared header)."""

CACHE_ENV = "BOUNDARY_CUDA_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/boundary/cuda").expanduser()

FLAGS: tuple[str, ...] = ("-std=c++17", "-O3")
"""Compiler flags every build uses (nvcc's spelling; NVRTC gets the equivalents)."""

TIMEOUT_S = 300


class BuildFailed(RuntimeError):
    """The CUDA compiler rejected a source or could not run; the message has its log."""


@dataclass(frozen=True)
class Built:
    """One source compiled for one architecture: PTX, cubin, resource report, timings."""

    source: str
    arch: str
    compiler: str
    flags: tuple[str, ...]
    ptx: str
    cubin: Path
    ptxas_log: str
    ptx_s: float
    cubin_s: float
    cached: bool
    key: str

    def facts(self) -> dict[str, object]:
        """What a run records about this build."""
        return {
            "source": f"kernels/{self.source}",
            "arch": self.arch,
            "compiler": self.compiler,
            "flags": " ".join(self.flags),
            "ptx_s": self.ptx_s,
            "cubin_s": self.cubin_s,
            "cache": "hit" if self.cached else "miss",
            "key": self.key[:16],
        }


def cache_root(jax_cache_dir: Path | None = None) -> Path:
    """Where builds are cached: $BOUNDARY_CUDA_CACHE_DIR, else beside the JAX cache
    directory a job was given (so a test's temporary cache stays private), else
    ~/.cache/boundary/cuda."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    if jax_cache_dir is not None:
        return jax_cache_dir.parent / "cuda-kernels"
    return DEFAULT_CACHE_DIR


def source_path(source: str) -> Path:
    """The path of a kernel source by file name; ValueError for an unknown one."""
    if source not in SOURCES:
        raise ValueError(f"source: no kernel source {source!r} (known: {', '.join(SOURCES)})")
    return KERNELS_DIR / source


def build_key(source: str, arch: str, compiler: str) -> str:
    """A hash of everything a build's output depends on."""
    digest = hashlib.sha256()
    for part in (source, arch, compiler, " ".join(FLAGS)):
        digest.update(part.encode() + b"\0")
    digest.update(source_path(source).read_bytes())
    for header in sorted(KERNELS_DIR.glob("*.cuh")):
        digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()


def _run(command: list[str], what: str) -> tuple[str, float]:
    """Run a compiler command; its stderr and wall time, or BuildFailed with its log."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildFailed(f"{what}: {exc}") from None
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        log = (done.stderr or done.stdout).strip()[-4000:]
        raise BuildFailed(f"{what} failed (exit {done.returncode}):\n{log}")
    return done.stderr, elapsed


def _nvcc_build(nvcc: str, source: Path, arch: str, folder: Path) -> tuple[str, str, float, float]:
    common = [*FLAGS, f"-arch={arch}", "-I", str(KERNELS_DIR), str(source)]
    ptx_file, cubin_file = folder / "module.ptx", folder / "module.cubin"
    _, ptx_s = _run([nvcc, "-ptx", *common, "-o", str(ptx_file)], f"nvcc -ptx {source.name}")
    log, cubin_s = _run(
        [nvcc, "-cubin", "-Xptxas", "-v", *common, "-o", str(cubin_file)],
        f"nvcc -cubin {source.name}",
    )
    return ptx_file.read_text(encoding="utf-8"), log, ptx_s, cubin_s


def _nvrtc_compile(text: str, name: str, options: list[str]) -> tuple[bytes, str, str, float]:
    """One NVRTC compile: (PTX or cubin bytes, log, which one, seconds)."""
    from cuda.bindings import nvrtc

    def check(result: tuple[object, ...], step: str) -> tuple[object, ...]:
        if int(result[0]) != 0:  # type: ignore[call-overload]
            raise BuildFailed(f"NVRTC {step} {name}: {result[0]}")
        return result

    started = time.perf_counter()
    _, program = check(nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], []), "create")
    encoded = [option.encode() for option in options]
    status = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
    _, size = check(nvrtc.nvrtcGetProgramLogSize(program), "log")
    # NVRTC writes into the buffer it is given: a bytearray, never bytes (`b" " * 1` is
    # CPython's shared one-byte object, and writing into it changed every b" " in the
    # process to b"\0").
    buffer = bytearray(int(size))  # type: ignore[call-overload]
    nvrtc.nvrtcGetProgramLog(program, buffer)
    log = bytes(buffer).rstrip(b"\0 ").decode(errors="replace")
    if int(status[0]) != 0:
        raise BuildFailed(f"NVRTC compile of {name} failed:\n{log[-4000:]}")
    real = any(option.startswith("--gpu-architecture=sm_") for option in options)
    get_size = nvrtc.nvrtcGetCUBINSize if real else nvrtc.nvrtcGetPTXSize
    get = nvrtc.nvrtcGetCUBIN if real else nvrtc.nvrtcGetPTX
    _, size = check(get_size(program), "size")
    output = bytearray(int(size))  # type: ignore[call-overload]
    check(get(program, output), "output")
    elapsed = time.perf_counter() - started
    nvrtc.nvrtcDestroyProgram(program)
    return bytes(output), log, "cubin" if real else "ptx", elapsed


def _nvrtc_build(source: Path, arch: str, folder: Path) -> tuple[str, str, float, float]:
    text = source.read_text(encoding="utf-8")
    base = ["--std=c++17", f"-I{KERNELS_DIR}"]
    virtual = "compute_" + arch.removeprefix("sm_")
    ptx, _, _, ptx_s = _nvrtc_compile(text, source.name, [*base, f"--gpu-architecture={virtual}"])
    cubin, log, _, cubin_s = _nvrtc_compile(
        text, source.name, [*base, f"--gpu-architecture={arch}", "--ptxas-options=-v"]
    )
    (folder / "module.cubin").write_bytes(cubin)
    ptx_text = ptx.rstrip(b"\0").decode()
    (folder / "module.ptx").write_text(ptx_text, encoding="utf-8")
    return ptx_text, log, ptx_s, cubin_s


def build(
    source: str,
    arch: str,
    *,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    tools: CudaTools | None = None,
) -> Built:
    """Compile kernel source `source` (e.g. 'matmul.cu') for `arch` (e.g. 'sm_90').

    With `use_cache`, a previous identical build is reused (`cached` is then True and the
    times are those of reading it). Without, the compiler runs and its entry is replaced.
    Raises BuildFailed when no compiler is present or the compiler fails.
    """
    tools = tools or detect_tools()
    if not tools.can_compile:
        raise BuildFailed(f"no CUDA compiler on this machine ({tools.describe()})")
    path = source_path(source)
    key = build_key(source, arch, tools.compiler)
    root = cache_dir or cache_root()
    entry = root / f"{path.stem}-{arch}-{key[:16]}"
    meta_file = entry / "build.json"
    if use_cache and meta_file.is_file():
        started = time.perf_counter()
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        ptx = (entry / "module.ptx").read_text(encoding="utf-8")
        log = (entry / "ptxas.log").read_text(encoding="utf-8")
        elapsed = time.perf_counter() - started
        return Built(
            source=source,
            arch=arch,
            compiler=str(meta["compiler"]),
            flags=FLAGS,
            ptx=ptx,
            cubin=entry / "module.cubin",
            ptxas_log=log,
            ptx_s=elapsed,  # the time to read the cached build: nothing was compiled
            cubin_s=0.0,
            cached=True,
            key=key,
        )
    root.mkdir(parents=True, exist_ok=True)
    # Build into a private folder, then move it into place, so concurrent builds of the
    # same key never see each other's half-written files.
    scratch = Path(tempfile.mkdtemp(prefix=f".{path.stem}-", dir=root))
    try:
        if tools.nvcc is not None:
            ptx, log, ptx_s, cubin_s = _nvcc_build(tools.nvcc, path, arch, scratch)
        else:
            ptx, log, ptx_s, cubin_s = _nvrtc_build(path, arch, scratch)
        (scratch / "ptxas.log").write_text(log, encoding="utf-8")
        meta = {"compiler": tools.compiler, "arch": arch, "ptx_s": ptx_s, "cubin_s": cubin_s}
        (scratch / "build.json").write_text(json.dumps(meta), encoding="utf-8")
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        try:
            scratch.rename(entry)
        except OSError:  # another process put the same build in place first
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Built(
        source=source,
        arch=arch,
        compiler=tools.compiler,
        flags=FLAGS,
        ptx=ptx,
        cubin=entry / "module.cubin",
        ptxas_log=log,
        ptx_s=ptx_s,
        cubin_s=cubin_s,
        cached=False,
        key=key,
    )


# --- the build script ------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Compile every kernel source for one architecture and report what ptxas said."""
    from workers.cuda.sass import disassemble, parse_ptxas_log

    parser = argparse.ArgumentParser(
        prog="kernels/build", description="Compile Boundary's CUDA kernels to PTX and cubin."
    )
    parser.add_argument(
        "--arch", help="e.g. sm_90 (H100/H200) or sm_100 (B200); default: the GPU's"
    )
    parser.add_argument("--out", type=Path, help="also copy PTX, cubin, SASS and logs here")
    parser.add_argument("--source", action="append", choices=SOURCES, help="only these sources")
    parser.add_argument("--no-cache", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    try:
        arch = target_arch(args.arch)
    except ValueError as exc:
        print(f"kernels/build: {exc}", file=sys.stderr)
        return 2
    tools = detect_tools()
    print(f"compiler {tools.compiler}; target {arch}; {tools.describe()}")
    status = 0
    for source in args.source or SOURCES:
        try:
            built = build(source, arch, use_cache=not args.no_cache, tools=tools)
        except BuildFailed as exc:
            print(f"{source}: {exc}", file=sys.stderr)
            status = 1
            continue
        timing = (
            "cached" if built.cached else f"ptx {built.ptx_s:.2f} s, cubin {built.cubin_s:.2f} s"
        )
        print(f"{source}: {timing} → {built.cubin}")
        for res in parse_ptxas_log(built.ptxas_log, arch):
            print(
                f"  {res.name:<26} {res.registers} registers, {res.shared_bytes} B shared, "
                f"{res.stack_bytes} B stack, "
                f"spills {res.spill_store_bytes}/{res.spill_load_bytes} B"
            )
        if args.out is not None:
            stem = Path(source).stem
            args.out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built.cubin, args.out / f"{stem}.{arch}.cubin")
            (args.out / f"{stem}.{arch}.ptx").write_text(built.ptx, encoding="utf-8")
            (args.out / f"{stem}.{arch}.ptxas.log").write_text(built.ptxas_log, encoding="utf-8")
            sass = disassemble(built.cubin, None, tools)
            if sass.text is not None:
                (args.out / f"{stem}.{arch}.sass").write_text(sass.text, encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
