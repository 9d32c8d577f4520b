"""`/compiler-options`: what a job may ask of XLA, per compiler, and worked examples of
what one option changes in the optimized HLO.

Every example's finding is real compiler output: `tests/workers/test_compiler_options.py`
compiles each one with and without its option, for its target and without the hardware,
and checks the HLO says what the page says (`plain_has`, `option_has`, `option_lacks`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlencode

from workers.protocol.compiler_options import (
    MAX_OPTIONS,
    PATH_COMPILER,
    OptionValue,
    allowed_table,
    as_arguments,
    as_lines,
)
from workers.protocol.option_lists import Compiler

MATMUL_1024 = {"m": 1024, "n": 1024, "k": 1024, "dtype": "bfloat16"}
GATHERED = {
    "m": 2048,
    "n": 2048,
    "k": 2048,
    "dtype": "bfloat16",
    "mesh": "8",
    "axes": "x",
    "sharding": "custom",
    "a_spec": "x,-",
    "b_spec": "-,x",
    "out_spec": "-,x",
}


@dataclass(frozen=True)
class Example:
    """One option on one program for one target, and what it did to the optimized HLO."""

    id: str
    title: str
    compiler: Compiler
    workload: str
    path: str
    target: str
    params: dict[str, Any]
    options: dict[str, OptionValue]
    finding: str
    plain: str
    """An excerpt of the optimized HLO without the option."""
    with_option: str
    """The same place with the option."""
    plain_has: tuple[str, ...] = ()
    option_has: tuple[str, ...] = ()
    option_lacks: tuple[str, ...] = ()
    same_hlo: bool = False
    """The option leaves this program's optimized HLO as it was (said plainly)."""
    links: dict[str, str] = field(default_factory=dict)

    def job(self) -> dict[str, Any]:
        """The example's job, as the API takes it."""
        return {
            "workload": self.workload,
            "path": self.path,
            "target": self.target,
            "params": self.params,
            "compiler_options": self.options,
        }

    def command(self) -> str:
        """The `boundary run` line that compiles the example with its option."""
        words = [f"{k}={v}" for k, v in self.params.items()]
        words += ["--path", self.path, "--target", self.target, *as_arguments(self.options)]
        return "boundary run " + " ".join([self.workload, *words])

    def form_link(self) -> str:
        """The run form, filled in with this example (compile only, with its option)."""
        query: list[tuple[str, str]] = [
            ("workload", self.workload),
            ("shown", self.workload),
            ("path", self.path),
            ("shown_path", self.path),
            ("target", self.target),
            ("shown_target", self.target),
            ("stages", "compile"),
            *((f"param.{k}", str(v)) for k, v in self.params.items()),
            ("compiler_options", as_lines(self.options)),
        ]
        return "/runs/new?" + urlencode(query)


EXAMPLES: tuple[Example, ...] = (
    Example(
        id="triton-gemm-off",
        title="Triton GEMM off on a B200",
        compiler=Compiler.XLA_GPU,
        workload="matmul",
        path="jax-gpu",
        target="b200:1",
        params=MATMUL_1024,
        options={"xla_gpu_enable_triton_gemm": False},
        finding="XLA:GPU hands the GEMM to cuBLASLt: the Triton GEMM fusion becomes a "
        "__cublas$lt$matmul custom call that returns its result with a 4 MiB workspace, and "
        "no GEMM kernel of XLA's own is generated (the compile is several times quicker).",
        plain="ROOT %gemm_fusion_dot_general.1 = bf16[1024,1024]{1,0} fusion(%a.1, %b.1), "
        'kind=kCustom, … "kind":"__triton_nested_gemm_fusion", … "output_tiles":[{"sizes":'
        '["16","16"]}], "num_warps":"2"',
        with_option="%custom-call.1 = (bf16[1024,1024]{1,0}, s8[4194304]{0}) custom-call(%a.1, "
        '%b.1), custom_call_target="__cublas$lt$matmul", …\n'
        "ROOT %get-tuple-element.1 = bf16[1024,1024]{1,0} get-tuple-element(%custom-call.1), "
        "index=0",
        plain_has=("__triton_nested_gemm_fusion",),
        option_has=(r"__cublas\$lt\$matmul",),
        option_lacks=("__triton_nested_gemm_fusion",),
    ),
    Example(
        id="autotune-level",
        title="The GEMM autotune level on a B200",
        compiler=Compiler.XLA_GPU,
        workload="matmul",
        path="jax-gpu",
        target="b200:1",
        params=MATMUL_1024,
        options={"xla_gpu_autotune_level": 0},
        finding="Nothing changes without a GPU: autotuning times candidate GEMM kernels on "
        "the device, so a compile without the hardware never autotunes, at any level from 0 "
        "to 4, and keeps XLA's default tiles (16×16, 2 warps). On a real B200 the level "
        "decides whether those candidates are tried; that needs a GPU worker.",
        plain='"output_tiles":[{"sizes":["16","16"]}], "num_warps":"2"',
        with_option='"output_tiles":[{"sizes":["16","16"]}], "num_warps":"2" (the same HLO)',
        plain_has=(r'"output_tiles":\[\{"sizes":\["16","16"\]\}\]',),
        option_has=(r'"output_tiles":\[\{"sizes":\["16","16"\]\}\]',),
        same_hlo=True,
    ),
    Example(
        id="exhaustive-tiling",
        title="A GEMM tiling option that does act without a GPU",
        compiler=Compiler.XLA_GPU,
        workload="matmul",
        path="jax-gpu",
        target="b200:1",
        params=MATMUL_1024,
        options={"xla_gpu_exhaustive_tiling_search": True},
        finding="Searching every tiling instead of a short list changes the tiles XLA picks "
        "from its cost model, with no device to time them: the GEMM's output tile goes "
        "from 16×16 to 16×8, and the dot's block from 128 to 16.",
        plain='"output_tiles":[{"sizes":["16","16"]}] … backend_config={"sizes":["128"]}',
        with_option='"output_tiles":[{"sizes":["16","8"]}] … backend_config={"sizes":["16"]}',
        plain_has=(r'"output_tiles":\[\{"sizes":\["16","16"\]\}\]',),
        option_has=(r'"output_tiles":\[\{"sizes":\["16","8"\]\}\]',),
    ),
    Example(
        id="collective-matmul",
        title="Collective matmul on a v6e:2x4 slice",
        compiler=Compiler.LIBTPU,
        workload="sharded-matmul",
        path="jax-tpu",
        target="v6e:2x4",
        params=GATHERED,
        options={"xla_tpu_all_gather_collective_matmul_mode": "POST_SPMD"},
        finding="A is split by rows over the 8 chips and C by columns, so each chip needs "
        "all of A. Plainly libtpu gathers A whole, then multiplies once. With the option "
        "it never gathers: a while loop passes A's slices round the ring with "
        "collective-permutes and multiplies the slice at hand while the next one travels.",
        plain="%all-gather.1 = bf16[2048,2048]{…} all-gather(…), … dimensions={0}\n"
        "ROOT %fusion = … fusion(%all-gather.1, …), kind=kOutput",
        with_option="%while.3 = (…) while(…), body=%wide.decomposed_all_gather_body…\n"
        "  %collective-permute-start… = … collective-permute-start(…), "
        "source_target_pairs={{0,1},{1,2},…,{7,0}}",
        plain_has=(r"all-gather\(",),
        option_has=(r"\bwhile\(", "collective-permute-start"),
        option_lacks=(r"all-gather\(",),
    ),
)
"""The worked examples, in the order the page shows them."""


def options_context() -> dict[str, Any]:
    """The page's context: the examples and every compiler's allowed options."""
    examples = []
    for example in EXAMPLES:
        entry = asdict(example)
        entry["compiler"] = example.compiler.value
        entry["command"] = example.command()
        entry["form_link"] = example.form_link()
        entry["job"] = example.job()
        examples.append(entry)
    compilers = [
        {
            "name": compiler.value,
            "anchor": compiler.value.lower().replace(":", "-"),
            "paths": [p for p, c in PATH_COMPILER.items() if c is compiler],
            "options": [
                {"name": name, "values": values, "meaning": meaning}
                for name, values, meaning in allowed_table(compiler)
            ],
        }
        for compiler in Compiler
    ]
    return {"examples": examples, "compilers": compilers, "max_options": MAX_OPTIONS}
