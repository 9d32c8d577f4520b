"""How an exported program places its arguments and results on its devices, read from the
artifact's header in pure Python (no jax), and said in words.

A `jax.export` artifact keeps, per flat argument and result, the `NamedSharding` it was
exported with: its mesh (axis names, sizes and types) and its partition spec (for each
dimension, the mesh axes it is split over), or nothing where the export left it
unspecified. The header stores them once each (`unique_abstract_meshes`,
`unique_named_shardings`) and refers to them by index (`in_shardings_idxs`, 0 for none);
an older header lists a `Sharding` table per argument instead (`in_shardings`), and a jax
older than named shardings wrote XLA's HLO sharding there (`workers.export.hlo_sharding`):
no mesh axes then, only how many pieces each dimension is cut into, shown as XLA's text.

Unspecified means: a worker places such an argument replicated on the program's mesh
(`workers.export.meshes.argument_shardings`); for a result the compiler chooses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from workers.export.flatbuffer import ArtifactError, FlatBuffer
from workers.export.hlo_sharding import HloTiling, read_op_sharding

__all__ = ["ArraySharding", "MeshShape", "read_shardings"]

# vtable offsets (4 + 2 × field index) of the Exported fields read here ...
_IN_SHARDINGS = 18
_OUT_SHARDINGS = 20
_UNIQUE_MESHES = 44
_UNIQUE_SHARDINGS = 46
_IN_SHARDINGS_IDXS = 52
_OUT_SHARDINGS_IDXS = 54
# ... of a Sharding's (the per-argument table of older headers) ...
_SHARDING_HLO = 6
_SHARDING_NAMED = 8
# ... of a NamedSharding's ...
_NAMED_MESH = 4
_NAMED_SPEC = 6
_NAMED_MEMORY = 8
_NAMED_MESH_IDX = 10
# ... of an AbstractMesh's, a PartitionSpec's and one of its dimensions'.
_MESH_SIZES = 4
_MESH_NAMES = 6
_MESH_TYPES = 8
_SPEC_DIMS = 4
_SPEC_REDUCED = 6
_SPEC_UNREDUCED = 8
_DIM_AXES = 4

AXIS_TYPES = ("missing", "auto", "explicit", "manual")
"""The schema's AxisType enum, by value, in lower case."""
MAX_SHARDINGS = 4096
MAX_AXES = 16
MAX_RANK = 64


@dataclass(frozen=True)
class MeshShape:
    """A mesh as an artifact keeps it: no devices, only named axes and their sizes."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    axis_types: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return prod(self.axis_sizes)

    def size_of(self, axis: str) -> int:
        return dict(zip(self.axis_names, self.axis_sizes, strict=True)).get(axis, 1)

    def text(self) -> str:
        """`data: 2 × model: 4`, then the axis types when any is not Auto."""
        axes = " × ".join(
            f"{n}: {s}" for n, s in zip(self.axis_names, self.axis_sizes, strict=True)
        )
        kinds = set(self.axis_types) - {"auto", "missing"}
        if not kinds:
            return axes
        return f"{axes} ({', '.join(t.capitalize() for t in self.axis_types)} axes)"

    def as_dict(self) -> dict[str, object]:
        return {
            "axis_names": list(self.axis_names),
            "axis_sizes": list(self.axis_sizes),
            "axis_types": list(self.axis_types),
            "text": self.text(),
        }


@dataclass(frozen=True)
class ArraySharding:
    """One argument's or result's placement: a mesh and, per dimension, the mesh axes it
    is split over; no mesh when the export left it unspecified."""

    mesh: MeshShape | None = None
    dims: tuple[tuple[str, ...], ...] = ()
    unreduced: tuple[str, ...] = ()
    reduced: tuple[str, ...] = ()
    memory_kind: str | None = None
    hlo: HloTiling | None = field(default=None)
    """An HLO sharding, from a jax older than named shardings (no mesh then)."""

    @property
    def specified(self) -> bool:
        return self.mesh is not None or self.hlo is not None

    def ways(self, dim: int) -> int:
        """Into how many pieces dimension `dim` is split."""
        if self.hlo is not None:
            cuts = self.hlo.data_dims()
            return cuts[dim] if dim < len(cuts) else 1
        if self.mesh is None or dim >= len(self.dims):
            return 1
        return prod(self.mesh.size_of(a) for a in self.dims[dim])

    def spec_text(self) -> str:
        """The partition spec as jax writes it: `P('data', None)`, `P(('x', 'y'),)`."""
        parts = []
        for axes in self.dims:
            if not axes:
                parts.append("None")
            elif len(axes) == 1:
                parts.append(repr(axes[0]))
            else:
                parts.append("(" + ", ".join(repr(a) for a in axes) + ")")
        for word, axes in (("unreduced", self.unreduced), ("reduced", self.reduced)):
            if axes:
                parts.append(f"{word}={{{', '.join(repr(a) for a in axes)}}}")
        # As Python writes a tuple: one dimension alone takes a trailing comma.
        trailing = "," if len(self.dims) == 1 and len(parts) == 1 else ""
        return f"P({', '.join(parts)}{trailing})"

    def shard_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The piece of an array of `shape` that one device holds."""
        return tuple(-(-d // self.ways(i)) for i, d in enumerate(shape))

    def words(self, shape: tuple[int, ...] | None, dtype: str, result: bool = False) -> str:
        """What a person reads: which dimensions are split over which axes, what is
        replicated, and the piece each device holds (when the shape is concrete)."""
        if self.hlo is not None:
            return self._hlo_words(shape, dtype)
        if self.mesh is None:
            return (
                "not specified: the compiler chooses"
                if result
                else "not specified: placed replicated"
            )
        split = [
            f"dim {i} split {self.ways(i)} ways over {' × '.join(axes)}"
            for i, axes in enumerate(self.dims)
            if axes
        ]
        used = {a for axes in self.dims for a in axes} | set(self.unreduced) | set(self.reduced)
        spare = [
            (n, s)
            for n, s in zip(self.mesh.axis_names, self.mesh.axis_sizes, strict=True)
            if n not in used and s > 1
        ]
        if not split:
            said = f"replicated: all of it on each of {self.mesh.devices} devices"
        else:
            said = "; ".join(split)
            if spare:
                said += "; replicated over " + " × ".join(f"{n} ({s})" for n, s in spare)
            if shape is not None:
                piece = ",".join(str(d) for d in self.shard_shape(shape))
                said += f"; {dtype}[{piece}] on each device"
        if self.unreduced:
            said += f"; unreduced over {' × '.join(self.unreduced)}"
        if self.memory_kind not in (None, "device"):
            said += f"; in {self.memory_kind} memory"
        return said

    def _hlo_words(self, shape: tuple[int, ...] | None, dtype: str) -> str:
        """An HLO sharding in words: the pieces of each dimension, and the copies."""
        hlo = self.hlo
        assert hlo is not None
        if hlo.kind == "replicated":
            return "replicated: all of it on each device"
        if hlo.kind == "maximal":
            return f"all of it on device {hlo.devices[0] if hlo.devices else 0}"
        if hlo.kind != "other":
            return f"{hlo.kind} (an HLO sharding)"
        split = [f"dim {i} split {k} ways" for i, k in enumerate(hlo.data_dims()) if k > 1]
        said = "; ".join(split) or "not split"
        if hlo.copies() > 1:
            said += f"; each piece on {hlo.copies()} devices"
        if shape is not None:
            piece = ",".join(str(d) for d in self.shard_shape(shape))
            said += f"; {dtype}[{piece}] on each device"
        return said

    def as_dict(
        self, shape: tuple[int, ...] | None, dtype: str, result: bool = False
    ) -> dict[str, object]:
        """JSON-ready: the spec as jax's PartitionSpec (null, an axis, or a list of axes per
        dimension), its text, and the words the pages show."""
        mesh = self.mesh
        return {
            "specified": self.specified,
            "spec": [None if not a else a[0] if len(a) == 1 else list(a) for a in self.dims],
            "spec_text": self.spec_text() if mesh is not None else None,
            "mesh": mesh.text() if mesh is not None else None,
            "memory_kind": self.memory_kind,
            "hlo_sharding": self.hlo.text() if self.hlo is not None else None,
            "words": self.words(shape, dtype, result),
        }


def _mesh(buf: FlatBuffer, table: int) -> MeshShape:
    names = tuple(buf.strings(buf.field(table, _MESH_NAMES), MAX_AXES))
    sizes = tuple(buf.u32s(buf.field(table, _MESH_SIZES), MAX_AXES))
    types_at = buf.field(table, _MESH_TYPES)
    codes = buf.blob(types_at) if types_at is not None else b""
    if len(names) != len(sizes) or any(s < 1 for s in sizes) or len(codes) > len(names):
        raise ArtifactError("corrupted: a mesh's axis names and sizes do not match")
    kinds = tuple(AXIS_TYPES[c] if c < len(AXIS_TYPES) else "missing" for c in codes)
    return MeshShape(names, sizes, kinds or tuple("auto" for _ in names))


def _named(buf: FlatBuffer, table: int, meshes: list[MeshShape]) -> ArraySharding:
    if meshes:
        at = buf.field(table, _NAMED_MESH_IDX)
        index = buf.u32(at) if at is not None else 0
        if index >= len(meshes):
            raise ArtifactError("corrupted: a sharding names a mesh that is not there")
        mesh = meshes[index]
    else:
        at = buf.field(table, _NAMED_MESH)
        if at is None:
            raise ArtifactError("corrupted: a sharding has no mesh")
        mesh = _mesh(buf, buf.deref(at))
    spec_at = buf.field(table, _NAMED_SPEC)
    spec = buf.deref(spec_at) if spec_at is not None else None
    dims: tuple[tuple[str, ...], ...] = ()
    unreduced: tuple[str, ...] = ()
    reduced: tuple[str, ...] = ()
    if spec is not None:
        dims = tuple(
            tuple(buf.strings(buf.field(d, _DIM_AXES), MAX_AXES))
            for d in buf.tables(buf.field(spec, _SPEC_DIMS), MAX_RANK)
        )
        unreduced = tuple(buf.strings(buf.field(spec, _SPEC_UNREDUCED), MAX_AXES))
        reduced = tuple(buf.strings(buf.field(spec, _SPEC_REDUCED), MAX_AXES))
    named = set(mesh.axis_names)
    if any(a not in named for a in (*(a for d in dims for a in d), *unreduced, *reduced)):
        raise ArtifactError("corrupted: a sharding names an axis its mesh does not have")
    memory_at = buf.field(table, _NAMED_MEMORY)
    memory = buf.text(memory_at) if memory_at is not None else None
    return ArraySharding(mesh, dims, unreduced, reduced, memory)


def _listed(buf: FlatBuffer, table: int, meshes: list[MeshShape]) -> ArraySharding:
    """One entry of an older header's per-argument list of Sharding tables."""
    named = buf.field(table, _SHARDING_NAMED)
    if named is not None:
        return _named(buf, buf.deref(named), meshes)
    hlo = buf.field(table, _SHARDING_HLO)
    if hlo is not None:
        return ArraySharding(hlo=read_op_sharding(buf.blob(hlo)))
    return ArraySharding()


def _side(
    buf: FlatBuffer,
    root: int,
    slots: tuple[int, int],
    *,
    unique: list[ArraySharding],
    meshes: list[MeshShape],
    count: int,
) -> tuple[ArraySharding, ...]:
    """The arguments' or results' shardings, by index when indices exist; unspecified for
    each when the header keeps none."""
    indexed, listed = slots
    indices = buf.u32s(buf.field(root, indexed), MAX_SHARDINGS)
    if indices:
        if any(i > len(unique) for i in indices):
            raise ArtifactError("corrupted: an argument refers to a sharding that is not there")
        found = tuple(unique[i - 1] if i else ArraySharding() for i in indices)
    else:
        tables = buf.tables(buf.field(root, listed), MAX_SHARDINGS)
        found = tuple(_listed(buf, t, meshes) for t in tables)
    if not found:
        return tuple(ArraySharding() for _ in range(count))
    if len(found) != count:
        raise ArtifactError("corrupted: its shardings do not match its arguments or results")
    return found


def read_shardings(
    buf: FlatBuffer, root: int, arguments: int, results: int
) -> tuple[tuple[ArraySharding, ...], tuple[ArraySharding, ...]]:
    """(each argument's sharding, each result's) from the header at `root`."""
    meshes = [_mesh(buf, t) for t in buf.tables(buf.field(root, _UNIQUE_MESHES), MAX_SHARDINGS)]
    unique = [
        _named(buf, t, meshes)
        for t in buf.tables(buf.field(root, _UNIQUE_SHARDINGS), MAX_SHARDINGS)
    ]
    ins = _side(
        buf,
        root,
        (_IN_SHARDINGS_IDXS, _IN_SHARDINGS),
        unique=unique,
        meshes=meshes,
        count=arguments,
    )
    outs = _side(
        buf,
        root,
        (_OUT_SHARDINGS_IDXS, _OUT_SHARDINGS),
        unique=unique,
        meshes=meshes,
        count=results,
    )
    return ins, outs
