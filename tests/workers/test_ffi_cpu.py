"""The FFI boundary on the CPU: a C++ handler built here, registered with JAX, called
through jax.ffi.ffi_call, seen in StableHLO and the optimized HLO, checked, vmapped,
and refusing differentiation."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.dependencies import require
from workers.catalog import CatalogError, parse_params
from workers.compiler.environment import jaxlib_version
from workers.cuda import ffi
from workers.measure.faults import perturbed
from workers.protocol import JobSpec
from workers.run.engine import run_job


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    if shutil.which("c++") is None and shutil.which("g++") is None:
        require("c++", "no C++ compiler to build the FFI handler (apt-get install g++)")
    ffi.ensure_registered("cpu")


def test_the_library_is_cached_under_the_jaxlib_version(tmp_path: Path) -> None:
    path, built = ffi.library("cpu", root=tmp_path)
    assert built and path.is_file()
    assert path.parent == tmp_path / f"jaxlib-{jaxlib_version()}"
    again, rebuilt = ffi.library("cpu", root=tmp_path)
    assert again == path and not rebuilt
    assert list(path.parent.glob(".*")) == []  # no scratch files left behind


def test_the_custom_call_is_in_stablehlo_and_the_optimized_hlo() -> None:
    f = jax.jit(ffi.make_scale_shift(3.0, -1.25))
    x = np.linspace(-2, 2, 33, dtype=np.float32)
    lowered = f.lower(x)
    stablehlo = lowered.as_text()
    assert f"stablehlo.custom_call @{ffi.TARGET}" in stablehlo
    assert "scale = 3.000000e+00 : f32" in stablehlo and "shift = -1.250000e+00 : f32" in stablehlo
    hlo = lowered.compile().as_text()
    assert f'custom_call_target="{ffi.TARGET}"' in hlo
    assert "API_VERSION_TYPED_FFI" in hlo
    np.testing.assert_allclose(np.asarray(f(x)), x * np.float32(3.0) - np.float32(1.25))


def test_any_shape_and_vmap() -> None:
    f = ffi.make_scale_shift(0.5, 2.0)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), x * 0.5 + 2.0)
    batched = jax.vmap(f)(x)
    np.testing.assert_array_equal(np.asarray(batched), x * 0.5 + 2.0)
    across = jax.vmap(f, in_axes=2, out_axes=2)(x)
    np.testing.assert_array_equal(np.asarray(across), x * 0.5 + 2.0)
    # A batched call is still one custom call over the whole array (broadcast_all).
    text = jax.jit(jax.vmap(f)).lower(x).as_text()
    assert text.count(f"@{ffi.TARGET}") == 1 and "tensor<2x3x4xf32>" in text


def test_differentiation_is_refused_with_a_clear_error() -> None:
    f = ffi.make_scale_shift(2.0, 0.0)
    with pytest.raises(ffi.NotDifferentiable, match="no derivative rule"):
        jax.grad(lambda x: jnp.sum(f(x)))(np.ones(4, np.float32))
    with pytest.raises(ffi.NotDifferentiable):
        jax.jvp(f, (np.ones(4, np.float32),), (np.ones(4, np.float32),))


def test_only_float32_is_accepted() -> None:
    f = ffi.make_scale_shift(2.0, 0.0)
    with pytest.raises(TypeError, match="takes float32"):
        f(np.ones(4, np.float16))


def test_the_ffi_workload_runs_like_any_jax_run() -> None:
    job = JobSpec.model_validate(
        {
            "workload": "ffi",
            "params": {"n": 4096, "scale": -3, "shift": 0.25},
            "measure": {"samples": 5},
        }
    )
    run = run_job(job)
    assert run.valid and run.correctness is not None and run.correctness.passed
    assert run.correctness.error is not None and run.correctness.error < 1e-6
    assert run.artifacts.stablehlo and f"@{ffi.TARGET}" in run.artifacts.stablehlo
    assert run.hlo_summary is not None
    assert [c.target for c in run.hlo_summary.custom_calls] == [ffi.TARGET]
    assert run.measurements and run.measurements[0].stats is not None
    assert run.params["scale"] == -3.0  # an integer is accepted for a float parameter


def test_a_wrong_handler_output_fails_the_check() -> None:
    job = JobSpec.model_validate(
        {"workload": "ffi", "params": {"n": 256}, "measure": {"samples": 2}}
    )
    with perturbed(1e-3):
        run = run_job(job)
    assert not run.valid and all(m.stats is None for m in run.measurements)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"scale": float("nan")}, "params.scale"),
        ({"shift": 1e9}, "params.shift"),
        ({"n": 0}, "params.n"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, float], field: str) -> None:
    with pytest.raises(CatalogError) as caught:
        parse_params("ffi", params)
    assert caught.value.field == field
