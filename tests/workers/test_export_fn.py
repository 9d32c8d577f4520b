"""Bring your own function: `boundary export-fn`, the artifact's header, and the engine
running an exported function with its checks (platform, custom calls, references)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from workers.catalog import CatalogError
from workers.catalog.exported import ExportedParams
from workers.catalog.jaxexport import ArtifactError, read_header
from workers.cli.export_fn import export_function
from workers.cli.files import resolve_file_params
from workers.export.rules import generate
from workers.files import FileCache
from workers.protocol import JobSpec, PathId
from workers.run.engine import run_job
from workers.workloads.base import InputSpec
from workers.workloads.exported import ExportedFunction

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = """
import jax.numpy as jnp

def forward(x, w):
    return jnp.tanh(x @ w) * 0.5 + 1.0
"""


def exported_bytes(platforms: list[str], fn: Any = None) -> bytes:
    """A small function exported in-process (the CLI is tested on its own below)."""

    def forward(x: jax.Array, w: jax.Array) -> jax.Array:
        return jax.numpy.tanh(x @ w) * 0.5 + 1.0

    args = [("float32", (12, 16)), ("float32", (16, 8))]
    data, _ = export_function(fn or forward, args, platforms)
    return data


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def job(params: dict[str, Any], path: str = "jax-cpu") -> JobSpec:
    return JobSpec.model_validate(
        {"workload": "exported", "path": path, "params": params, "measure": {"samples": 5}}
    )


@pytest.fixture
def files(tmp_path: Path) -> FileCache:
    return FileCache(tmp_path / "files")


def test_the_cli_exports_a_function_with_its_inputs_and_output(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    out = tmp_path / "fn.jaxexport"
    command = [sys.executable, "-m", "app.cli", "export-fn", "mymodel:forward"]
    command += ["--arg", "float32[12,16]", "--arg", "float32[16,8]", "--platforms", "cpu,tpu"]
    command += ["-o", str(out), "--save-inputs", "in.npz", "--save-output", "out.npz"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["platforms"] == ["cpu", "tpu"]
    assert summary["in_avals"] == ["float32[12,16]", "float32[16,8]"]
    assert summary["out_avals"] == ["float32[12,8]"]
    assert summary["arguments"] == ["arg0", "arg1"] and summary["results"] == ["out0"]

    # The server's pure-Python reading agrees with jax's own deserialization.
    data = out.read_bytes()
    exp = jax.export.deserialize(bytearray(data))
    header = read_header(data)
    assert header.platforms == tuple(exp.platforms)
    assert [a.text() for a in header.in_avals] == [a.str_short() for a in exp.in_avals]
    assert header.function_name == "forward"

    # The saved inputs are exactly those a worker generates, and the output is f on them.
    with np.load(tmp_path / "in.npz") as saved:
        x, w = saved["arg0"], saved["arg1"]
    specs = [InputSpec("arg0", (12, 16), "float32"), InputSpec("arg1", (16, 8), "float32")]
    again = generate(specs, None, 0)
    assert np.array_equal(again[0], x) and np.array_equal(again[1], w)
    with np.load(tmp_path / "out.npz") as saved:
        expected = np.tanh(x.astype(np.float64) @ w) * 0.5 + 1.0
        assert np.allclose(saved["out0"], expected, rtol=1e-5)


def test_the_cli_names_a_bad_argument(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(USER_MODULE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "app.cli", "export-fn", "mymodel:forward", "-o", "x"]
    for extra, message in (
        (["--arg", "floot32[2]"], "unknown dtype"),
        (["--arg", "float32[2]", "--platforms", "gpu9"], "is no platform"),
    ):
        done = subprocess.run(
            base + extra,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2 and message in done.stderr


def test_an_exported_function_runs_through_every_stage_against_uploaded_references(
    files: FileCache,
) -> None:
    artifact = files.put(exported_bytes(["cpu"]))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((12, 16), dtype=np.float32)
    w = rng.standard_normal((16, 8), dtype=np.float32)
    expected = np.tanh(x.astype(np.float64) @ w.astype(np.float64)) * 0.5 + 1.0
    inputs = files.put(npz(arg0=x, arg1=w))
    reference = files.put(npz(out0=expected))

    run = run_job(
        job({"artifact": artifact, "inputs": inputs, "reference": reference}),
        files_dir=files.directory,
    )
    assert run.valid and run.correctness is not None
    assert run.correctness.passed and run.correctness.checked
    assert run.correctness.reference == "uploaded reference outputs"
    assert run.correctness.error is not None and run.correctness.error < 1e-6
    assert "call_exported" in (run.artifacts.jaxpr or "")
    assert "stablehlo.dot_general" in (run.artifacts.stablehlo or "")
    assert (run.artifacts.hlo or "").startswith("HloModule")
    assert run.hlo_summary is not None and run.hlo_summary.instructions > 0
    assert [i.shape for i in run.inputs] == [[12, 16], [16, 8]]
    assert len(run.measurements[0].samples_s) == 5 and run.measurements[0].stats is not None
    assert run.rates is not None and run.rates.flops > 0 and run.rates.flops_per_s
    assert "cost analysis" in run.rates.source

    # A wrong reference fails the check and hides the speed.
    wrong = files.put(npz(out0=expected * 1.01))
    failed = run_job(
        job({"artifact": artifact, "reference": wrong, "inputs": inputs}), files_dir=files.directory
    )
    assert not failed.valid and failed.correctness is not None and not failed.correctness.passed
    assert failed.measurements[0].stats is None


def test_without_a_reference_the_run_says_its_output_is_unchecked(files: FileCache) -> None:
    artifact = files.put(exported_bytes(["cpu", "cuda"]))
    run = run_job(job({"artifact": artifact}), files_dir=files.directory)
    assert run.valid  # nothing failed: the timings stand
    c = run.correctness
    assert c is not None and not c.checked and not c.passed and c.reference == "none"
    assert c.detail is not None and "output unchecked" in c.detail
    assert any("unverified output" in w for w in run.warnings)
    assert run.measurements[0].stats is not None


def test_on_another_path_the_cpu_run_of_the_same_artifact_is_the_reference(
    files: FileCache,
) -> None:
    # No GPU here: bind the workload for jax-gpu and judge outputs against the CPU run it
    # computes (a real run on the CPU backend), exactly as a GPU worker would.
    artifact = files.put(exported_bytes(["cpu", "cuda"]))
    params = ExportedParams(artifact=artifact)
    bound = ExportedFunction().bind(params, PathId.JAX_GPU, files.directory)
    inputs = bound.make_inputs(params, np.random.default_rng(0))
    (cpu_out,) = (np.asarray(r) for r in jax.jit(bound.function(params))(*inputs))
    good = bound.judge(params, inputs, [cpu_out * (1 + 1e-6)])
    assert good.checked and good.passed
    assert good.reference == f"the same artifact on the CPU, in {cpu_out.dtype.name}"
    bad = bound.judge(params, inputs, [cpu_out * 1.05])
    assert bad.checked and not bad.passed and "exceeds the tolerance" in (bad.detail or "")
    assert bad.worst == "out0" and bad.results[0].name == "out0"

    # Exported without CPU there is nothing to stand in: unchecked, in plain words.
    gpu_only = files.put(exported_bytes(["cuda"]))
    lone = ExportedFunction().bind(
        ExportedParams(artifact=gpu_only), PathId.JAX_GPU, files.directory
    )
    verdict = lone.judge(ExportedParams(artifact=gpu_only), inputs, [cpu_out])
    assert not verdict.checked and "not exported for CPU" in (verdict.detail or "")


def test_a_worker_refuses_what_it_must_not_or_cannot_run(files: FileCache) -> None:
    tpu_only = files.put(exported_bytes(["tpu"]))
    with pytest.raises(CatalogError, match="exported for tpu only; path jax-cpu runs on cpu") as e:
        run_job(job({"artifact": tpu_only}), files_dir=files.directory)
    assert e.value.field == "params.artifact"

    good = exported_bytes(["cpu"])
    corrupted = files.put(good[: len(good) // 2] + bytes(len(good) - len(good) // 2))
    with pytest.raises(CatalogError, match=r"not a readable jax\.export artifact"):
        run_job(job({"artifact": corrupted}), files_dir=files.directory)

    missing = "0" * 64
    with pytest.raises(CatalogError, match="no file 000000000000… on this worker"):
        run_job(job({"artifact": missing}), files_dir=files.directory)

    def native(x: jax.Array) -> jax.Array:
        return jax.ffi.ffi_call("my_native_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    unsafe = jax.export.DisabledSafetyCheck.custom_call("my_native_kernel")
    exp = jax.export.export(jax.jit(native), platforms=["cpu"], disabled_checks=[unsafe])(
        jax.ShapeDtypeStruct((4,), np.float32)
    )
    custom = files.put(bytes(exp.serialize()))
    with pytest.raises(CatalogError, match=r"custom call target.*: my_native_kernel"):
        run_job(job({"artifact": custom}), files_dir=files.directory)


def test_damaged_headers_are_refused_without_reading_outside_the_file() -> None:
    data = exported_bytes(["cpu"])
    for cut in range(0, len(data) - 4, 7):  # (the last bytes may be padding)
        with pytest.raises(ArtifactError):
            read_header(data[:cut])
    rng = np.random.default_rng(1)
    for _ in range(300):  # flipped bytes: a clean refusal or a header, never a crash
        damaged = bytearray(data)
        for i in rng.integers(0, len(data), 4):
            damaged[i] = int(rng.integers(0, 256))
        with contextlib.suppress(ArtifactError):
            read_header(bytes(damaged))


def test_boundary_run_takes_local_files_by_at_sign(tmp_path: Path, files: FileCache) -> None:
    path = tmp_path / "fn.jaxexport"
    path.write_bytes(exported_bytes(["cpu"]))
    params = resolve_file_params("exported", {"artifact": f"@{path}"}, files_dir=files.directory)
    assert files.has(params["artifact"])
    with pytest.raises(ValueError, match=r"params.artifact: cannot read"):
        resolve_file_params("exported", {"artifact": "@/nonexistent.jaxexport"})
    (tmp_path / "junk.jaxexport").write_bytes(b"junk" * 10)
    with pytest.raises(
        ValueError, match=r"params\.artifact: .*junk\.jaxexport: (corrupted|not a jax)"
    ):
        resolve_file_params("exported", {"artifact": f"@{tmp_path / 'junk.jaxexport'}"})


def test_kernels_the_compiler_builds_itself_are_not_refused() -> None:
    from workers.workloads.artifact import refused_targets

    # Pallas lowers to these on TPU (Mosaic) and GPU (Triton, Mosaic GPU): XLA compiles
    # them from the IR they carry, so no native code of the user's runs.
    kernels = ["tpu_custom_call", "mosaic_gpu_v2", "__gpu$xla.gpu.triton", "lapack_sgetrf_ffi"]
    assert refused_targets(kernels) == []
    assert refused_targets(["my_native_kernel", "tf.call_tf_function"]) == [
        "my_native_kernel",
        "tf.call_tf_function",
    ]


def test_export_fn_without_jax_says_to_install_the_export_extra(tmp_path: Path) -> None:
    """Boundary's base install has no jax (the `export` extra brings it): export-fn says
    so, rather than failing on an import. The process sees only the standard library and
    this checkout, as a base install with no jax would."""
    script = (
        "import sys\n"
        f"sys.path[:] = [p for p in sys.path if 'packages' not in p] + [{str(ROOT)!r}]\n"
        "from app.cli import main\n"
        "main(['export-fn', 'model:step', '--example', 'model:example'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "jax is not installed here" in done.stderr
    assert "pip install '/path/to/boundary[export]'" in done.stderr
