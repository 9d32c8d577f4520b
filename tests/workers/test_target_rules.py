"""Targets as a vocabulary and how they combine with paths, workloads and device counts,
checked without jax: `boundary run` refuses with exit 2 before anything is imported or
compiled, naming the field. Also the JAX process environment and the CUDA arch order."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import ValidationError

from workers.catalog import CatalogError
from workers.catalog.target_rules import apply_target
from workers.cli.run import EXIT_BAD_JOB, run_command
from workers.compiler.jaxenv import PLATFORMS_ENV, jax_environment
from workers.cuda import env
from workers.protocol import (
    CHIPS,
    TARGET_IDS,
    JobSpec,
    PathId,
    StageId,
    TargetError,
    TargetModel,
    one_device_target,
    parse_target,
)
from workers.protocol.chips import chip_of_kind


def job(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"workload": "matmul", **fields})


def test_the_sold_v6e_slices_and_hgx_gpu_counts_are_the_targets() -> None:
    v6e = [t for t in TARGET_IDS if t.startswith("v6e:")]
    assert v6e == [f"v6e:{s}" for s in ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")]
    assert [parse_target(t).count for t in v6e] == [1, 4, 8, 16, 32, 64, 128, 256]
    for model in ("b200", "h100", "h200"):
        assert [parse_target(f"{model}:{n}").count for n in (1, 2, 4, 8)] == [1, 2, 4, 8]
    assert parse_target("B200:4").id == "b200:4"


def test_every_tpu_generation_is_a_target_with_the_slices_google_sells() -> None:
    v5e = [t for t in TARGET_IDS if t.startswith("v5e:")]
    assert v5e == [f"v5e:{s}" for s in ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")]
    for first in ("v4:2x2x1", "v5p:2x2x1", "tpu7x:2x2x1"):
        assert first in TARGET_IDS
    # libtpu lists each TensorCore of a v4 or TPU7x chip as a device; a v5p chip is one.
    sizes = {t: (parse_target(t).chips, parse_target(t).count) for t in ("v4:2x2x1",
             "v5p:2x2x1", "tpu7x:2x2x1", "tpu7x:1x1x1", "v5e:2x4")}  # fmt: skip
    assert sizes == {
        "v4:2x2x1": (4, 8),
        "v5p:2x2x1": (4, 4),
        "tpu7x:2x2x1": (4, 8),
        "tpu7x:1x1x1": (1, 2),
        "v5e:2x4": (8, 8),
    }
    assert parse_target("v5e:1x1").host_bounds() == (1, 1, 1)  # under one host's 4 chips
    assert parse_target("v5e:2x2").host_bounds() is None
    assert [one_device_target(parse_target(t).model) for t in ("v5e:2x4", "v5p:2x2x1")] == [
        "v5e:1x1",
        None,
    ]


def test_a_target_names_its_path_and_a_real_device_names_its_model() -> None:
    assert job(target="v5e:1x1").path is PathId.JAX_TPU
    assert job(target="h100:8").path is PathId.JAX_GPU
    assert job(target="b200:1", path="cuda").path is PathId.CUDA
    kinds = {"TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v4": "v4", "TPU7x": "tpu7x",
             "TPU v6 lite": "v6e", "NVIDIA H100 80GB HBM3": "h100"}  # fmt: skip
    for kind, model in kinds.items():
        found = chip_of_kind(kind)
        assert found is not None and found.model.value == model, kind
    assert not CHIPS[TargetModel.V5P].matches("TPU v5 lite")  # a prefix is no match


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("v5e:4x2", "not a v5e slice that is sold"),
        ("v5p:1x1x1", "not a v5p slice that is sold"),
        ("v6e:32x32", "not a v6e slice that is sold"),  # libtpu accepts it; no one sells it
        ("v6e-8", "names no device model"),
        ("b200:3", "GPU count of one HGX host"),
        ("b200:16", "GPU count of one HGX host"),
        ("a100:1", "names no device model"),
        ("h100", "give a size"),
    ],
)
def test_a_target_that_is_not_sold_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(TargetError, match=says):
        parse_target(text)
    with pytest.raises(ValueError, match=says):
        job(path="jax-tpu", target=text)


def test_a_target_without_stages_compiles_only() -> None:
    assert job(path="jax-tpu", target="v6e:1x1").stages == [StageId.COMPILE]
    given = job(path="jax-tpu", target="v6e:1x1", stages=["compile", "execute"])
    assert given.stages == [StageId.COMPILE, StageId.EXECUTE]
    assert job().stages == [StageId.COMPILE, StageId.EXECUTE]


def test_a_share_of_the_hbm_is_a_gpu_targets_alone() -> None:
    assert job(target="h100:1", usable_fraction=0.5).usable_fraction == 0.5
    assert job(target="h100:1").usable_fraction is None  # JAX's default, by the server
    for refused in ({"target": "v6e:1x1"}, {"path": "jax-gpu"}):
        with pytest.raises(ValidationError) as caught:
            job(**refused, usable_fraction=0.5)
        (error,) = caught.value.errors()
        assert error["loc"] == ("usable_fraction",)  # the refusal names the field
        assert "usable_fraction applies only to a GPU target" in error["msg"]
    for share, says in ((1.5, "less than or equal to 1"), (0.001, "greater than or equal")):
        with pytest.raises(ValidationError, match=says):
            job(target="b200:1", usable_fraction=share)


@pytest.mark.parametrize(
    ("path", "target", "workload", "field", "says"),
    [
        ("jax-cpu", "v6e:1x1", "matmul", "target", "v6e:1x1 does not go with path jax-cpu"),
        ("jax-gpu", "v6e:1x1", "matmul", "target", "goes with jax-tpu"),
        ("jax-tpu", "b200:1", "matmul", "target", "goes with jax-gpu or cuda"),
        ("jax-cpu", "h100:1", "matmul", "target", "h100:1 does not go with path jax-cpu"),
        ("jax-tpu", "v6e:2x4", "matmul", "target", "matmul runs on one device"),
        ("cuda", "b200:2", "matmul", "target", "the cuda path runs on one device"),
        ("jax-gpu", "b200:1", "shape-sweep", "target", "shape-sweep takes no target"),
    ],
)
def test_a_target_that_does_not_combine_is_refused_naming_the_field(
    path: str, target: str, workload: str, field: str, says: str
) -> None:
    with pytest.raises(CatalogError, match=says) as caught:
        apply_target(job(workload=workload, path=path, target=target))
    assert caught.value.field == field


def test_a_scale_workload_spans_the_targets_devices() -> None:
    spanned = apply_target(job(workload="sharded-matmul", path="jax-tpu", target="v6e:2x4"))
    assert spanned.params["devices"] == 8
    same = job(workload="collective", path="jax-gpu", target="h200:4", params={"devices": 4})
    assert apply_target(same).params["devices"] == 4
    other = job(workload="sharded-matmul", path="jax-tpu", target="v6e:2x4", params={"devices": 4})
    with pytest.raises(CatalogError, match=r"devices=4 does not match target v6e:2x4") as caught:
        apply_target(other)
    assert caught.value.field == "params.devices"


def test_cuda_takes_a_gpu_target_of_one() -> None:
    kept = apply_target(job(path="cuda", target="b200:1"))
    assert kept.target == "b200:1" and kept.stages == [StageId.COMPILE]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["matmul", "--path", "jax-cpu", "--target", "v6e:2x4"],
            "target: v6e:2x4 does not go with path jax-cpu",
        ),
        (["matmul", "--target", "v4:2x2x1"], "v4 sells no slice of one device; use v5e:1x1"),
        (["matmul", "--path", "jax-tpu", "--target", "v6e:32x32"], "not a v6e slice"),
        (
            ["sharded-matmul", "devices=2", "--path", "jax-gpu", "--target", "b200:8"],
            "params.devices: devices=2 does not match target b200:8",
        ),
    ],
)
def test_boundary_run_refuses_a_bad_target_with_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(argv) == EXIT_BAD_JOB
    assert says in capsys.readouterr().err


# --- the JAX process environment -------------------------------------------------------


def _settings(wanted: dict[str, str]) -> dict[str, str]:
    """The settings apart from PATH (which `test_the_cuda_wheels_tools_come_first` checks)."""
    return {k: v for k, v in wanted.items() if k != "PATH"}


def test_a_machine_without_accelerators_runs_jax_on_the_cpu_with_libtpu_quiet() -> None:
    wanted = _settings(jax_environment({}, found=""))
    assert wanted == {
        "JAX_PLATFORMS": "cpu",
        "TPU_LOG_DIR": "disabled",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "TPU_SKIP_MDS_QUERY": "1",
        "TPU_WORKER_HOSTNAMES": "localhost",
    }


def test_a_real_gpu_or_tpu_is_still_used() -> None:
    assert jax_environment({}, found="gpu")["JAX_PLATFORMS"] == "cuda,cpu"
    assert jax_environment({}, found="tpu")["JAX_PLATFORMS"] == "tpu,cpu"


def test_boundary_jax_platforms_overrides_and_set_values_are_kept() -> None:
    assert jax_environment({PLATFORMS_ENV: "cuda"}, found="")["JAX_PLATFORMS"] == "cuda"
    overridden = jax_environment({PLATFORMS_ENV: "cpu", "JAX_PLATFORMS": "tpu"}, found="tpu")
    assert _settings(overridden) == {
        "JAX_PLATFORMS": "cpu",
        "TPU_LOG_DIR": "disabled",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    }  # a real TPU host: libtpu finds its own hostnames and metadata
    kept = {
        "JAX_PLATFORMS": "cpu",
        "TPU_LOG_DIR": "/var/log/tpu",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "0",
        "TPU_SKIP_MDS_QUERY": "0",
        "TPU_WORKER_HOSTNAMES": "10.0.0.2",
    }
    assert _settings(jax_environment(kept, found="gpu")) == {}


def test_the_cuda_wheels_tools_come_first_on_path() -> None:
    """Mosaic GPU's compile runs the first ptxas on PATH: the nvidia-cuda-nvcc wheel's,
    ahead of a system CUDA (this machine has 13.0 on PATH), and only once."""
    from workers.compiler.jaxenv import nvidia_cuda_root

    root = nvidia_cuda_root()
    assert root is not None, "pip install -e . installs nvidia-cuda-nvcc"
    wheel_bin = os.path.join(root, "bin")
    assert os.access(os.path.join(wheel_bin, "ptxas"), os.X_OK)
    path = jax_environment({"PATH": "/usr/local/bin:/usr/bin"}, found="")["PATH"]
    assert path.split(os.pathsep) == [wheel_bin, "/usr/local/bin", "/usr/bin"]
    twice = jax_environment({"PATH": path}, found="")
    assert "PATH" not in twice  # already first: left alone
    assert os.environ["PATH"].split(os.pathsep)[0] == wheel_bin  # this test process too
    import shutil

    assert shutil.which("ptxas") == os.path.join(wheel_bin, "ptxas")


def test_this_test_process_started_jax_on_the_cpu() -> None:
    import os

    assert os.environ["JAX_PLATFORMS"] in ("cpu", os.environ.get(PLATFORMS_ENV))
    assert os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"


# --- the CUDA architecture: target, then BOUNDARY_CUDA_ARCH, then the GPU's, then sm_90 --


def test_the_cuda_arch_follows_target_then_setting_then_gpu_then_sm_90(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(env.ARCH_ENV, "sm_120")
    assert env.target_arch(parse_target("b200:1").chip.cuda_arch) == "sm_100"
    assert env.target_arch(parse_target("h200:1").chip.cuda_arch) == "sm_90"
    assert env.target_arch() == "sm_120"
    monkeypatch.delenv(env.ARCH_ENV)
    gpu = env.probe_gpu().arch
    assert env.target_arch() == (gpu or env.DEFAULT_ARCH)
