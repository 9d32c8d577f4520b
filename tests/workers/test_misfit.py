"""libtpu's refusal of a program over HBM is read in both its forms (a finished run that
shows the misfit, not a failed job); a refusal for another memory (VMEM) is not a misfit."""

from __future__ import annotations

from workers.xla_targets.misfit import hbm_misfit

GIB = 2**30


def test_both_forms_of_libtpu_s_refusal_are_misfits_with_their_figures() -> None:
    first = hbm_misfit(
        RuntimeError(
            "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
            "temporaries (136.00G) exceeds available HBM (31.25G)."
        )
    )
    assert first is not None and (first.temp_bytes, first.available_bytes) == (
        136 * GIB,
        int(31.25 * GIB),
    )
    second = hbm_misfit(
        RuntimeError(
            "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. "
            "Ran out of memory in memory space hbm. Used 31.25G of 31.25G hbm. Exceeded hbm "
            "capacity by 6.75M.\n\nTotal hbm usage >= 31.35G:\n    reserved        260.00M"
        )
    )
    assert second is not None and second.message.startswith("E1000: CompileTimeHbmOom")
    assert second.temp_bytes == int(31.25 * GIB) + round(6.75 * 2**20)
    assert second.available_bytes == int(31.25 * GIB)
    vmem = RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem.")
    assert hbm_misfit(vmem) is None
