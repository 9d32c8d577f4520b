"""Every JAX reader card's example, compiled for real for the card's target, against what
the card says: one test per card that its stated collectives, fusions, library calls and
layouts appear in the real compiler output (libtpu and the CUDA plugin, without the
hardware), and that the job is exactly the card's code example (shapes and dtypes).

Each card's job is compiled once per test session (the compiles take seconds each).
"""

from __future__ import annotations

import functools
import re

import pytest

from app.reader.card_jobs import check_claims
from app.reader.content import CARD_JOB_PATHS, Card, load_content
from workers.protocol import JobSpec, PathId, RunResult, StageId, parse_target
from workers.run.deviceless import real_devices
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

CONTENT = load_content()
CARDS: dict[str, Card] = {
    f"{p.value}.{s.value}": card for (p, s), card in CONTENT.cards.items() if p in CARD_JOB_PATHS
}


@functools.cache
def compiled(key: str) -> RunResult:
    """The card's job, compiled once for its target."""
    card = CARDS[key]
    assert card.job is not None
    return run_job(JobSpec.model_validate(card.job.body()))


def test_every_jax_card_names_its_job() -> None:
    assert sorted(CARDS) == [
        f"{p}.{s}" for p in ("jax-gpu", "jax-tpu") for s in ("compile", "execute", "scale")
    ]
    for key, card in CARDS.items():
        assert card.job is not None, key
        assert card.job.path is card.path
    tpu_scale = CARDS["jax-tpu.scale"].job
    assert tpu_scale is not None
    assert (tpu_scale.workload, tpu_scale.target) == ("sharded-matmul", "v6e:2x4")
    assert tpu_scale.params["mesh"] == "2x4" and tpu_scale.params["a_spec"] == "data,model"


@pytest.mark.parametrize("key", sorted(CARDS))
def test_the_cards_claims_hold_in_the_real_compiler_output(key: str) -> None:
    run = compiled(key)
    card = CARDS[key]
    assert card.job is not None
    assert run.target is not None and run.target.id == card.job.target
    # Compiled without the hardware unless this machine has the target's chips.
    assert run.target.deviceless is (real_devices(parse_target(card.job.target)) is None)
    assert [s for s in run.job.stages] == [StageId.COMPILE]
    texts = {name: getattr(run.artifacts, name) for name in ("hlo", "stablehlo", "jaxpr", "ptx")}
    checks = check_claims(card.job, texts)
    failed = [c.says for c in checks if not c.holds]
    assert not failed, f"{key}: claims the real output does not bear out: {failed}"


@pytest.mark.parametrize("key", sorted(CARDS))
def test_the_cards_code_uses_the_jobs_shapes(key: str) -> None:
    """The example's arrays are the job's: each input shape and dtype appears in the code."""
    run = compiled(key)
    code = CARDS[key].code.text.replace(" ", "")
    for info in run.inputs:
        shape = ",".join(map(str, info.shape))
        # The code writes the global shapes, e.g. (4096,8192) or (1,1,512,128).
        assert f"({shape})" in code, f"{key}: no array of shape ({shape}) in the example"
        short = {"float32": "float32", "bfloat16": "bfloat16"}[info.dtype]
        assert short in code, f"{key}: the example never says {short}"


def test_a_claim_the_output_contradicts_is_reported_as_not_holding() -> None:
    """The checker can fail: the TPU scale card's output against a claim of a cuBLAS call
    and against a claim that there is no all-reduce."""
    run = compiled("jax-tpu.scale")
    job = CARDS["jax-tpu.scale"].job
    assert job is not None
    wrong = job.model_copy(
        update={
            "claims": [
                job.claims[0].model_copy(update={"pattern": r"__cublas"}),
                job.claims[0].model_copy(update={"absent": True}),
            ]
        }
    )
    checks = check_claims(wrong, {"hlo": run.artifacts.hlo})
    assert [c.holds for c in checks] == [False, False]
    assert checks[1].found is not None and re.search(r"all-reduce\(", checks[1].found)


def test_gpu_cards_compile_for_a_b200() -> None:
    for key in ("jax-gpu.compile", "jax-gpu.scale"):
        run = compiled(key)
        assert run.target is not None and run.target.arch == "sm_100"
        assert run.job.path is PathId.JAX_GPU


@pytest.mark.parametrize(
    ("key", "says", "carrier"),
    [
        (
            "jax-gpu.scale",
            "The result is replicated",
            r"^ROOT %\S+ = f32\[4096,1024\]\S* all-reduce-done\(",
        ),
        (
            "jax-tpu.scale",
            "The result stays sharded",
            r"^ROOT %\S+ = bf16\[512,2048\]\S* all-reduce\(",
        ),
    ],
)
def test_a_sharding_claim_quotes_the_instruction_that_carries_it(
    key: str, says: str, carrier: str
) -> None:
    """Not a computation's signature that happens to have the shape (the GEMM's own
    `-> f32[4096,1024]` once made "replicated" hold): the entry's last instruction, the
    all-reduce that leaves each device its output, quoted whole without its metadata."""
    run = compiled(key)
    job = CARDS[key].job
    assert job is not None and run.artifacts.hlo is not None
    (check,) = [c for c in check_claims(job, {"hlo": run.artifacts.hlo}) if c.says.startswith(says)]
    assert check.holds and check.found is not None
    assert re.search(carrier, check.found), check.found
    assert "metadata=" not in check.found and "fusion" not in check.found.split("(")[0]


def test_a_tpu_program_that_does_not_fit_is_a_finished_run_that_shows_the_misfit() -> None:
    """libtpu refuses temporaries past a chip's HBM; the run is a valid compile-only run, as
    on a GPU target: 16 × 32 × 8192² float32 scores are 137 GB against a v6e chip's 32 GB."""
    job = JobSpec.model_validate(
        {
            "workload": "attention",
            "path": "jax-tpu",
            "target": "v6e:1x1",
            "params": {"batch": 16, "heads": 32, "seq_len": 8192, "head_dim": 128},
        }
    )
    run = run_job(job)
    assert run.valid and run.target is not None and run.artifacts.hlo is None
    assert run.target.refused is not None and "exceeds available HBM" in run.target.refused
    memory = run.target.memory
    assert memory is not None and memory.temp_bytes is not None
    assert memory.temp_bytes > memory.hbm_bytes  # libtpu's own 136.00G, read as GiB
    assert any(w.startswith("Does not fit: libtpu (XLA:TPU) refused") for w in run.warnings)
