"""Every field a worker can post has one written rule, and the manual's table is the code's.

The walk goes through the result model itself (and the `extra` entries a run may carry),
so a field added to `RunResult` (or to any model under it) without a rule fails here
before it can reach a page.
"""

from __future__ import annotations

import re
from pathlib import Path

from workers.catalog.result_rules import RULES, rule_for
from workers.catalog.rule_kinds import Bound, Check, Recompute, Server, Text, scope_of
from workers.catalog.rule_walk import field_paths
from workers.protocol import RunResult

DOC = Path(__file__).resolve().parents[2] / "docs" / "design" / "result-rules.md"


def test_every_field_of_a_run_result_has_a_rule() -> None:
    paths = field_paths(RunResult)
    assert len(paths) > 250  # the walk reached the nested models
    missing = [p for p in paths if rule_for(p) is None]
    assert missing == []


def test_every_rule_covers_a_field() -> None:
    paths = field_paths(RunResult)
    unused = [r.pattern for r in RULES if not any(rule_for(p) is r for p in paths)]
    assert unused == []


def test_the_figures_of_a_run_are_never_kept_as_sent() -> None:
    """The fields the forged worker changed are each recomputed, checked or bounded."""
    for path in (
        "rates.flops",
        "rates.calls",
        "rates.subject",
        "correctness.tolerance",
        "sweep.policies[].steady_pass_s",
        "scaling.points[].correct",
        "group.members[].median_s",
        "measurements[].calls_per_sample",
        "environment.device_kind",
        "valid",
    ):
        rule = rule_for(path)
        assert rule is not None and rule.kind in ("recomputed", "checked"), path


def test_each_kind_has_its_one_mechanism() -> None:
    """Every row is carried out by its kind's enforcer, and each enforcer reaches a place:
    a scoped one an object the result model has."""
    mechanism = {
        "checked": Check,
        "server": Server,
        "bounded": Bound,
        "recomputed": Recompute,
        "text": Text,
    }
    wrong = [r.pattern for r in RULES if not isinstance(r.by, mechanism[r.kind])]
    assert wrong == []
    paths = field_paths(RunResult)
    scopes = {scope_of(r.by) for r in RULES} - {None}
    assert [s for s in scopes if not any(p.startswith(str(s)) for p in paths)] == []


def test_the_manuals_table_is_the_codes() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| (\w+) \| (.+) \|$", DOC.read_text(), re.MULTILINE)
    assert rows == [(r.pattern, r.kind, r.rule) for r in RULES]
