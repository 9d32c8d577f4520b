"""What "fits" means per target: libtpu's verdict on a TPU (aimed at the usable bytes the
workers read from libtpu, else at what its refusals say it has, in either form), the
peak against usable_fraction × HBM on a GPU (0.75 by default, JAX's GPU allocator's
own). Both name the figure usable_bytes, with the published HBM beside it."""

from __future__ import annotations

from app.queue.fit_criteria import Rule, criterion_of
from workers.protocol import parse_target
from workers.protocol.sizes import hbm_refusal_figures

OVER_TEMPORARIES = (
    "Ran out of memory on HBM, the total memory required for HLO temporaries (31.31G) "
    "exceeds available HBM (31.25G)."
)
OVER_CAPACITY = (
    "E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran out of memory in memory "
    "space hbm. Used 31.25G of 31.25G hbm. Exceeded hbm capacity by 6.75M."
)


def test_a_gpu_fits_when_its_peak_is_within_the_usable_bytes() -> None:
    h100 = criterion_of(parse_target("h100:1"))
    assert h100.rule is Rule.USABLE and h100.usable_bytes == 60 * 10**9
    assert h100.fits(60 * 10**9, None) and not h100.fits(60 * 10**9 + 1, None)
    assert h100.fits(None, None) is None  # no peak, no verdict
    assert h100.aim([]) == 60 * 10**9
    assert "0.75 × 80 GB HBM3 = 60,000,000,000 bytes" in h100.text()
    half = criterion_of(parse_target("b200:1"), 0.5)
    assert half.usable_bytes == 90 * 10**9 and "0.5 × 180 GB" in half.text()


def test_a_tpu_fits_when_libtpu_compiles_it_and_aims_at_its_usable_bytes() -> None:
    read = {"v5e:1x1": 16_909_336_064}  # as a worker read it from libtpu 0.0.42
    v5e = criterion_of(parse_target("v5e:1x1"), capacities=read)
    assert v5e.rule is Rule.LIBTPU and v5e.usable_bytes == 16_909_336_064
    assert v5e.hbm_bytes == 16 * 2**30 and "16 GB HBM2 per chip" in v5e.hbm_label
    assert v5e.aim([OVER_TEMPORARIES]) == 16_909_336_064
    assert "16,909,336,064 of the published 16 GB HBM2" in v5e.text()
    v6e = criterion_of(parse_target("v6e:1x1"), capacities=read)  # no worker read it yet
    assert v6e.usable_bytes is None and "not reported yet" in v6e.text()
    assert v6e.fits(40 * 10**9, None) and not v6e.fits(None, OVER_CAPACITY)
    assert v6e.aim([]) == v6e.hbm_bytes == 32 * 2**30
    assert v6e.aim([OVER_TEMPORARIES]) == int(31.25 * 2**30)  # what its refusal says
    tpu7x = criterion_of(parse_target("tpu7x:2x2x1"))  # two devices a chip: half its HBM
    assert tpu7x.hbm_bytes == 96 * 2**30
    assert hbm_refusal_figures(OVER_TEMPORARIES) == (round(31.31 * 2**30), int(31.25 * 2**30))
    assert hbm_refusal_figures(OVER_CAPACITY) == (
        int(31.25 * 2**30) + round(6.75 * 2**20),
        int(31.25 * 2**30),
    )
    assert hbm_refusal_figures("Ran out of memory in memory space vmem.") is None
