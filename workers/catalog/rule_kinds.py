"""The five kinds of rule a run's field can have, and the one mechanism that applies each.

Every row of the rules' table (`workers.catalog.result_rules.RULES`) names its kind and the
enforcer that carries it out; these mechanisms walk the table and apply each enforcer where
its rule governs (`workers.catalog.rule_walk`):

- **checked** (`Check`): the field must be the leased job's or the registered worker's;
  `checked_problems` runs every check and refuses the whole result naming each field (422,
  or 409 for what the registered worker contradicts).
- **server** (`Server`): the server's own; `server_fields` drops what a worker sent there
  (or, when a stored run is read again, keeps what the server had put there).
- **bounded** (`Bound`): only the worker can know it; kept when within its bounds, withheld
  (None: "not reported") otherwise, or brought within them where the field cannot be missing.
- **recomputed** (`Recompute`): worked out again from what the server trusts (the job, the
  catalog, the samples); what the worker sent is not read. Those that depend on the run's
  validity (statistics, rates) are worked out by the gate itself once it is known.
- **text** (`Text`): words or compiler output: capped, and a sentence that states a rate
  dropped; other values under a text rule (ids, shapes, flags) are kept as they are, never
  read as a figure.

`enforce` applies the bounded, recomputed and text rules in that order (a recomputed
figure reads bounded ones; text is last so that every word is capped). Pydantic and the
catalog only, no jax.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from workers.catalog.base import WorkloadParams
from workers.catalog.rule_walk import (
    Place,
    covers,
    field_paths,
    holders,
    leaf_types,
    places,
    scope_places,
    split,
)
from workers.protocol import JobSpec, RunResult


class Rule(Protocol):
    """A row of the rules' table (`workers.catalog.result_rules.Rule`), as the mechanisms
    read it."""

    @property
    def pattern(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def by(self) -> object: ...


Problems = list[tuple[str, str]]


@dataclass
class Facts:
    """What the rules read besides the field itself: the run as it stands while it is
    ruled on, its job (its target's defaults applied), the job's parameters as the catalog
    parses them, an upload's result dtypes (from its header) and, for a run on a real chip,
    the target that chip is (from the device kind the worker registered)."""

    run: RunResult
    job: JobSpec
    params: WorkloadParams | None
    result_dtypes: dict[str, str] | None = None
    own_target: str | None = None
    spans: list[float] | None = None
    """The device-time samples, once read (`workers.catalog.rule_bounds`)."""


Rule_fn = Callable[[Any, Any, Facts], Any]
"""(the value, the model that holds it, the facts) → the value to publish."""


@dataclass(frozen=True)
class Bound:
    """A bounded field's bound: `fn` keeps the value, withholds it (None) or brings it
    within bounds. With `scope`, it judges the object at that path whole (a memory report
    whose figures disagree is withheld together), once, instead of each field."""

    fn: Rule_fn
    scope: str | None = None


@dataclass(frozen=True)
class Recompute:
    """A recomputed field's source: `fn` works out the object at `scope` (or, without one,
    the field itself) from the facts. `later` names who works it out instead, once what it
    needs is known: the gate (statistics and rates, from the samples of a valid run), or
    the server from the text it stores (the HLO summary)."""

    fn: Rule_fn | None = None
    scope: str | None = None
    later: str | None = None


@dataclass(frozen=True)
class Text:
    """A text field's caps: `limit` characters (None: the server's own cap where the text
    is stored, an artifact's or a pass dump's), `items` of a list, and whether a sentence
    that states a rate is dropped (`no_rate`)."""

    limit: int | None = 2_000
    items: int | None = None
    no_rate: bool = False
    only_words: bool = False
    """Anything but words is dropped (an `extra` entry, which may hold anything)."""


@dataclass(frozen=True)
class Check:
    """A checked field's check: `fn` gives (field, message) for each way the posted run is
    not the leased job (or the registered worker), answered with `status`."""

    fn: Callable[[RunResult, Any], Problems]
    status: int = 422


@dataclass(frozen=True)
class Server:
    """A server field, and the object (`scope`) a worker may send nothing under."""

    scope: str


RATE_IN_WORDS = re.compile(r"\d\s*[kKMGTPE]?(?:i?B|FLOP|FLOPS|ops|calls)\s*/\s*s\b|FLOP/s|GB/s")
"""A rate written into a sentence: rates are the server's own, so such a sentence is
dropped (counts and times live in structured fields, never in words)."""


def words(text: str | None, limit: int = 2_000) -> str | None:
    """A worker's sentence, capped, or None when it states a rate."""
    if text is None or RATE_IN_WORDS.search(text):
        return None
    return text[:limit]


def _text(value: Any, spec: Text) -> Any:
    """`value` by its text rule: a string capped (None when it states a rate and the rule
    drops those), a list's strings each so (the dropped ones left out, at most `items`),
    anything else as it is."""
    if spec.only_words and not isinstance(value, str):
        return None
    if isinstance(value, str):
        if spec.no_rate and RATE_IN_WORDS.search(value):
            return None
        return value[: spec.limit] if spec.limit is not None else value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        kept = [_text(v, spec) for v in value[: spec.items]]
        return [v for v in kept if v is not None]
    return value


# --- the mechanisms ------------------------------------------------------------------------


def governed(rules: Iterable[Rule]) -> dict[str, Rule]:
    """Each leaf path of a run result with its rule (the longest pattern that matches)."""
    found: dict[str, Rule] = {}
    for path in field_paths():
        matching = [r for r in rules if covers(r.pattern, path)]
        if matching:
            found[path] = max(matching, key=lambda r: len(r.pattern))
    return found


def _by_identity(build: Callable[[tuple[Rule, ...]], Any]) -> Callable[[tuple[Rule, ...]], Any]:
    """`build` worked out once per table (the table is a constant: hashing its rows at
    every call would cost more than the rules)."""
    made: dict[int, Any] = {}

    def once(rules: tuple[Rule, ...]) -> Any:
        if id(rules) not in made:
            made[id(rules)] = (rules, build(rules))  # the table kept alive with its id
        return made[id(rules)][1]

    return once


@_by_identity
def _leaves(rules: tuple[Rule, ...]) -> dict[int, list[str]]:
    """The leaf paths each rule of `rules` governs, by the rule's id; a text rule's only
    where it can change something (words, not ids or shapes; not at all where it caps
    nothing of its own)."""
    types = leaf_types()
    index: dict[int, list[str]] = {}
    for path, rule in governed(rules).items():
        if isinstance(rule.by, Text) and not _may_change(rule.by, types.get(path, Any)):
            continue
        index.setdefault(id(rule), []).append(path)
    return index


@_by_identity
def _groups(rules: tuple[Rule, ...]) -> dict[int, list[tuple[str, list[str]]]]:
    """A rule's leaves grouped by the path of the models that hold them (walked once)."""
    grouped: dict[int, list[tuple[str, list[str]]]] = {}
    for rule_id, paths in _leaves(rules).items():
        by_holder: dict[str, list[str]] = {}
        for path in paths:
            holder, name = split(path)
            by_holder.setdefault(holder, []).append(name)
        grouped[rule_id] = list(by_holder.items())
    return grouped


@_by_identity
def untouched(rules: tuple[Rule, ...]) -> frozenset[str]:
    """The run's top-level fields no rule of `rules` puts a value inside of (each is set
    whole, or not at all): a copy of the run for the rules may share them."""
    leaves = _leaves(rules)
    paths = [scope for r in rules if (scope := scope_of(r.by)) is not None]
    for r in rules:
        if r.kind in ORDER and scope_of(r.by) is None:
            paths += [] if getattr(r.by, "later", None) else leaves.get(id(r), [])
    inside = {p.split(".")[0].removesuffix("[]").removesuffix("{}") for p in paths if "." in p}
    inside |= {p.removesuffix("[]") for p in paths if p.endswith("[]")}
    return frozenset(name for name in RunResult.model_fields if name not in inside)


def _may_change(spec: Text, annotation: object) -> bool:
    if spec == Text(limit=None):
        return False
    return spec.only_words or "str" in str(annotation) or annotation is Any


def scope_of(by: object) -> str | None:
    """The path an enforcer applies at whole, or None (each field it governs)."""
    scope = getattr(by, "scope", None)
    return scope if isinstance(scope, str) else None


def _apply(by: Any, place: Place, facts: Facts) -> None:
    old = place.get()
    new = _text(old, by) if isinstance(by, Text) else by.fn(old, place.owner, facts)
    if new is not old:
        place.put(new)


def _targets(rule: Rule, groups: dict[int, list[tuple[str, list[str]]]], run: Any) -> list[Place]:
    scope = scope_of(rule.by)
    if scope is not None:
        return list(scope_places(run, scope))
    return [
        Place(owner, name)
        for holder, names in groups.get(id(rule), [])
        for owner in holders(run, holder)
        for name in names
        if not isinstance(owner, dict) or name in owner  # an `extra` entry, where sent
    ]


ORDER = ("bounded", "recomputed", "text")


def enforce(run: RunResult, facts: Facts, rules: tuple[Rule, ...]) -> None:
    """Apply every bounded, recomputed and text rule of `rules` to `run` (a copy the caller
    owns), kind by kind in `ORDER`; an enforcer with a scope once, however many rules
    name it."""
    groups = _groups(rules)
    done: set[int] = set()
    for kind in ORDER:
        for rule in rules:
            by = rule.by
            if rule.kind != kind or getattr(by, "later", None) is not None:
                continue
            if scope_of(by) is not None:
                if id(by) in done:
                    continue
                done.add(id(by))
            for place in _targets(rule, groups, run):
                _apply(by, place, facts)


def server_fields(run: RunResult, rules: Iterable[Rule], kept: RunResult | None = None) -> None:
    """Every server field of `run` emptied (a posted result: a worker sends nothing there),
    or, with `kept` (the same run as stored), put back as the server had stored it wherever
    `run` still has the place for it."""
    for rule in rules:
        if not isinstance(rule.by, Server):
            continue
        found = list(places(run, rule.by.scope))
        stored = list(places(kept, rule.by.scope)) if kept is not None else []
        for i, place in enumerate(found):
            place.put(stored[i].get() if i < len(stored) else None)


def checked_problems(run: RunResult, lease: Any, rules: Iterable[Rule]) -> dict[int, Problems]:
    """Each way `run` is not what `lease` allows, by the status it is answered with (422,
    409), every check of `rules` run once."""
    found: dict[int, Problems] = {}
    done: set[int] = set()
    for rule in rules:
        by = rule.by
        if not isinstance(by, Check) or id(by) in done:
            continue
        done.add(id(by))
        problems = by.fn(run, lease)
        if problems:
            found.setdefault(by.status, []).extend(problems)
    return found
