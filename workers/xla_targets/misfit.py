"""A program that does not fit its target, as libtpu says so.

XLA:GPU compiles a program whatever its size, and its `memory_analysis()` shows by how
much it does not fit. libtpu refuses instead: its compile fails with RESOURCE_EXHAUSTED,
in one of two forms (libtpu 0.0.42): "Ran out of memory on HBM, the total memory required
for HLO temporaries (136.00G) exceeds available HBM (31.25G)", or, for a program just
over, "E1000: CompileTimeHbmOom: … Ran out of memory in memory space hbm. Used 31.25G of
31.25G hbm. Exceeded hbm capacity by 6.75M." Both answer the question a compile-only run
asks ("does it fit?"), so both become a finished run that shows the misfit; here the
refusal's own figures are read back (in the second form, what it needs is what it used
and the excess).
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.protocol.sizes import hbm_refusal_figures


@dataclass(frozen=True)
class Misfit:
    """libtpu's refusal of a program too big for one chip's HBM."""

    message: str
    """The compiler's own sentence."""
    temp_bytes: int | None
    """The temporaries it said the program needs, in bytes, when it gave a figure."""
    available_bytes: int | None
    """The HBM it said it has for them, in bytes."""


def hbm_misfit(exc: BaseException) -> Misfit | None:
    """The misfit `exc` reports when it is libtpu's out-of-HBM refusal, else None (a
    refusal for another reason, such as scoped VMEM, is no answer to "does it fit")."""
    text = str(exc)
    if "RESOURCE_EXHAUSTED" not in text or "HBM" not in text.upper():
        return None
    message = text.split("RESOURCE_EXHAUSTED:", 1)[-1].strip().splitlines()[0][:300]
    figures = hbm_refusal_figures(text)
    if figures is None:
        return Misfit(message, None, None)
    return Misfit(message, *figures)
