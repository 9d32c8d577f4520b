"""What "fits" means for a fit search's target, stated, not implied.

- **TPU (libtpu).** libtpu's own verdict: it refuses to compile a program whose memory
  (peak + generated code) passes what it makes available on the target, its usable
  bytes ("Ran out of memory on HBM, the total memory required for HLO temporaries
  (31.31G) exceeds available HBM (31.25G)"). A probe that compiled fits; a refused one
  does not. The usable bytes are the workers' reading of their libtpu
  (`Capabilities.capacities`, workers.xla_targets.capacity), shown with the published
  HBM beside them and aimed at by the planner. The peak of a probe that fitted is its
  `memory_analysis()` peak; a refused one has only the figure of the refusal.
- **NVIDIA GPU (XLA:GPU).** XLA:GPU compiles a program whatever its size, so the
  verdict is ours: its `memory_analysis()` peak, nothing added, at most the usable
  bytes, `usable_fraction` of the chip's published HBM. The default is JAX's default
  on a GPU: it preallocates 75% of the device's memory (`XLA_PYTHON_CLIENT_MEM_FRACTION`,
  `XLA_CLIENT_MEM_FRACTION` in newer jax). docs/fit-search.md cites it.

Both name the figure `usable_bytes`, with `hbm_bytes` beside it.

Pure: the server decides each probe's verdict here from the run's own figures, and
bench/fit_search.py from a compile of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from workers.protocol import GPU_USABLE_FRACTION, Platform, Target, gpu_usable_bytes
from workers.protocol.sizes import hbm_refusal_figures

DEFAULT_USABLE_FRACTION = GPU_USABLE_FRACTION
"""JAX's GPU allocator preallocates 75% of the device's memory unless told otherwise."""


class Rule(StrEnum):
    """Whose verdict a probe's fit is."""

    LIBTPU = "libtpu"
    """The compiler's own: it refuses a program over HBM."""
    USABLE = "usable"
    """Ours: the peak against `usable_fraction` of the published HBM."""


@dataclass(frozen=True)
class Criterion:
    """How a target's probes are judged, and the figures the page shows beside them."""

    rule: Rule
    hbm_bytes: int
    """The published HBM of one device (the vendor's figure)."""
    hbm_label: str
    usable_fraction: float | None
    usable_bytes: int | None
    """What one device may hold: on a GPU the most a peak may be; on a TPU what libtpu
    makes available (its verdict decides; None until a worker has read it)."""

    def text(self) -> str:
        """The criterion in one sentence, as the page and the API state it."""
        if self.rule is Rule.LIBTPU:
            usable = (
                f"its usable bytes, {self.usable_bytes:,} of the published {self.hbm_label}"
                if self.usable_bytes is not None
                else "its usable bytes (not reported yet: no connected worker has read them "
                f"from its libtpu), of the published {self.hbm_label}"
            )
            return (
                "fits when libtpu compiles it: libtpu refuses a program whose peak + "
                f"generated code pass what it makes available on the target, {usable}"
            )
        assert self.usable_fraction is not None and self.usable_bytes is not None
        return (
            f"fits when memory_analysis() peak ≤ {self.usable_fraction:g} × "
            f"{self.hbm_label.split(' per ')[0]} = {self.usable_bytes:,} bytes (JAX's GPU "
            f"allocator preallocates {DEFAULT_USABLE_FRACTION:.0%} by default)"
        )

    def fits(self, peak_bytes: int | None, refused: str | None) -> bool | None:
        """A probe's verdict from its compile: None when it cannot be judged (a GPU
        compile without a peak)."""
        if self.rule is Rule.LIBTPU:
            return refused is None
        if refused is not None:
            return False
        if peak_bytes is None or self.usable_bytes is None:
            return None
        return peak_bytes <= self.usable_bytes

    def aim(self, refusals: list[str]) -> int:
        """The peak the planner aims at: the usable bytes; on a TPU whose usable bytes no
        worker has read, what libtpu said it has in its last refusal, else the published
        HBM."""
        if self.usable_bytes is not None:
            return self.usable_bytes
        for message in reversed(refusals):
            figures = hbm_refusal_figures(message)
            if figures is not None:
                return figures[1]
        return self.hbm_bytes


def criterion_of(
    target: Target,
    usable_fraction: float | None = None,
    capacities: Mapping[str, int] | None = None,
) -> Criterion:
    """The criterion of `target`; `usable_fraction` applies to GPU targets (default
    `DEFAULT_USABLE_FRACTION`), `capacities` (target id → usable bytes, the workers'
    reading of libtpu) to TPU targets."""
    chip = target.chip
    hbm, label = chip.device_hbm_bytes, chip.device_hbm_label
    if target.platform is Platform.TPU:
        usable = (capacities or {}).get(target.id)
        return Criterion(Rule.LIBTPU, hbm, label, None, usable)
    fraction = DEFAULT_USABLE_FRACTION if usable_fraction is None else usable_fraction
    return Criterion(Rule.USABLE, hbm, label, fraction, gpu_usable_bytes(chip, fraction))
