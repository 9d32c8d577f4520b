"""Bounds on the figures only a worker can know: a compiler's report, its own clock.

`workers.catalog.published` recomputes what the server can work out itself and bounds
the rest with these functions: a figure is kept when it is finite and not negative (and
consistent with the job and the chip it names), and withheld (None: "not reported")
otherwise. A withheld figure is never replaced by 0, which would read as a measurement.
"""

from __future__ import annotations

import math
import re
from typing import Any

from workers.protocol.jobs import JobSpec
from workers.protocol.runs import KernelResources
from workers.protocol.scale import GroupReport, Placement
from workers.protocol.targets import (
    GPU_USABLE_SOURCE,
    KernelSchedule,
    TargetError,
    TargetReport,
    gpu_usable_bytes,
    parse_target,
)

KNOWN_EXTRA: frozenset[str] = frozenset(
    {
        "baselines",
        "comparison",
        "compile_only",
        "cuda",
        "kernel",
        "output_sha256",
        "sampled",
        "seed",
        "sizes_distinct",
        "unreported_s",
        "warmed",
    }
)
"""The `extra` entries a run may carry (each with its rule in the rules table); any other
entry a worker sends is dropped."""


RATE_IN_WORDS = re.compile(r"\d\s*[kKMGTPE]?(?:i?B|FLOP|FLOPS|ops|calls)\s*/\s*s\b|FLOP/s|GB/s")
"""A rate written into a sentence: rates are the server's own, so such a sentence is
dropped (counts and times live in structured fields, never in words)."""


def words(text: str | None, limit: int = 2_000) -> str | None:
    """A worker's sentence, capped, or None when it states a rate."""
    if text is None or RATE_IN_WORDS.search(text):
        return None
    return text[:limit]


def seconds(value: float | None) -> float | None:
    """A time or a non-negative quantity: kept when finite and not negative."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def count(value: int | None) -> int | None:
    """A count of bytes or things: kept when not negative."""
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value >= 0 else None


def _text(value: Any, limit: int = 2_000) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def bounded_extra(extra: dict[str, Any], job: JobSpec) -> dict[str, Any]:
    """`extra` with known entries only, each of its type: times not negative, the warm-up
    call count the job's own."""
    kept: dict[str, Any] = {}
    for key, value in extra.items():
        if key not in KNOWN_EXTRA:
            continue
        if key == "unreported_s":
            if isinstance(value, dict):
                parts = {str(k)[:64]: seconds(v) for k, v in list(value.items())[:32]}
                kept[key] = {k: v for k, v in parts.items() if v is not None}
        elif key == "warmed":  # which parts the uncounted calls covered, by name
            raw = value.get("covers") if isinstance(value, dict) else None
            covers = [str(c)[:64] for c in raw[:16]] if isinstance(raw, list) else []
            kept[key] = {"calls": job.measure.warmup, "covers": covers}
        elif key in ("seed", "sizes_distinct"):
            if count(value) is not None:
                kept[key] = value
        elif key in ("output_sha256", "sampled"):
            if _text(value) is not None:
                kept[key] = _text(value)
        elif key == "compile_only":
            if isinstance(value, bool):
                kept[key] = value
        elif key == "kernel":
            record = _kernel_record(value)
            if record is not None:
                kept[key] = record
        elif key in ("baselines", "comparison"):
            if job.path.value == "cuda":  # the cuda path's subjects; re-judged, recomputed
                kept[key] = value
        else:  # cuda: typed by the lease check
            kept[key] = value
    return kept


def _kernel_record(value: Any) -> dict[str, Any] | None:
    """A Pallas run's `extra.kernel` when it has its documented types: the kernel and its
    compiler and GPU as words, every block size a whole number from 1 to 65,536."""
    if not isinstance(value, dict):
        return None
    blocks = value.get("blocks")
    if not isinstance(blocks, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65_536 for v in blocks.values()
    ):
        return None
    texts = {k: value.get(k) for k in ("kernel", "compiler", "gpu")}
    if not all(v is None or isinstance(v, str) for v in texts.values()):
        return None
    return {**{k: v[:64] if v else v for k, v in texts.items()}, "blocks": dict(blocks)}


def bounded_kernel_resources(resources: list[KernelResources]) -> list[KernelResources]:
    """ptxas's figures per kernel, each kept when not negative."""
    names = (
        "registers",
        "shared_bytes",
        "constant_bytes",
        "stack_bytes",
        "spill_store_bytes",
        "spill_load_bytes",
        "barriers",
    )
    return [r.model_copy(update={n: count(getattr(r, n)) for n in names}) for r in resources]


def bounded_placement(placement: Placement | None) -> Placement | None:
    """A mesh's per-device memory figures, each kept when not negative."""
    if placement is None:
        return None
    names = ("argument_bytes", "output_bytes", "temp_bytes", "peak_bytes", "in_use_peak_bytes")
    memory = [
        m.model_copy(update={n: count(getattr(m, n)) for n in names}) for m in placement.memory
    ]
    return placement.model_copy(update={"memory": memory})


def _schedule(k: KernelSchedule) -> KernelSchedule:
    names = ("bundles", "non_empty_bundles", "mxu_ops", "mxu_pushes")
    update: dict[str, Any] = {n: max(getattr(k, n), 0) for n in names}
    update["non_empty_bundles"] = min(update["non_empty_bundles"], update["bundles"])
    update["vmem_bytes"] = count(k.vmem_bytes)
    return k.model_copy(update=update)


def bounded_target(
    report: TargetReport | None, job: JobSpec, own: str | None = None
) -> TargetReport | None:
    """What a run compiled for, as the job names it (or, for a job that names none and
    ran on a chip, that chip's own target `own`, which the server derives from the device
    kind the worker registered): id, model, device count and the
    chip's published HBM from the server's own table; what a device may hold (libtpu's
    reading, bounded, on a TPU; JAX's default share on a GPU); the compiler's memory figures kept
    when not negative, the share of HBM worked out again; figures a compiler leaves
    unfilled without the hardware (libtpu's temporaries, XLA:GPU's code size) read as
    not reported; a run whose job did not execute is deviceless, whatever it says."""
    named = job.target or own
    if report is None or named is None:
        return None
    try:
        target = parse_target(named)
    except TargetError:
        return None
    chip = target.chip
    ran = bool({"execute", "scale"} & {s.value for s in job.stages})
    update: dict[str, Any] = {
        "id": target.id,
        "model": target.model.value,
        "count": target.count,
        "deviceless": not ran,  # a job that ran needed the hardware
        "kernels": [_schedule(k) for k in report.kernels],
    }
    memory = report.memory
    if memory is not None:
        # Without the device, libtpu leaves the temporaries at 0 (it fills them in only
        # when it refuses a program: what it named) and XLA:GPU the code size.
        tpu_blank = chip.platform.value == "tpu" and not ran and report.refused is None
        gpu_blank = chip.platform.value == "gpu" and not ran
        peak = count(memory.peak_bytes)
        code = count(memory.generated_code_bytes)
        hbm = chip.device_hbm_bytes
        if chip.platform.value == "tpu":  # libtpu's reading: only the worker has it
            usable = count(memory.usable_bytes)
            usable = usable if usable is not None and 0 < usable <= 2 * hbm else None
            source = words(memory.usable_source, 300) if usable is not None else None
        else:
            usable, source = gpu_usable_bytes(chip), GPU_USABLE_SOURCE
        needed = None if peak is None else peak + (code or 0)
        update["memory"] = memory.model_copy(
            update={
                "peak_bytes": peak,
                "argument_bytes": count(memory.argument_bytes),
                "output_bytes": count(memory.output_bytes),
                "temp_bytes": None if tpu_blank else count(memory.temp_bytes),
                "generated_code_bytes": None if gpu_blank and not code else code,
                "usable_bytes": usable,
                "usable_source": source,
                "hbm_bytes": hbm,
                "hbm_label": chip.device_hbm_label,
                "source": chip.source,
                "fraction": needed / (usable or hbm) if needed is not None else None,
            }
        )
    return report.model_copy(update=update)


def bounded_group(group: GroupReport | None) -> GroupReport | None:
    """A worker group's members: errors kept when finite and not negative; a member's
    median kept only for process 0, whose samples the run carries (the gate works it
    out again from them); the others' are withheld, as the server has no samples of
    theirs."""
    if group is None:
        return None
    members = [
        m.model_copy(
            update={
                "error": seconds(m.error),
                "median_s": seconds(m.median_s) if m.process_id == 0 else None,
                "local_devices": max(m.local_devices, 0),
            }
        )
        for m in group.members
    ]
    return group.model_copy(update={"members": members})
