"""Every JAX reader card's two examples (XLA's kernels, then a Pallas kernel), compiled for
real for the card's target, against what the card says: one test per example that its
stated collectives, fusions, custom calls, layouts and (for Pallas) kernel IR, bundles,
PTX and SASS appear in the real compiler output (libtpu and the CUDA plugin, without the
hardware), and that the job is exactly the example's code (shapes and dtypes).

Each example's job is compiled once per test session (the compiles take seconds each).
"""

from __future__ import annotations

import functools
import re

import pytest

from app.reader.card_jobs import check_claims
from app.reader.content import CARD_JOB_PATHS, load_content
from app.reader.models import Card, CardJob
from workers.protocol import ARTIFACT_NAMES, JobSpec, PathId, RunResult, StageId, parse_target
from workers.run.deviceless import real_devices
from workers.run.engine import run_job

pytestmark = pytest.mark.slow

CONTENT = load_content()
CARDS: dict[str, Card] = {
    f"{p.value}.{s.value}": card for (p, s), card in CONTENT.cards.items() if p in CARD_JOB_PATHS
}


EXAMPLES = [f"{key}/{which}" for key in sorted(CARDS) for which in ("xla", "pallas")]
"""Each card's examples: `jax-tpu.compile/xla`, `jax-tpu.compile/pallas`, …"""


def example(name: str) -> tuple[CardJob, str]:
    """The job and code of one example (`card/xla` or `card/pallas`)."""
    key, which = name.split("/")
    card = CARDS[key]
    if which == "pallas":
        assert card.pallas is not None
        return card.pallas.job, card.pallas.code.text
    assert card.job is not None
    return card.job, card.code.text


@functools.cache
def compiled(name: str) -> RunResult:
    """An example's job, compiled once for its target (`name`: a card key, or card/which)."""
    job, _ = example(name if "/" in name else f"{name}/xla")
    return run_job(JobSpec.model_validate(job.body()))


def test_every_jax_card_names_its_job() -> None:
    assert sorted(CARDS) == [
        f"{p}.{s}" for p in ("jax-gpu", "jax-tpu") for s in ("compile", "execute", "scale")
    ]
    for key, card in CARDS.items():
        assert card.job is not None, key
        assert card.job.path is card.path
        assert card.pallas is not None and card.pallas.job.path is card.path, key
        assert card.pallas.job.params["kernel"] == "pallas"
        assert "kernel" not in card.job.params  # the first example is XLA's own kernels
    tpu_scale = CARDS["jax-tpu.scale"].job
    assert tpu_scale is not None
    assert (tpu_scale.workload, tpu_scale.target) == ("sharded-matmul", "v6e:2x4")
    assert tpu_scale.params["mesh"] == "2x4" and tpu_scale.params["a_spec"] == "data,model"


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_cards_claims_hold_in_the_real_compiler_output(name: str) -> None:
    run = compiled(name)
    job, _ = example(name)
    assert run.target is not None and run.target.id == job.target
    # Compiled without the hardware unless this machine has the target's chips.
    assert run.target.deviceless is (real_devices(parse_target(job.target)) is None)
    assert [s for s in run.job.stages] == [StageId.COMPILE]
    texts = {name: getattr(run.artifacts, name) for name in ARTIFACT_NAMES}
    checks = check_claims(job, texts)
    failed = [c.says for c in checks if not c.holds]
    assert not failed, f"{name}: claims the real output does not bear out: {failed}"
    assert (run.params.get("kernel") == "pallas") == name.endswith("/pallas")


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_cards_code_uses_the_jobs_shapes(name: str) -> None:
    """The example's arrays are the job's: each input shape and dtype appears in the code."""
    run = compiled(name)
    code = example(name)[1].replace(" ", "")
    for info in run.inputs:
        shape = ",".join(map(str, info.shape))
        # The code writes the global shapes, e.g. (4096,8192) or (1,1,512,128).
        assert f"({shape})" in code, f"{name}: no array of shape ({shape}) in the example"
        short = {"float32": "float32", "bfloat16": "bfloat16"}[info.dtype]
        assert short in code, f"{name}: the example never says {short}"


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
