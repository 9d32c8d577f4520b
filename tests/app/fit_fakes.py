"""A worker that plays a fit search's probes: each compile-only job for a target answers
with a peak that grows affinely in the searched parameter, as XLA:GPU reports it, or,
over what libtpu keeps of a v6e's HBM, with libtpu's refusal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.app.bench_fakes import FakeWorker, capabilities, environment_of
from workers.catalog import parse_params
from workers.catalog.kernels import public_params
from workers.catalog.target_rules import COMPILE_ONLY_CAP, apply_target
from workers.protocol import JobSpec, parse_target

TPU_KEEPS = int(31.25 * 2**30)
"""What libtpu 0.0.42 keeps of a v6e chip's HBM, as its refusals say (31.25G)."""

Peak = Callable[[int], int]


def affine(base: int, per: int) -> Peak:
    return lambda value: base + per * value


def aligned(base: int, per: int, align: int, factor: float) -> Peak:
    """`affine`, where a value that is not a multiple of `align` needs `factor` times the
    memory per value: as XLA lays out a batch it cannot tile evenly."""
    return lambda value: base + round(per * value * (1 if value % align == 0 else factor))


def probe_result(spec: dict[str, Any], peak: int) -> dict[str, Any]:
    """A compiled run of a probe, as a worker posts it: the target's report with the
    peak; on a v6e over what libtpu keeps, its refusal and no HLO."""
    target = parse_target(spec["target"])
    chip = target.chip
    refused = None
    if target.model.value == "v6e" and peak > TPU_KEEPS:
        refused = (
            "Ran out of memory on HBM, the total memory required for HLO temporaries "
            f"({peak / 2**30:.2f}G) exceeds available HBM (31.25G)."
        )
    job = apply_target(JobSpec.model_validate(spec))
    params = parse_params(job.workload, job.params, COMPILE_ONLY_CAP)
    return {
        "job": job.model_dump(mode="json"),
        "params": public_params(params, job.path.value),
        "stage_seconds": {"trace": 0.001, "lower": 0.004, "compile": 0.01},
        # a refused program has no optimized HLO
        "artifacts": {"jaxpr": "{ lambda ; a. }", "hlo": None if refused else "HloModule p\n"},
        "environment": environment_of(job),
        "valid": True,
        "memory_analysis": None if refused else {"peak_bytes": peak},
        "target": {
            "id": target.id,
            "model": target.model.value,
            "count": target.count,
            "compiler": "libtpu" if refused or target.model.value == "v6e" else "XLA:GPU",
            "deviceless": True,
            "memory": {
                "peak_bytes": peak,
                "hbm_bytes": chip.hbm_bytes,
                "hbm_label": chip.hbm_label,
                "source": chip.source,
            },
            "refused": refused,
        },
    }


async def probe_worker(client: httpx.AsyncClient, targets: list[str]) -> FakeWorker:
    """A CPU worker that compiles for `targets` without their hardware, registered."""
    worker = FakeWorker(client, capabilities("cpu", targets=targets))
    await worker.register()
    return worker


async def play(
    worker: FakeWorker, peak: Peak, name: str = "batch", most: int = 200
) -> list[dict[str, Any]]:
    """Lease and answer probes until none is queued; the grants answered."""
    answered = []
    for _ in range(most):
        grant = await worker.lease()
        if grant is None:
            return answered
        spec = grant["spec"]
        value = spec["params"][name] if name in spec["params"] else spec["params"]["dims"][name]
        body = {
            "worker_id": worker.id,
            "job_id": grant["job_id"],
            "attempt": grant["attempt"],
            "result": probe_result(spec, peak(value)),
            "run_seconds": 0.05,
        }
        posted = await worker.post("result", body)
        assert posted.status_code == 200, posted.text
        answered.append(grant)
    raise AssertionError(f"more than {most} probes")


def symbolic_artifact() -> bytes:
    """A small function exported with a symbolic batch `b` for cpu, cuda and tpu (in
    this process, in about a second): what an upload's fit search varies."""
    import jax
    import jax.numpy as jnp

    (b,) = jax.export.symbolic_shape("b")

    def forward(x: Any, w: Any) -> Any:
        return jnp.tanh(x @ w)

    args = (jax.ShapeDtypeStruct((b, 16), jnp.float32), jax.ShapeDtypeStruct((16, 4), jnp.float32))
    exported = jax.export.export(jax.jit(forward), platforms=("cpu", "cuda", "tpu"))(*args)
    return bytes(exported.serialize())
