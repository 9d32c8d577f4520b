"""An HLO sharding (XLA's `OpSharding` protobuf) read in pure Python, as a jax older than
named shardings (before 2026) wrote it into an artifact's header.

Only the fields that say how an array is tiled are read: the type, the tile assignment's
dimensions, its devices (listed, or as an iota reshaped and transposed), whether the last
tile dimension is replication, and the kinds of the trailing subgroup dimensions. The
text is XLA's own (`{devices=[2,1,4]<=[8] last_tile_dim_replicate}`); anything else in
the message is skipped by its wire type, and a malformed message is an ArtifactError.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from workers.export.flatbuffer import ArtifactError

__all__ = ["HloTiling", "read_op_sharding"]

_TYPES = ("replicated", "maximal", "tuple", "other", "manual", "unknown", "unreduced")
MAX_DIMS = 64
MAX_DEVICES = 1 << 20


@dataclass(frozen=True)
class HloTiling:
    """What an OpSharding says about one array's placement."""

    kind: str
    dims: tuple[int, ...] = ()
    devices: tuple[int, ...] = ()
    iota: tuple[int, ...] = ()
    transpose: tuple[int, ...] = ()
    replicate_last: bool = False
    subgroups: tuple[str, ...] = ()

    def text(self) -> str:
        """As XLA prints it."""
        if self.kind != "other":
            if self.kind == "maximal" and self.devices:
                return f"{{maximal device={self.devices[0]}}}"
            return f"{{{self.kind}}}"
        dims = ",".join(str(d) for d in self.dims)
        if self.iota:
            order = f"<=[{','.join(str(d) for d in self.iota)}]"
            if self.transpose and list(self.transpose) != sorted(self.transpose):
                order += f"T({','.join(str(p) for p in self.transpose)})"
        else:
            order = ",".join(str(d) for d in self.devices)
        tail = " last_tile_dim_replicate" if self.replicate_last else ""
        if self.subgroups:
            tail = f" last_tile_dims={{{', '.join(self.subgroups)}}}"
        return f"{{devices=[{dims}]{order}{tail}}}"

    def data_dims(self) -> tuple[int, ...]:
        """Into how many pieces each of the array's dimensions is cut (the tile
        assignment without its trailing replication or subgroup dimensions)."""
        if self.kind != "other":
            return ()
        extra = len(self.subgroups) or int(self.replicate_last)
        return self.dims[: len(self.dims) - extra] if extra else self.dims

    def copies(self) -> int:
        """On how many devices each piece is (1 when nothing is replicated)."""
        if self.kind != "other":
            return 1
        if self.replicate_last:
            return self.dims[-1] if self.dims else 1
        tail = self.dims[len(self.dims) - len(self.subgroups) :] if self.subgroups else ()
        return prod(d for d, k in zip(tail, self.subgroups, strict=True) if k == "replicated")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.at >= len(self.data) or shift > 63:
                raise ArtifactError("corrupted: an HLO sharding ends inside a number")
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def chunk(self) -> bytes:
        size = self.varint()
        if self.at + size > len(self.data):
            raise ArtifactError("corrupted: an HLO sharding's field runs past its end")
        piece = self.data[self.at : self.at + size]
        self.at += size
        return piece

    def skip(self, wire: int) -> None:
        if wire == 0:
            self.varint()
        elif wire == 2:
            self.chunk()
        elif wire in (1, 5):
            self.at += 8 if wire == 1 else 4
        else:
            raise ArtifactError(f"corrupted: an HLO sharding has a field of wire type {wire}")


def _numbers(reader: _Reader, wire: int, into: list[int], limit: int) -> None:
    """A repeated integer field's values, packed (wire type 2) or one at a time (0)."""
    if wire == 0:
        into.append(reader.varint())
    else:
        packed = _Reader(reader.chunk())
        while packed.at < len(packed.data):
            into.append(packed.varint())
    if len(into) > limit:
        raise ArtifactError("corrupted: an HLO sharding lists too many dimensions or devices")


def read_op_sharding(data: bytes) -> HloTiling:
    """The tiling an OpSharding's bytes describe (ArtifactError when they are malformed)."""
    reader = _Reader(data)
    kind = 0
    lists: dict[int, list[int]] = {3: [], 4: [], 8: [], 9: [], 10: []}
    replicate_last = False
    while reader.at < len(data):
        key = reader.varint()
        number, wire = key >> 3, key & 7
        if number == 1 and wire == 0:
            kind = reader.varint()
        elif number == 6 and wire == 0:
            replicate_last = bool(reader.varint())
        elif number in lists and wire in (0, 2):
            _numbers(reader, wire, lists[number], MAX_DEVICES if number == 4 else MAX_DIMS)
        else:
            reader.skip(wire)
    if kind >= len(_TYPES):
        raise ArtifactError(f"corrupted: unknown HLO sharding type {kind}")
    if any(k >= len(_TYPES) for k in lists[8]):
        raise ArtifactError("corrupted: unknown HLO sharding subgroup type")
    subgroups = tuple(_TYPES[k] for k in lists[8])
    return HloTiling(
        kind=_TYPES[kind],
        dims=tuple(lists[3]),
        devices=tuple(lists[4]),
        iota=tuple(lists[9]),
        transpose=tuple(lists[10]),
        replicate_last=replicate_last,
        subgroups=subgroups,
    )
