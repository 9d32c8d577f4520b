"""Byte sizes as people and compilers write them: the one reader and the one writer.

- `parse_bytes` reads a whole number of bytes ("2147483648"), and, where the writer uses
  them, libtpu's binary multiples ("31.25G": K, M, G and T are 2^10 to 2^40 bytes, as in
  "exceeds available HBM (31.25G)" of a 32 GiB chip).
- `env_bytes` reads a setting that holds bytes (BOUNDARY_MAX_JOB_BYTES and the like): a
  positive whole number, or a ValueError naming the variable. A unit ("2GiB") is refused
  rather than guessed at.
- `hbm_refusal_figures` reads the figures of libtpu's refusal of a program too big for
  its HBM, in either of its two sentences (libtpu 0.0.42).
- `byte_text` writes a size the way every page and command shows it: decimal units, three
  significant figures ("3.22 GB", GB = 10^9 bytes), the exact count beside it on request.

The standard library only: the server, the worker, the compiler's side and the command
line all read and write sizes here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

BINARY_MULTIPLES: dict[str, int] = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
"""libtpu's size letters: binary multiples (31.25G is what it keeps of a 32 GiB chip)."""
DECIMAL_UNITS: tuple[tuple[int, str], ...] = (
    (10**12, "TB"),
    (10**9, "GB"),
    (10**6, "MB"),
    (10**3, "kB"),
)
"""The units `byte_text` writes, largest first (powers of 10, as vendors print HBM)."""
_MULTIPLE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGT])$")
_SIZE = r"[0-9]+(?:\.[0-9]+)?[KMGT]"
_OVER_TEMPORARIES = re.compile(
    rf"HLO temporaries \((?P<need>{_SIZE})\) exceeds available HBM \((?P<have>{_SIZE})\)"
)
_OVER_CAPACITY = re.compile(
    rf"Used (?P<need>{_SIZE}) of (?P<have>{_SIZE}) hbm\. Exceeded hbm capacity by (?P<over>{_SIZE})"
)
"""libtpu's other sentence, for a program just over: what it used, of what it keeps, and
by how much it went over."""


def parse_bytes(text: str, *, binary_multiples: bool = False) -> int:
    """The bytes `text` states: a whole number, or with `binary_multiples` also a figure
    with one of libtpu's letters ("31.25G" → 33,554,432,000). ValueError saying what a
    size looks like otherwise."""
    given = text.strip()
    if given.isascii() and given.isdigit():
        return int(given)
    found = _MULTIPLE.match(given) if binary_multiples else None
    if found is None:
        wanted = "a number of bytes" + (", or one with K, M, G or T" if binary_multiples else "")
        raise ValueError(f"expected {wanted}, got {given[:40]!r}")
    return round(float(found[1]) * BINARY_MULTIPLES[found[2]])


def hbm_refusal_figures(text: str) -> tuple[int, int] | None:
    """(bytes the program needs, bytes libtpu keeps for it) from libtpu's out-of-HBM
    refusal: "… the total memory required for HLO temporaries (31.31G) exceeds available
    HBM (31.25G)", or "Used 31.25G of 31.25G hbm. Exceeded hbm capacity by 6.75M." (what
    it needs is then what it used and the excess). None when `text` gives no figures."""
    found = _OVER_TEMPORARIES.search(text) or _OVER_CAPACITY.search(text)
    if found is None:
        return None
    sizes = {k: parse_bytes(v, binary_multiples=True) for k, v in found.groupdict().items()}
    return sizes["need"] + sizes.get("over", 0), sizes["have"]


def env_bytes(env: Mapping[str, str], name: str) -> int | None:
    """The positive whole number of bytes `name` holds in `env`, None when it is unset or
    empty (ValueError naming the variable when it holds anything else, such as "2GiB")."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = parse_bytes(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name}: expected a positive number of bytes, got {raw[:40]!r}")
    return value


def byte_text(size: float | None, *, exact: bool = False, unknown: str = "—") -> str:
    """`size` in decimal units, three significant figures ("3.22 GB", "512 bytes"), with
    the exact count beside it when `exact` ("3.22 GB (3,221,225,472 bytes)"); `unknown`
    for None (a figure no one reported)."""
    if size is None:
        return unknown
    for scale, unit in DECIMAL_UNITS:
        if size >= scale:
            text = f"{size / scale:.3g} {unit}"
            return f"{text} ({round(size):,} bytes)" if exact else text
    return f"{round(size):,} bytes"
