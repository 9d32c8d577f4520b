"""An .npz archive's arrays, read from the zip's central directory and each member's .npy
header alone: nothing is decompressed past a header, nothing is unpickled, NumPy is not
imported. The server reads uploads with it, and the worker reads every archive with it
again before `np.load`.

What NumPy's own header reader lets through, and this refuses, naming the member:

- a negative dimension (NumPy accepts any integer, so `arg1` declaring -1073741824 cancels
  an `arg0` declaring 4 GiB in a sum of sizes);
- a size that overflows: the product of the dimensions, or the array's bytes, past
  2**63 - 1, or past the caller's cap;
- a member whose declared bytes differ from the bytes the zip's directory says it holds
  (zipfile stops a member at that size, so it is all any reader can get): a header that
  lies about its array, and a compression bomb, are refused without inflating them;
- a member name matched only up to a final newline (`^…\\.npy$` accepts "arg0.npy\\n"):
  names are matched whole.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from typing import IO

__all__ = ["MEMBER", "ArrayInfo", "NpzError", "read_npz"]

_PART = r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}"
MEMBER = re.compile(rf"{_PART}(?:/{_PART})*(?:\.indices|\.values)?\.npy")
"""The members an .npz may hold, matched whole (fullmatch): a function's inputs (arg0,
arg1, … or their paths, such as params/blocks/0/attn/key/kernel) and its reference
results (out0, … or their paths), whole or sampled (out0.indices with out0.values). A
path's parts start with a letter, digit, `_` or `-`; `..` is refused anywhere."""
MAX_MEMBER_CHARS = 512
MAX_MEMBERS = 256
MAX_HEADER_BYTES = 10_000
"""NumPy's own default limit on an .npy header."""
MAX_DIMS = 64
"""NumPy's limit on dimensions (NPY_MAXDIMS)."""
INT64_MAX = 2**63 - 1
MAGIC = b"\x93NUMPY"
METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
"""What np.savez and np.savez_compressed write; other compressions are refused."""

DTYPES: dict[str, tuple[str, int]] = {
    "f2": ("float16", 2),
    "f4": ("float32", 4),
    "f8": ("float64", 8),
    "c8": ("complex64", 8),
    "c16": ("complex128", 16),
    "i1": ("int8", 1),
    "i2": ("int16", 2),
    "i4": ("int32", 4),
    "i8": ("int64", 8),
    "u1": ("uint8", 1),
    "u2": ("uint16", 2),
    "u4": ("uint32", 4),
    "u8": ("uint64", 8),
    "b1": ("bool", 1),
    "V2": ("bfloat16", 2),  # ml_dtypes' bfloat16 is saved as two raw bytes per value
}
"""Plain dtypes by their type code without byte order; anything else (Python objects,
strings, records) is refused."""
_ONE_BYTE = ("i1", "u1", "b1", "V2")


class NpzError(ValueError):
    """An archive no worker may load; the message names the member (and the dimension)."""


@dataclass(frozen=True)
class ArrayInfo:
    """One array of an archive, as its header declares it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    def text(self) -> str:
        return f"{self.name}: {self.dtype}[{','.join(str(d) for d in self.shape)}]"


def _clip(name: str) -> str:
    return repr(name[:60])


def read_npz(source: IO[bytes], max_bytes: int = INT64_MAX) -> list[ArrayInfo]:
    """Every array of the archive `source` (a seekable binary file), checked; NpzError
    naming the member otherwise. `max_bytes` caps each array and their sum."""
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        raise NpzError("not an .npz archive (it is no zip file)") from None
    with archive:
        infos = archive.infolist()
        if not infos or len(infos) > MAX_MEMBERS:
            raise NpzError(f"an .npz archive holds 1 to {MAX_MEMBERS} arrays")
        seen: set[str] = set()
        found: list[ArrayInfo] = []
        total = 0
        for info in infos:
            name = info.filename
            if len(name) > MAX_MEMBER_CHARS or ".." in name or MEMBER.fullmatch(name) is None:
                raise NpzError(
                    f"{_clip(name)}: an .npz holds only arrays named arg0, arg1, … or by "
                    "path (a function's inputs) and out0, … or by path (its reference "
                    "results), whole or as NAME.indices with NAME.values (a sample)"
                )
            if name in seen:
                raise NpzError(f"{_clip(name)} is in the archive twice")
            seen.add(name)
            if info.flag_bits & 0x1:
                raise NpzError(f"{_clip(name)} is encrypted")
            if info.compress_type not in METHODS:
                raise NpzError(f"{_clip(name)} is compressed in a way .npz files are not")
            array = _member(archive, info, max_bytes)
            total += array.nbytes
            if total > max_bytes:
                raise NpzError(
                    f"the arrays declare more than {max_bytes:,} bytes in all "
                    f"(reached with {array.text()})"
                )
            found.append(array)
    return found


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, max_bytes: int) -> ArrayInfo:
    name = info.filename
    stem = name.removesuffix(".npy")
    try:
        with archive.open(info) as stream:
            head = stream.read(len(MAGIC) + 2)
            if len(head) < len(MAGIC) + 2 or head[: len(MAGIC)] != MAGIC:
                raise NpzError(f"{_clip(name)} is not an .npy array")
            major = head[len(MAGIC)]
            if major not in (1, 2, 3):
                raise NpzError(f"{_clip(name)}: .npy format version {major} is unknown")
            width = 2 if major == 1 else 4
            length = int.from_bytes(stream.read(width), "little")
            if length > MAX_HEADER_BYTES:
                raise NpzError(f"{_clip(name)}: its header is over {MAX_HEADER_BYTES:,} bytes")
            text = stream.read(length)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, ValueError) as exc:
        if isinstance(exc, NpzError):
            raise
        raise NpzError(f"{_clip(name)}: not a readable array ({exc})"[:200]) from None
    if len(text) != length:
        raise NpzError(f"{_clip(name)}: its header is cut short")
    (dtype, itemsize), shape = _header(name, text, "utf-8" if major == 3 else "latin-1")
    nbytes = _declared_bytes(stem, shape, itemsize, max_bytes)
    held = info.file_size - (len(MAGIC) + 2 + width + length)
    if held != nbytes:
        raise NpzError(
            f"{stem} declares {nbytes:,} bytes ({dtype}[{','.join(map(str, shape))}]) but "
            f"holds {max(held, 0):,}"
        )
    return ArrayInfo(stem, dtype, shape, nbytes)


def _header(name: str, raw: bytes, encoding: str) -> tuple[tuple[str, int], tuple[int, ...]]:
    """(dtype name, item size) and shape from an .npy header's dict literal."""
    try:
        value = ast.literal_eval(raw.decode(encoding))
    except (ValueError, SyntaxError, UnicodeDecodeError, RecursionError, MemoryError, TypeError):
        raise NpzError(f"{_clip(name)}: its header is not an .npy header") from None
    if not isinstance(value, dict) or set(value) != {"descr", "fortran_order", "shape"}:
        raise NpzError(f"{_clip(name)}: its header is not an .npy header")
    descr, fortran, shape = value["descr"], value["fortran_order"], value["shape"]
    if not isinstance(fortran, bool):
        raise NpzError(f"{_clip(name)}: fortran_order is not true or false")
    if not isinstance(descr, str) or descr.lstrip("<>|=") not in DTYPES:
        raise NpzError(
            f"{_clip(name)} holds {str(descr)[:40]!r} values; only plain numbers are allowed "
            "(no Python objects, strings or records)"
        )
    if descr.startswith(">") and descr[1:] not in _ONE_BYTE:
        raise NpzError(f"{_clip(name)} is big-endian; save it on a little-endian machine")
    if not isinstance(shape, tuple) or len(shape) > MAX_DIMS:
        raise NpzError(f"{_clip(name)}: its shape is not a tuple of at most {MAX_DIMS} sizes")
    for index, dim in enumerate(shape):
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise NpzError(f"{_clip(name)}: dimension {index} is not a whole number")
    return DTYPES[descr.lstrip("<>|=")], shape


def _declared_bytes(stem: str, shape: tuple[int, ...], itemsize: int, max_bytes: int) -> int:
    """The array's bytes; NpzError naming the dimension that is negative or that takes
    the size past 2**63 - 1 or past `max_bytes`."""
    for index, dim in enumerate(shape):
        if dim < 0:
            raise NpzError(f"{stem}: dimension {index} is {dim:,}, and a size cannot be negative")
        if dim > INT64_MAX:
            raise NpzError(f"{stem}: dimension {index} is over 2**63 - 1")
    if 0 in shape:
        return 0
    elements = 1
    for index, dim in enumerate(shape):
        elements *= dim
        if elements * itemsize > INT64_MAX:
            raise NpzError(
                f"{stem}: dimension {index} ({dim:,}) makes the array's size overflow "
                "(over 2**63 - 1 bytes)"
            )
        if elements * itemsize > max_bytes:
            raise NpzError(
                f"{stem}: dimension {index} ({dim:,}) makes the array over {max_bytes:,} bytes"
            )
    return elements * itemsize
