"""The GPU fusion pass's decisions, from `priority_fusion_dump.txt` (protobuf text).

Each `fusion_steps { ... }` block is one of: `fusion` (a producer fused into a consumer,
naming the fusion made), `producer_ineligible` (a producer refused, with the reason), or
`update_priority` (the cost model's estimate for fusing a producer into its consumers:
`us_fused` against `us_unfused`). The estimates are the compiler's model, never times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BLOCK = re.compile(r"^fusion_steps \{\n\s*(\w+) \{\n(.*?)\n\s*\}\n\}", re.M | re.S)
_FIELD = re.compile(r'^\s*(\w+):\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))\s*$', re.M)


@dataclass
class FusionDecision:
    """One step of the GPU priority fusion pass."""

    step: int
    kind: str  # fused | refused | estimate
    producer: str
    consumers: list[str] = field(default_factory=list)
    fusion: str | None = None
    reason: str | None = None
    fused_us: float | None = None
    unfused_us: float | None = None
    outcome: str | None = None
    """An estimate's outcome: "fused" when a later step fused that producer into that
    consumer, else "not fused"."""


def fusion_decisions(text: str) -> list[FusionDecision]:
    """Every decision in `text`, in the pass's order."""
    out: list[FusionDecision] = []
    for i, m in enumerate(_BLOCK.finditer(text), start=1):
        kind, body = m.group(1), m.group(2)
        values: dict[str, list[str]] = {}
        for name, quoted, bare in _FIELD.findall(body):
            values.setdefault(name, []).append(quoted if quoted or not bare else bare)

        def one(name: str, values: dict[str, list[str]] = values) -> str | None:
            found = values.get(name)
            return found[0] if found else None

        def number(name: str) -> float | None:
            raw = one(name)
            try:
                return float(raw) if raw is not None else None
            except ValueError:
                return None

        producer = one("producer_name") or "?"
        if kind == "fusion":
            consumer = one("consumer_name")
            out.append(
                FusionDecision(
                    i, "fused", producer, [consumer] if consumer else [], fusion=one("fusion_name")
                )
            )
        elif kind == "producer_ineligible":
            out.append(FusionDecision(i, "refused", producer, reason=one("reason")))
        elif kind == "update_priority":
            out.append(
                FusionDecision(
                    i,
                    "estimate",
                    producer,
                    values.get("consumer_names", []),
                    fused_us=number("us_fused"),
                    unfused_us=number("us_unfused"),
                )
            )
    _outcomes(out)
    return out


def _outcomes(decisions: list[FusionDecision]) -> None:
    """Say of each estimate whether the pass went on to fuse that producer."""
    for i, d in enumerate(decisions):
        if d.kind != "estimate":
            continue
        fused = any(
            later.kind == "fused"
            and later.producer == d.producer
            and (not d.consumers or set(later.consumers) <= set(d.consumers))
            for later in decisions[i + 1 :]
        )
        d.outcome = "fused" if fused else "not fused"
