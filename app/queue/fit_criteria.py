"""What "fits" means for a fit search's target, stated, not implied.

- **TPU (libtpu).** libtpu's own verdict: it refuses to compile a program whose memory
  passes what it keeps of the chip's HBM ("Ran out of memory on HBM, the total memory
  required for HLO temporaries (31.31G) exceeds available HBM (31.25G)"). A probe that
  compiled fits; a refused one does not. The peak of a probe that fitted is its
  `memory_analysis()` peak; a refused one has only the figure of the refusal.
- **NVIDIA GPU (XLA:GPU).** XLA:GPU compiles a program whatever its size, so the
  verdict is ours: its `memory_analysis()` peak, nothing added, at most the usable
  bytes, `usable_fraction` of the chip's published HBM. The default is JAX's default
  on a GPU: it preallocates 75% of the device's memory (`XLA_PYTHON_CLIENT_MEM_FRACTION`,
  `XLA_CLIENT_MEM_FRACTION` in newer jax). docs/fit-search.md cites it.

Pure: the server decides each probe's verdict here from the run's own figures, and
bench/fit_search.py from a compile of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from workers.protocol import Platform, Target, TargetModel

DEFAULT_USABLE_FRACTION = 0.75
"""JAX's GPU allocator preallocates 75% of the device's memory unless told otherwise."""

LIBTPU_KEEPS: dict[TargetModel, int] = {TargetModel.V6E: int(31.25 * 2**30)}
"""What libtpu (0.0.42) keeps of a chip's HBM for a program, as its refusals say
("exceeds available HBM (31.25G)" on a v6e, whose 32 GB label is 32 GiB): where a TPU
search aims until a refusal names the figure itself. Only an aim: the verdict is libtpu's."""

_REFUSAL = re.compile(
    r"required for HLO temporaries \((?P<need>[\d.]+)(?P<need_unit>[KMGT])\) exceeds "
    r"available HBM \((?P<have>[\d.]+)(?P<have_unit>[KMGT])\)"
)
_OVER_CAPACITY = re.compile(
    r"Used (?P<need>[\d.]+)(?P<need_unit>[KMGT]) of (?P<have>[\d.]+)(?P<have_unit>[KMGT]) "
    r"hbm\. Exceeded hbm capacity by (?P<over>[\d.]+)(?P<over_unit>[KMGT])"
)
"""libtpu's other form, for a program just over: what it used, of what it keeps, and by
how much it went over."""
_SCALE = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
"""libtpu writes sizes in binary multiples (31.25G of a 32 GiB chip)."""


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
    """The chip's published HBM (decimal bytes, the vendor's figure)."""
    hbm_label: str
    usable_fraction: float | None
    usable_bytes: int | None
    """GPU: the most a peak may be; None on TPU, where libtpu decides."""
    kept_bytes: int | None = None
    """TPU: what libtpu is known to keep of the HBM (`LIBTPU_KEEPS`), for the aim."""

    def text(self) -> str:
        """The criterion in one sentence, as the page and the API state it."""
        if self.rule is Rule.LIBTPU:
            return (
                "fits when libtpu compiles it: libtpu refuses a program whose memory passes "
                "what it keeps of the chip's HBM"
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
        """The peak the planner aims at: the usable bytes on a GPU; on a TPU what libtpu
        said it keeps in its last refusal, else what it is known to keep, else the
        published HBM."""
        if self.usable_bytes is not None:
            return self.usable_bytes
        for message in reversed(refusals):
            figures = refusal_figures(message)
            if figures is not None:
                return figures[1]
        return self.kept_bytes or self.hbm_bytes


def criterion_of(target: Target, usable_fraction: float | None = None) -> Criterion:
    """The criterion of `target`; `usable_fraction` applies to GPU targets (default
    `DEFAULT_USABLE_FRACTION`)."""
    chip = target.chip
    if target.platform is Platform.TPU:
        kept = LIBTPU_KEEPS.get(target.model)
        return Criterion(Rule.LIBTPU, chip.hbm_bytes, chip.hbm_label, None, None, kept)
    fraction = DEFAULT_USABLE_FRACTION if usable_fraction is None else usable_fraction
    usable = int(chip.hbm_bytes * fraction)
    return Criterion(Rule.USABLE, chip.hbm_bytes, chip.hbm_label, fraction, usable)


def refusal_figures(message: str) -> tuple[int, int] | None:
    """(bytes the program needs, bytes libtpu keeps) from libtpu's out-of-HBM refusal
    (either of its forms), or None when the message gives no figures."""
    found = _REFUSAL.search(message) or _OVER_CAPACITY.search(message)
    if found is None:
        return None
    need = round(float(found["need"]) * _SCALE[found["need_unit"]])
    if "over" in found.groupdict():
        need += round(float(found["over"]) * _SCALE[found["over_unit"]])
    return need, round(float(found["have"]) * _SCALE[found["have_unit"]])
