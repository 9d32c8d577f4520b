"""A run on a real chip, held against what Boundary predicts for that chip without it.

After a job runs on a real TPU, the same job is compiled once more for the chip's own
target (`v5e:1x1` for one TPU v5e) without the device, in a process of its own that never
touches the chip (`JAX_PLATFORMS=cpu`; libtpu compiles for a topology it is given). That
compile is exactly what a machine with no TPU makes of the job, and it brings what the
real run cannot take without slowing its own timed compile: the bundles libtpu schedules
(its dumps are process-wide), each kernel's schedule summary. The run then shows:

- the bundles and kernel schedules, said to come from that compile;
- its peak memory beside the real compile's, whether the compiler refused it, and whether
  its optimized HLO is the real one's (same instructions, shapes and operations in the same
  order), which is what makes the rest of the prediction worth reading;
- the compiler's estimated cycles per fusion are in the real HLO itself, and the server
  sets them against the measured device time (`workers.measure.device_time`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from workers.catalog import CatalogError
from workers.measure.publish import Measured
from workers.protocol import JobSpec, MemoryAnalysis, Prediction, RunResult, StageId
from workers.protocol.hlo import HloSyntaxError, read_hlo
from workers.protocol.targets import own_target
from workers.run.base import PathUnavailable
from workers.run.isolated import run_isolated

OFF_THE_CHIP = {"BOUNDARY_JAX_PLATFORMS": "cpu", "JAX_PLATFORMS": "cpu"}
"""A process that compiles for the chip's target must not open the chip: one process
holds a TPU, and a second one that tries fails at once (libtpu's lockfile)."""

PREDICT_ENV = "BOUNDARY_CHIP_PREDICTION"
"""`off` leaves the compile without the device out of a chip's runs (a worker whose runs
must cost no more than their own compile and execute, a benchmark of host overhead)."""

FROM_PREDICTION = ("bundles", "mosaic")
"""Artifacts the real run takes from the compile without the device."""


def instructions(hlo: str | None) -> list[tuple[str, str, str]]:
    """Each instruction of optimized HLO text as (name, shape, operation), in order (the
    HLO reader's; nothing when the text does not read)."""
    try:
        module = read_hlo(hlo or "")
    except HloSyntaxError:
        return []
    return [(i.name, i.shape, i.opcode) for i in module.instructions()]


def deviceless_job(job: JobSpec, target: str) -> JobSpec:
    """`job` compiled for `target` without running: what a machine with no chip makes of it."""
    return job.model_copy(update={"target": target, "stages": [StageId.COMPILE], "path": job.path})


def _peak(memory: MemoryAnalysis | None) -> tuple[int | None, int | None]:
    return (memory.peak_bytes, memory.temp_bytes) if memory is not None else (None, None)


def predicted(
    real: Measured, devices: int, *, cache_dir: Path | None, files_dir: Path | None, max_bytes: int
) -> tuple[Prediction, RunResult | None] | None:
    """The prediction for the chip `real` ran on, and the compile it came from (None when
    it failed); None when no target models the chip."""
    target = own_target(real.environment.device_kind, devices)
    if target is None:
        return None
    t0 = time.perf_counter()
    env = dict(os.environ, **OFF_THE_CHIP)
    try:
        run = run_isolated(
            deviceless_job(real.job, target),
            cache_dir=cache_dir,
            max_bytes=max_bytes,
            files_dir=files_dir,
            environ=env,
        )
    except (CatalogError, PathUnavailable, RuntimeError) as exc:
        refused = f"the compile for {target} without the device failed: {str(exc)[:600]}"
        return Prediction(target=target, refused=refused, seconds=time.perf_counter() - t0), None
    peak, temp = _peak(run.memory_analysis)
    real_peak, real_temp = _peak(real.memory_analysis)
    same = instructions(run.artifacts.hlo) == instructions(real.artifacts.hlo)
    prediction = Prediction(
        target=target,
        compiler_version=run.target.compiler_version if run.target else None,
        predicted_peak_bytes=peak,
        real_peak_bytes=real_peak,
        predicted_temp_bytes=temp,
        real_temp_bytes=real_temp,
        usable_bytes=run.target.memory.usable_bytes if run.target and run.target.memory else None,
        same_hlo=same if run.artifacts.hlo and real.artifacts.hlo else None,
        refused=run.target.refused if run.target else None,
        seconds=time.perf_counter() - t0,
    )
    return prediction, run


def attach_prediction(
    real: Measured, devices: int, *, cache_dir: Path | None, files_dir: Path | None, max_bytes: int
) -> None:
    """Compile the job for the chip's own target without the device and set the prediction
    beside the real run; the bundles and kernel schedules come from that compile."""
    if os.environ.get(PREDICT_ENV, "on").lower() == "off":
        return
    found = predicted(real, devices, cache_dir=cache_dir, files_dir=files_dir, max_bytes=max_bytes)
    if found is None:
        return
    prediction, run = found
    real.prediction = prediction
    assert real.unreported is not None
    real.unreported["prediction"] = prediction.seconds or 0.0
    if run is None:
        real.warnings.append(f"prediction: {prediction.refused}")
        return
    for name in FROM_PREDICTION:
        if getattr(real.artifacts, name) is None and getattr(run.artifacts, name) is not None:
            setattr(real.artifacts, name, getattr(run.artifacts, name))
    if real.target is not None and run.target is not None:
        real.target = real.target.model_copy(
            update={"kernels": run.target.kernels, "dump": run.target.dump}
        )
