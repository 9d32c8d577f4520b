"""Small Pygments lexers for the IR Pygments lacks: HLO, StableHLO/MLIR (and the Pallas
kernels' own MLIR: Mosaic TPU, Triton, Mosaic GPU), SASS, TPU bundles and jaxpr.

Each marks what a reader scans for (opcodes, names, shapes and types, attributes,
collectives) and leaves the rest as plain text, so one line costs a handful of tokens.
PTX uses Pygments' own lexer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pygments.lexer import Lexer, RegexLexer
from pygments.lexers.ptx import PtxLexer
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Punctuation,
    String,
    Text,
    Whitespace,
)

from workers.protocol.hlo import SOURCE_TABLES

COLLECTIVE_WORDS = (
    r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|"
    r"ragged-all-to-all|all_reduce|all_gather|reduce_scatter|all_to_all|collective_permute|"
    r"psum|pmax|pmin|ppermute|psum_scatter"
)
"""Communication op names in HLO (dashes), StableHLO (underscores) and jaxpr."""

_SHAPE = r"(?:pred|token|bf16|f8e\w+|[sufc]\d+)\[[\d,]*\](?:\{[^{}]*\})?"
"""An HLO array shape with its optional layout, e.g. f32[2,64]{1,0} or {1,0:T(8,128)}."""


class HloLexer(RegexLexer):
    """XLA's HLO text, as `Compiled.as_text()` and the pass dumps print it."""

    name = "HLO"
    aliases: ClassVar[list[str]] = ["hlo"]
    filenames: ClassVar[list[str]] = ["*.hlo"]

    tokens: ClassVar[dict[str, Any]] = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"/\*.*?\*/", Comment.Multiline),
            (r"\b(HloModule|ENTRY|ROOT)\b", Keyword),
            (rf"^({'|'.join(SOURCE_TABLES)})\b", Keyword.Namespace),
            (r'"(?:[^"\\]|\\.)*"', String),
            (r"%[\w.\-]+", Name.Variable),
            (_SHAPE, Keyword.Type),
            (rf"\b({COLLECTIVE_WORDS})(-start|-done)?(?=\()", Name.Builtin),
            (r"\b[a-z][a-z0-9\-]*(?=\()", Name.Function),
            (r"\b[a-z_][a-z0-9_]*(?==)", Name.Attribute),
            (r"-?\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", Number),
            (r"[{}()\[\],:]", Punctuation),
            (r"[^\s%\"{}()\[\],:=/]+", Text),
            (r".", Text),
        ]
    }


class MlirLexer(RegexLexer):
    """MLIR text in the StableHLO, MHLO, func and Shardy dialects, with `loc(...)` notes."""

    name = "MLIR"
    aliases: ClassVar[list[str]] = ["mlir", "stablehlo"]
    filenames: ClassVar[list[str]] = ["*.mlir"]

    tokens: ClassVar[dict[str, Any]] = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"#loc\d*", Comment.Preproc),
            (r"\bloc\(", Comment.Preproc, "loc"),
            (r'"(?:[^"\\]|\\.)*"', String),
            (r"%[\w.#\-]+", Name.Variable),
            (r"@[\w.$\-]+", Name.Function),
            (rf"\b(?:stablehlo|mhlo|chlo)\.({COLLECTIVE_WORDS})\b", Name.Builtin),
            (
                r"\b(?:stablehlo|mhlo|func|sdy|chlo|tt|ttg|ttng|arith|math|tensor|tpu|vector|"
                r"memref|scf|cf|gpu|nvvm|llvm|mosaic_gpu)\.[\w.]+",
                Name.Function,
            ),
            (r"\b(?:tensor|vector|memref|complex)<[^<>]*(?:<[^<>]*>[^<>]*)*>", Keyword.Type),
            (r"\b(?:[fiu]\d+|bf16|index|none)\b", Keyword.Type),
            (r"\b(module|attributes|return|dense|applies|across|dimensions|init)\b", Keyword),
            (r"\b[a-z_][\w.]*(?=\s*=)", Name.Attribute),
            (r"-?\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b|0x[0-9A-Fa-f]+", Number),
            (r"[{}()\[\],:<>]", Punctuation),
            (r"[^\s%@\"{}()\[\],:<>=/#]+", Text),
            (r".", Text),
        ],
        "loc": [
            (r"\(", Comment.Preproc, "#push"),
            (r"\)", Comment.Preproc, "#pop"),
            (r'"(?:[^"\\]|\\.)*"', Comment.Preproc),
            (r"[^()\"]+", Comment.Preproc),
        ],
    }


class SassLexer(RegexLexer):
    """NVIDIA SASS as `cuobjdump -sass` and `nvdisasm` print it."""

    name = "SASS"
    aliases: ClassVar[list[str]] = ["sass"]
    filenames: ClassVar[list[str]] = ["*.sass"]

    tokens: ClassVar[dict[str, Any]] = {
        "root": [
            (r"\s+", Whitespace),
            (r"/\*.*?\*/", Comment.Multiline),
            (r"//.*?$", Comment.Single),
            (r"^\s*(Function|code for|\.headerflags|\.section|\.text)\b.*?$", Comment.Special),
            (r"@!?U?P[0-7T]\b", Keyword.Pseudo),
            (r"\b(?:U?R\d+|RZ|URZ|U?P[0-7]|U?PT|SR_[A-Z_.0-9]+)\b(?:\.[A-Z0-9_]+)*", Name.Variable),
            (r"\bc\[0x[0-9a-f]+\]\[0x[0-9a-f]+\]", Name.Constant),
            (r"\.?L_x_\d+|`\([^)]*\)", Name.Label),
            (r"\b[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\b", Name.Function),
            (r"-?0x[0-9a-fA-F]+|-?\b\d+(?:\.\d+)?\b", Number),
            (r"[\[\],;{}|\-+~!]", Punctuation),
            (r"[^\s/\[\],;{}|@]+", Text),
            (r".", Text),
        ]
    }


class BundlesLexer(RegexLexer):
    """libtpu's final VLIW bundles (its LLO text dump): `;;` separates the instructions one
    bundle issues together; matrix-unit instructions (`vmatpush…mxu0`) stand out."""

    name = "TPU bundles"
    aliases: ClassVar[list[str]] = ["bundles"]

    tokens: ClassVar[dict[str, Any]] = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"/\*.*?\*/", Comment.Multiline),
            (r";;", Punctuation),
            (r"\bv[a-z0-9]*(?:\.[a-z0-9]+)*\.mxu\d\b", Name.Builtin),
            (r"\bvmat\w*(?:\.\w+)*", Name.Builtin),
            (r"(?<=[={;] )[a-z_][a-z0-9_]*(?:\.\w+)*", Name.Function),
            (r"\[(?:vmem|hbm|smem|sflag|cmem)[^\]]*\]", Name.Constant),
            (r"%[\w.]+|\b[vs]\d+\b|\bvm\d+\b", Name.Variable),
            (r"\b0x[0-9a-fA-F]+\b|-?\b\d+\b", Number),
            (r"[=,:()\[\]{}]", Punctuation),
            (r"[^\s;/=,:()\[\]{}%]+", Text),
            (r".", Text),
        ]
    }


class JaxprLexer(RegexLexer):
    """A jaxpr as `jaxpr.pretty_print()` prints it, with `# file:line` source notes."""

    name = "jaxpr"
    aliases: ClassVar[list[str]] = ["jaxpr"]

    tokens: ClassVar[dict[str, Any]] = {
        "root": [
            (r"\s+", Whitespace),
            (r"#.*?$", Comment.Single),
            (r"\b(lambda|let|in)\b", Keyword),
            (r"\b(?:bool|bf16|f8\w*|[fiu]\d+|c\d+)\[[\d,]*\]", Keyword.Type),
            (rf"(?<== )(?:{COLLECTIVE_WORDS})\b", Name.Builtin),
            (r"(?<== )[a-z_][a-z0-9_]*\b", Name.Function),
            (r"\b[a-z_][a-z0-9_]*(?==)", Name.Attribute),
            (r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", String),
            (r"-?\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b|-?inf\b", Number),
            (r"[{}()\[\],:;.]", Punctuation),
            (r"[^\s#{}()\[\],:;.=']+", Text),
            (r".", Text),
        ]
    }


LEXERS: dict[str, type[Lexer]] = {
    "hlo": HloLexer,
    "stablehlo": MlirLexer,
    "mosaic": MlirLexer,
    "triton": MlirLexer,
    "mosaic_gpu": MlirLexer,
    "bundles": BundlesLexer,
    "jaxpr": JaxprLexer,
    "sass": SassLexer,
    "ptx": PtxLexer,
}
"""The lexer for each artifact name."""


def lexer_for(artifact: str) -> Lexer:
    """A fresh lexer for `artifact` (one of the run's IR names); HLO for anything else."""
    return LEXERS.get(artifact, HloLexer)(stripnl=False, ensurenl=False)
