"""Generated inputs under per-argument rules (`params.input_rules`), and references as a
sample of (index, value) pairs: what is drawn, and every refusal, named by its path."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from workers.export.rules import (
    ArgumentSpec,
    InputRuleError,
    InputsError,
    generate,
    given_arguments,
    resolve_rules,
)
from workers.export.samples import Member, ReferenceError, expected, plan, write_sample

SPECS = [
    ArgumentSpec("opt_state/0/count", (), "int32"),
    ArgumentSpec("opt_state/0/mu/w", (64, 32), "float32"),
    ArgumentSpec("opt_state/0/nu/w", (64, 32), "float32"),
    ArgumentSpec("params/ln_f/scale", (32,), "float32"),
    ArgumentSpec("params/w", (64, 32), "float32"),
    ArgumentSpec("tokens", (8, 16), "int32"),
]
RULES = {
    "params/*": {"kind": "normal", "scale": 0.05},
    "tokens": {"kind": "int", "low": 0, "high": 64},
    "opt_state/*": {"kind": "zeros"},
    "opt_state/0/nu/*": {"kind": "positive"},
}


def by_name(arrays: list[Any]) -> dict[str, Any]:
    return {s.name: a for s, a in zip(SPECS, arrays, strict=True)}


def test_the_longest_matching_path_wins() -> None:
    values = by_name(generate(SPECS, RULES, seed=3))
    tokens = values["tokens"]
    assert tokens.dtype == np.int32 and tokens.min() >= 0 and tokens.max() < 64
    assert (values["opt_state/0/mu/w"] == 0).all()  # opt_state/*
    assert (values["opt_state/0/nu/w"] > 0).all()  # the longer prefix wins
    assert values["opt_state/0/count"] == 0
    assert 0.03 < values["params/w"].std() < 0.07
    exact = by_name(generate(SPECS, {**RULES, "params/w": {"kind": "ones"}}, seed=3))
    assert (exact["params/w"] == 1).all()  # an exact path beats a prefix


def test_draws_are_seeded_and_unruled_arguments_keep_the_default() -> None:
    a, b, c = (generate(SPECS, RULES, seed=s) for s in (1, 1, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[-1], c[-1])
    plain = by_name(generate(SPECS, {"tokens": {"kind": "zeros"}}, seed=0))
    assert 0.018 < plain["params/w"].std() < 0.022  # N(0, 0.02²), as weights start out
    assert abs(plain["params/w"].mean()) < 0.002
    counts = generate([ArgumentSpec("n", (1000,), "int32")], None, 0)[0]
    assert counts.min() == -8 and counts.max() == 7
    # The default draw is float32 standard normals times 0.02 from one PCG64 stream,
    # rounded to the dtype: the numbers export-fn's reference was computed on.
    rng = np.random.default_rng(7)
    want = (rng.standard_normal((3, 4), dtype=np.float32) * np.float32(0.02)).astype(np.float16)
    assert np.array_equal(generate([ArgumentSpec("x", (3, 4), "float16")], {}, 7)[0], want)
    (z,) = generate([ArgumentSpec("z", (2000,), "complex64")], None, 0)
    assert z.dtype == np.complex64 and 0.018 < z.real.std() < 0.022 and 0.018 < z.imag.std() < 0.022
    # A rule still reaches the old standard normal: normal without a scale.
    wide = by_name(generate(SPECS, {"params/w": {"kind": "normal"}}, seed=0))
    assert 0.9 < wide["params/w"].std() < 1.1


def test_given_arguments_are_used_as_they_are_and_the_rest_drawn() -> None:
    tokens = np.arange(128, dtype=np.int32).reshape(8, 16)
    given = {"tokens": tokens}
    values = by_name(generate(SPECS, RULES | {"tokens": {"kind": "int", "low": 0, "high": 2}}, 3))
    assert values["tokens"].max() == 1  # drawn: the rule applies
    rules = {k: v for k, v in RULES.items() if k != "tokens"}
    mixed = by_name(generate(SPECS, rules, 3, given))
    assert mixed["tokens"] is tokens  # given: as it is, drawn nothing
    assert (mixed["opt_state/0/nu/w"] > 0).all() and 0.03 < mixed["params/w"].std() < 0.07
    # The same seed, rules and given values give the same inputs on both sides.
    again = by_name(generate(SPECS, rules, 3, given))
    assert all(np.array_equal(mixed[n], again[n]) for n in mixed)
    # A rule naming only given arguments is refused; a prefix that also draws one is not.
    with pytest.raises(InputRuleError) as caught:
        generate(SPECS, RULES, 3, given)
    assert caught.value.field == "params.input_rules.tokens"
    assert "names only arguments whose values are given (tokens)" in str(caught.value)
    everything = {s.name: np.zeros(s.shape, s.dtype) for s in SPECS}
    with pytest.raises(InputRuleError, match="params/ln_f/scale, params/w"):
        generate(SPECS, {"params/*": {"kind": "ones"}}, 0, everything)
    drawn = {n: v for n, v in everything.items() if n != "params/w"}
    assert (
        by_name(generate(SPECS, {"params/*": {"kind": "ones"}}, 0, drawn))["params/w"] == 1
    ).all()


def test_an_inputs_archive_names_arguments_by_path_or_position() -> None:
    assert given_arguments(SPECS, ["tokens", "arg0"]) == {
        "tokens": "tokens",
        "opt_state/0/count": "arg0",
    }
    with pytest.raises(InputsError) as caught:
        given_arguments(SPECS, ["token"])
    assert caught.value.field == "params.inputs"
    assert "token names no argument (did you mean: tokens" in str(caught.value)
    with pytest.raises(InputsError, match="tokens and arg5 both give tokens"):
        given_arguments(SPECS, ["tokens", "arg5"])


@pytest.mark.parametrize(
    ("rules", "field", "words"),
    [
        ({"tokens": {"kind": "gaussian"}}, "tokens", ["unknown kind 'gaussian'"]),
        ({"tokenz": {"kind": "zeros"}}, "tokenz", ["matches no argument", "tokens"]),
        ({"params/decoder/*": {"kind": "zeros"}}, "params/decoder/*", ["prefix matches no"]),
        (
            {"params/ln_f/scale": {"kind": "int", "low": 0, "high": 3}},
            "params/ln_f/scale",
            ["int on params/ln_f/scale, which is float32[32]"],
        ),
        (
            {"tokens": {"kind": "normal", "scale": 1.0}},
            "tokens",
            ["normal on tokens, which is int32[8,16]", '"kind": "int"'],
        ),
        (
            {"opt_state/*": {"kind": "uniform", "low": 0, "high": 1}},
            "opt_state/*",
            ["uniform on opt_state/0/count, which is int32[]"],
        ),
        (
            {"tokens": {"kind": "int", "low": 5, "high": 5}},
            "tokens",
            ["low 5 must be below high 5"],
        ),
        ({"tokens": {"kind": "int", "low": 0, "high": 2**40}}, "tokens", ["does not fit"]),
        ({"tokens": {"kind": "int", "low": 0}}, "tokens", ["int needs 'high'"]),
        ({"tokens": {"kind": "zeros", "scale": 2}}, "tokens", ["zeros takes no 'scale'"]),
    ],
)
def test_each_refusal_names_the_rule_and_the_argument(
    rules: dict[str, Any], field: str, words: list[str]
) -> None:
    with pytest.raises(InputRuleError) as caught:
        resolve_rules(rules, SPECS)
    assert caught.value.field == f"params.input_rules.{field}"
    for word in words:
        assert word in str(caught.value)


# --- sampled references -------------------------------------------------------------------

RESULTS = [ArgumentSpec("out0", (), "float32"), ArgumentSpec("out1/w", (64, 32), "float32")]


def archive(**arrays: Any) -> dict[str, Any]:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with np.load(io.BytesIO(buffer.getvalue())) as loaded:
        return {name: loaded[name] for name in loaded.files}


def test_a_sample_names_results_by_position_or_path_and_reads_back() -> None:
    rng = np.random.default_rng(0)
    results = [np.float32(2.5), rng.standard_normal((64, 32), dtype=np.float32)]
    data = write_sample(results, k=100, seed=1)
    assert len(data) < results[1].nbytes  # a sample, not the whole result
    with np.load(io.BytesIO(data)) as loaded:
        found = expected({n: loaded[n] for n in loaded.files}, RESULTS)
    indices, values = found[1]
    assert indices is not None and len(indices) == 100 and indices.dtype == np.int64
    assert np.array_equal(results[1].reshape(-1)[indices], values)
    assert found[0][0] is not None and len(found[0][0]) == 1  # one element: all of it
    by_path = expected({"out1/w": results[1]}, RESULTS)  # a whole result, by its path
    assert by_path[1][0] is None and 0 not in by_path


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        (
            {"out1.indices": np.array([0, 2048]), "out1.values": np.zeros(2, np.float32)},
            [
                "out1/w: index 2048 is out of range for a result of 2,048 elements",
            ],
        ),
        (
            {"out1.indices": np.array([0, 1, 2]), "out1.values": np.zeros(2, np.float32)},
            [
                "out1/w: 3 indices but 2 values: one value per index",
            ],
        ),
        (
            {"out0.indices": np.array([0], np.int32), "out0.values": np.zeros(1, np.float32)},
            [
                "out0: indices must be int64",
            ],
        ),
        ({"out1.indices": np.array([0])}, ["out1/w: out1.values is missing"]),
        (
            {"out1.indices": np.array([0]), "out1.values": np.zeros(1)},
            [
                "values are float64, the result float32[64,32]",
            ],
        ),
        ({"out7": np.zeros(3)}, ["out7: names no result"]),
        ({"out1/w": np.zeros((2, 2), np.float32)}, ["the reference is [2, 2], the result"]),
    ],
)
def test_each_bad_reference_is_refused_naming_the_result(
    arrays: dict[str, Any], words: list[str]
) -> None:
    members = archive(**arrays)
    with pytest.raises(ReferenceError) as caught:
        expected(members, RESULTS)
    for word in words:
        assert word in str(caught.value)
    # The server's check, from the members' headers alone, agrees on all but the ranges.
    shown = [Member(n, str(a.dtype), tuple(a.shape)) for n, a in members.items()]
    if "out of range" not in words[0]:
        with pytest.raises(ReferenceError):
            plan(shown, RESULTS)
