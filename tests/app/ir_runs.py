"""Real runs for the IR-view tests: made by the engine on the CPU, posted by a fake worker."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.bench_fakes import FakeWorker, capabilities

ATTENTION: dict[str, Any] = {
    "workload": "attention",
    "path": "jax-cpu",
    "params": {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 32, "dtype": "float32"},
    "measure": {"samples": 3},
}


def attention_result() -> dict[str, Any]:
    """A real attention run (trace, lower, compile, a few samples) as JSON."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    return run_job(JobSpec.model_validate(ATTENTION)).model_dump(mode="json")


async def post_run(client: httpx.AsyncClient, result: dict[str, Any]) -> str:
    """Queue `result`'s job, lease it with a fake worker, post `result`; the job's id."""
    queued = await client.post("/api/v1/jobs", json=result["job"])
    assert queued.status_code == 202, queued.text
    target = result["job"].get("target")
    # A target's job goes to a CPU worker that compiles for that target.
    worker = FakeWorker(client, capabilities("cpu", targets=[target]) if target else None)
    await worker.register()
    grant = await worker.lease()
    assert grant is not None
    posted = await worker.finish(grant, **{**result, "job": grant["spec"]})
    assert posted.status_code == 200, posted.text
    job_id: str = grant["job_id"]
    return job_id


def big_hlo(target_bytes: int = 4_000_000) -> str:
    """An optimized-HLO-shaped module of about `target_bytes`: source tables, then many
    fused computations whose instructions carry metadata, as a large model's HLO does."""
    head = [
        "HloModule jit_big, is_scheduled=true, "
        "entry_computation_layout={(f32[64,128]{1,0})->f32[64,128]{1,0}}",
        "",
        "FileNames",
        '1 "/srv/boundary/workers/workloads/big.py"',
        "",
        "FunctionNames",
        '1 "big"',
        "",
        "FileLocations",
        *(
            f"{i} {{file_name_id=1 function_name_id=1 line={10 + i} end_line={10 + i} "
            f"column=4 end_column=40}}"
            for i in range(1, 41)
        ),
        "",
        "StackFrames",
        *(f"{i} {{file_location_id={i} parent_frame_id={i}}}" for i in range(1, 41)),
        "",
    ]
    out = "\n".join(head) + "\n"
    parts: list[str] = [out]
    size = len(out)
    k = 0
    while size + 150 * k < target_bytes:  # the entry computation adds ~150 bytes a fusion
        frame = k % 40 + 1
        meta = f'metadata={{op_name="jit(big)/layer_{k}/mul" stack_frame_id={frame}}}'
        block = (
            f"\n%fused_computation.{k} (param_0.{k}: f32[64,128], param_1.{k}: f32[64,128]) "
            f"-> f32[64,128] {{\n"
            f"  %param_0.{k} = f32[64,128]{{1,0}} parameter(0)\n"
            f"  %param_1.{k} = f32[64,128]{{1,0}} parameter(1)\n"
            f"  %multiply.{k} = f32[64,128]{{1,0}} multiply(%param_0.{k}, %param_1.{k}), {meta}\n"
            f"  %exponential.{k} = f32[64,128]{{1,0}} exponential(%multiply.{k}), {meta}\n"
            f"  ROOT %add.{k} = f32[64,128]{{1,0}} add(%exponential.{k}, %param_0.{k}), {meta}\n"
            f"}}\n"
        )
        parts.append(block)
        size += len(block)
        k += 1
    entry = [
        "\nENTRY %main (x: f32[64,128]) -> f32[64,128] {",
        "  %x = f32[64,128]{1,0} parameter(0)",
    ]
    previous = "%x"
    for j in range(k):
        entry.append(
            f"  %fusion.{j} = f32[64,128]{{1,0}} fusion({previous}, %x), kind=kLoop, "
            f'calls=%fused_computation.{j}, metadata={{op_name="jit(big)/layer_{j}" '
            f"stack_frame_id={j % 40 + 1}}}"
        )
        previous = f"%fusion.{j}"
    entry += [f"  ROOT %out = f32[64,128]{{1,0}} copy({previous})", "}"]
    return "".join(parts) + "\n".join(entry) + "\n"


def attention_with_pipeline() -> dict[str, Any]:
    """The attention run with `measure.pipeline` on: XLA's passes captured on the CPU."""
    from workers.protocol import JobSpec
    from workers.run.engine import run_job

    spec = {**ATTENTION, "measure": {**ATTENTION["measure"], "pipeline": True}}
    return run_job(JobSpec.model_validate(spec)).model_dump(mode="json")
