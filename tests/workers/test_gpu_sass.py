"""SASS of a GPU compile's kernels, assembled a batch at a time: every kernel's SASS and
resources as from its own module, in the modules' order, with a module that cannot join
(or a batch ptxas refuses) assembled alone.

The PTX is XLA's own, from a deviceless compile for B200 and H100 with a dump folder."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tests.workers.counted import counted, runs
from workers.cuda.env import find_tool
from workers.protocol import parse_target
from workers.xla_targets.gpu_sass import GpuSass, _units, gpu_sass
from workers.xla_targets.ptx_dump import ptx_modules
from workers.xla_targets.topology import target_devices

pytestmark = pytest.mark.slow


def dumped_modules(target: str, folder: Path) -> dict[str, str]:
    """The PTX modules XLA writes compiling a small layer (two matmuls, a softmax, a norm,
    a cumulative sum, a sort) for `target`."""
    mesh = Mesh(np.array(target_devices(parse_target(target))[:1]), ("x",))
    whole = NamedSharding(mesh, PartitionSpec())
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=whole)
    w = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=whole)

    def layer(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jax.nn.softmax(x @ w, axis=-1)
        h = (h - h.mean(axis=-1, keepdims=True)) * jax.lax.rsqrt(h.var(axis=-1) + 1e-5)[:, None]
        gram = jnp.tanh(h).T @ h  # a second matmul, on what the first made
        return jnp.cumsum(gram, axis=0) * 2.0, jnp.sort(h, axis=0)

    jax.jit(layer).lower(x, w).compile(compiler_options={"xla_dump_to": str(folder)})
    return ptx_modules(folder)


@pytest.fixture(scope="module", params=["b200:1", "h100:1"])
def modules(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    found = dumped_modules(request.param, tmp_path_factory.mktemp("dump"))
    assert len(found) >= 3, sorted(found)  # enough modules for a batch to mean something
    return found


@pytest.fixture(scope="module")
def each_alone(modules: dict[str, str]) -> dict[str, GpuSass]:
    """Each module assembled on its own, as one ptxas and one cuobjdump per module did."""
    found = {}
    for file, ptx in modules.items():
        found[file] = gpu_sass({file: ptx})
        assert found[file].text is not None and not found[file].problems, found[file].problems
    return found


def alone(each: dict[str, GpuSass], files: list[str]) -> GpuSass:
    """The modules `files` assembled one by one, their sections and resources in order."""
    return GpuSass(
        text="\n".join(each[file].text or "" for file in files),
        resources=[r for file in files for r in each[file].resources],
    )


def test_a_batch_gives_every_kernel_what_its_own_module_gives(
    modules: dict[str, str], each_alone: dict[str, GpuSass]
) -> None:
    assert len(_units(modules)) < len(modules)  # they were joined
    joined = gpu_sass(modules)
    assert joined.problems == []
    reference = alone(each_alone, list(modules))
    assert joined.text == reference.text
    assert joined.resources == reference.resources


def test_a_module_with_more_than_entries_is_assembled_alone(modules: dict[str, str]) -> None:
    first, *rest = modules
    odd = modules[first].replace(".address_size 64", ".address_size 64\n\n.global .u32 tally;", 1)
    changed = {first: odd, **{file: modules[file] for file in rest}}
    units = _units(changed)
    assert odd in [u.ptx for u in units if not u.files]
    assert all(first not in u.files.values() for u in units)
    assert gpu_sass(changed).text == gpu_sass(modules).text


def test_a_batch_ptxas_refuses_is_assembled_module_by_module(
    modules: dict[str, str], each_alone: dict[str, GpuSass]
) -> None:
    broken, *rest = modules
    # Still made of entries only, so it joins the batch; ptxas refuses the unknown register.
    bad = modules[broken].replace("ret;", "mov.u32 %undeclared, 1;\n\tret;", 1)
    assert bad != modules[broken]
    out = gpu_sass({broken: bad, **{file: modules[file] for file in rest}})
    assert len(out.problems) == 1 and out.problems[0].startswith(f"{broken}: ptxas refused it")
    assert out.text == alone(each_alone, rest).text


def test_the_same_modules_again_start_no_tool(
    modules: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, scripts = tmp_path / "runs.log", {}
    for tool in ("ptxas", "cuobjdump"):
        real = find_tool(tool)
        assert real is not None
        scripts[tool] = Path(counted(real, log))
        monkeypatch.setenv(f"BOUNDARY_{tool.upper()}", str(scripts[tool]))
    first = gpu_sass(modules)  # the tools' paths are new: every unit is assembled
    assert first.text is not None and first.problems == []
    assembled = runs(log)
    assert assembled.count("ptxas") == len(_units(modules)) == assembled.count("cuobjdump")
    again = gpu_sass(modules)
    assert runs(log) == assembled
    assert (again.text, again.resources) == (first.text, first.resources)
    upgraded = scripts["cuobjdump"]  # the same path, another file there: upgraded in place
    upgraded.write_text(upgraded.read_text() + "# upgraded\n")
    after = gpu_sass(modules)
    assert sorted(runs(log)) == sorted(assembled * 2)  # no listing outlives its tool
    assert (after.text, after.resources) == (first.text, first.resources)


def entry_module(kernel: str, extern: str = ".extern .shared .align 16 .b8 global_smem[];") -> str:
    """A PTX module of one empty kernel entry, as XLA writes them."""
    return (
        f".version 9.0\n.target sm_100a\n.address_size 64\n\n{extern}\n\n"
        f".visible .entry {kernel}(\n\t.param .u64 {kernel}_param_0\n)\n.reqntid 32, 1, 1\n"
        "{\n\tret;\n\n}\n"
    )


def test_only_modules_that_cannot_clash_are_joined() -> None:
    helper = ".address_size 64\n\n.func helper()\n{\n\tret;\n}\n"
    modules = {
        "a.ptx": entry_module("k_a"),
        "b.ptx": entry_module("k_b"),
        "c.ptx": entry_module("k_c", ".extern .shared .align 8 .b8 global_smem[];"),
        "d.ptx": entry_module("k_a"),  # a kernel name the batch has
        "e.ptx": entry_module("k_e").replace(".address_size 64\n", helper, 1),
        "f.ptx": entry_module("k_f").replace("sm_100a", "sm_90a"),  # a batch of its own
    }
    units = _units(modules)
    assert {u.label for u in units if not u.files} == {"c.ptx", "d.ptx", "e.ptx"}
    batches = {tuple(sorted(set(u.files.values()))) for u in units if u.files}
    assert batches == {("a.ptx", "b.ptx"), ("f.ptx",)}
    out = gpu_sass(modules)
    assert out.problems == []
    found = re.findall(r"// ===== kernel (\w+) \((\S+)\) =====", out.text or "")
    assert found == [("k_a", "a.ptx"), ("k_b", "b.ptx"), ("k_c", "c.ptx"), ("k_a", "d.ptx"),
                     ("k_e", "e.ptx"), ("k_f", "f.ptx")]  # fmt: skip
