"""The compiler's own memory plan for one compiled program, read from XLA's dump.

`compile(compiler_options={"xla_dump_to": D})` writes, beside the optimized module, two
files this module reads (CPU, XLA:GPU and libtpu alike):

- `*after_optimizations-buffer-assignment.txt`: every allocation (`allocation N: size S,
  parameter K, shape |…| at ShapeIndex {}, maybe-live-out, preallocated-temp, color C, …`)
  followed by the values it holds (` value: <id name{index} @k> (size=…,offset=…): shape`);
- `*after_optimizations-live-range.txt`: the schedule (`InstructionSequence`, the program
  order of every instruction, nested computations flattened) and each value's live range
  in it (`BufferLiveRange`: `name{index}:first-last`, the last being the program's end
  for a value that lives out).

Pure text, no jax: the tests feed it dumps of real compiles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ASSIGNMENT_SUFFIX = "after_optimizations-buffer-assignment.txt"
LIVE_RANGE_SUFFIX = "after_optimizations-live-range.txt"

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(
    r"^ value: <\d+ (?P<instruction>[^\s{}]+)(?P<index>\{[\d,]*\})? @\d+> "
    r"\(size=(?P<size>\d+),offset=(?P<offset>\d+)\): (?P<shape>.*)$"
)
_PARAMETER = re.compile(r", parameter (\d+),")
_COLOR = re.compile(r", color (\d+)")
_RANGE = re.compile(r"^\s+(?P<name>[^\s{}]+)(?P<index>\{[\d,]*\})?:(?P<first>\d+)-(?P<last>\d+)$")
_SEQUENCE_ROW = re.compile(r"^\s+(\d+):(\S+)$")
_MAX = re.compile(r"^HloLiveRange \(max (\d+)\):")


@dataclass(frozen=True)
class AssignedValue:
    """One value of an allocation: where it sits in it and what it holds."""

    key: str
    """`instruction` or `instruction{index}` for a tuple's element: how both files name it."""
    instruction: str
    size: int
    offset: int
    shape: str
    """The shape with its layout, as the assignment prints it: `bf16[8,128]{1,0:T(8,128)(2,1)}`."""


@dataclass(frozen=True)
class Allocation:
    """One block the compiler reserves, as the assignment describes it."""

    index: int
    size: int
    color: int
    """The memory space: 0 the device's main memory; others on-chip (TPU VMEM 1, SMEM 2)
    or the host's."""
    parameter: int | None
    live_out: bool
    constant: bool
    thread_local: bool
    temporary: bool
    values: tuple[AssignedValue, ...]

    @property
    def kind(self) -> str:
        """parameter, output, constant, temporary or other: what the allocation is for. A
        parameter that is also live out (a donated argument) is a parameter, counted once."""
        if self.parameter is not None:
            return "parameter"
        if self.live_out:
            return "output"
        if self.constant:
            return "constant"
        return "temporary" if self.temporary else "other"


@dataclass(frozen=True)
class BufferDump:
    """The assignment and the schedule of one compiled module."""

    allocations: tuple[Allocation, ...]
    sequence: tuple[str, ...]
    """Every scheduled instruction, in program order: step i runs sequence[i]."""
    ranges: dict[str, tuple[int, int]]
    """Each value's first and last step (by `AssignedValue.key`), the last clipped to the
    program's final step."""


class DumpMissing(LookupError):
    """The dump has no buffer assignment to read (the compile wrote none, or another
    module's): the sentence says why."""


def _key(instruction: str, index: str | None) -> str:
    return instruction if not index or index == "{}" else instruction + index


def parse_assignment(text: str) -> tuple[Allocation, ...]:
    """The allocations of a `*-buffer-assignment.txt`, each with its values."""
    allocations: list[Allocation] = []
    head: re.Match[str] | None = None
    values: list[AssignedValue] = []

    def close() -> None:
        if head is None:
            return
        attrs = head[3]
        parameter = _PARAMETER.search(attrs + ",")
        color = _COLOR.search(attrs)
        allocations.append(
            Allocation(
                index=int(head[1]),
                size=int(head[2]),
                color=int(color[1]) if color else 0,
                parameter=int(parameter[1]) if parameter else None,
                live_out="maybe-live-out" in attrs,
                constant=", constant" in attrs,
                thread_local="thread-local" in attrs,
                temporary="preallocated-temp" in attrs,
                values=tuple(values),
            )
        )

    for line in text.splitlines():
        if line.startswith("allocation "):
            close()
            head, values = _ALLOCATION.match(line), []
        elif line.startswith(" value: ") and head is not None:
            m = _VALUE.match(line)
            if m is not None:
                name = m["instruction"]
                values.append(
                    AssignedValue(
                        _key(name, m["index"]), name, int(m["size"]), int(m["offset"]), m["shape"]
                    )
                )
        elif not line.startswith("  "):  # "  value: …" lists cross-colour reuse: skipped
            close()
            head = None
    close()
    return tuple(allocations)


def parse_live_range(text: str) -> tuple[tuple[str, ...], dict[str, tuple[int, int]]]:
    """The schedule and each value's live range from a `*-live-range.txt`."""
    sequence: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    section = ""
    end = 0
    for line in text.splitlines():
        stripped = line.strip()
        if (m := _MAX.match(line)) is not None:
            end = int(m[1])
        elif stripped in ("InstructionSequence:", "BufferLiveRange:"):
            section = stripped
        elif not line.startswith("    "):
            section = ""
        elif section == "InstructionSequence:" and (m := _SEQUENCE_ROW.match(line)):
            sequence.append(m[2])
        elif section == "BufferLiveRange:" and (m := _RANGE.match(line)):
            ranges[_key(m["name"], m["index"])] = (int(m["first"]), int(m["last"]))
    last = max(len(sequence), end, 1) - 1
    return tuple(sequence), {k: (min(a, last), min(b, last)) for k, (a, b) in ranges.items()}


def _pick(folder: Path, suffix: str, module: str | None) -> Path:
    found = sorted(folder.glob(f"*{suffix}"))
    if module is not None:
        named = [p for p in found if f".{module}." in p.name]
        found = named or found
    if not found:
        raise DumpMissing(f"the compile wrote no {suffix.split('-', 1)[-1]}")
    return max(found, key=lambda p: p.stat().st_size)  # the program, not a helper module


def read_dump(folder: Path, module: str | None = None) -> BufferDump:
    """The buffer assignment and schedule the compile of `module` (its HLO module name,
    e.g. jit_forward) wrote into `folder`; DumpMissing when it wrote none."""
    assignment = _pick(folder, ASSIGNMENT_SUFFIX, module)
    live = assignment.with_name(
        assignment.name.removesuffix("-buffer-assignment.txt") + "-live-range.txt"
    )
    if not live.exists():
        raise DumpMissing("the compile wrote its buffer assignment but no live ranges")
    sequence, ranges = parse_live_range(live.read_text(encoding="utf-8", errors="replace"))
    allocations = parse_assignment(assignment.read_text(encoding="utf-8", errors="replace"))
    if not sequence:
        raise DumpMissing("the compile's live ranges name no scheduled instruction")
    return BufferDump(allocations, sequence, ranges)
