"""The artifact page's "Does it fit?" table tells compiles with other compiler options
apart: a target's row shows the compile with the compiler's default options (a newer one
with Triton GEMMs off does not take its place), names the others and links them, and
"Its runs" says which options each run compiled with."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.app.bench_fakes import FakeWorker, capabilities, run_result

pytestmark = [pytest.mark.anyio]

OFF = {"xla_gpu_enable_triton_gemm": False}


def _forward(x: Any, w: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x @ w)


@pytest.fixture(scope="module")
def exported() -> bytes:
    from workers.cli.export_fn import export_function

    data, _ = export_function(_forward, [("float32", (8, 16)), ("float32", (16, 4))], ["cuda"])
    return data


def compiled(spec: dict[str, Any], peak: int) -> dict[str, Any]:
    """A deviceless compile's result with the compiler's memory report."""
    result = run_result(spec)
    result["measurements"] = []
    result["correctness"] = None
    memory = {"peak_bytes": peak, "hbm_bytes": 1, "hbm_label": "x", "source": "x"}
    result["target"] = {
        "id": "h100:1",
        "model": "h100",
        "count": 1,
        "compiler": "the JAX CUDA plugin",
        "deviceless": True,
        "memory": memory,
    }
    return result


async def test_the_fit_table_shows_the_default_options_compile_and_names_the_others(
    bench_client: httpx.AsyncClient, exported: bytes
) -> None:
    r = await bench_client.post(
        "/api/v1/artifacts",
        params={"kind": "exported"},
        content=exported,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 201, r.text
    sha = r.json()["sha256"]
    worker = FakeWorker(bench_client, capabilities(targets=["h100:1"]))
    await worker.register()
    base = {"workload": "exported", "path": "jax-gpu", "target": "h100:1"}
    for options, peak in (({}, 17_400_000), (OFF, 18_500_000)):  # the option run is newer
        spec = {**base, "params": {"artifact": sha}, "compiler_options": options}
        assert (await bench_client.post("/api/v1/jobs", json=spec)).status_code == 202
        grant = await worker.lease()
        assert grant is not None
        body = {"worker_id": worker.id, "job_id": grant["job_id"]}
        answer = await worker.post("result", {**body, "result": compiled(grant["spec"], peak)})
        assert answer.status_code == 200, answer.text

    page = (await bench_client.get(f"/artifacts/{sha}")).text
    row = page.split('data-target="h100:1"', 1)[1].split("</tr>", 1)[0]
    assert "17.4 MB" in row and "18.5 MB" not in row
    assert "also compiled with" in row and "xla_gpu_enable_triton_gemm=false" in row
    runs = page.split("Its runs", 1)[1]
    assert runs.count("xla_gpu_enable_triton_gemm=false") == 1
