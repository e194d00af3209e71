"""Tile regions as Ascend C operands: element offsets, row views, contiguity and alignment
checks shared by the rule families."""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import Region
from tvm import tirx

from ..facts.arch import ALIGN, short
from ..facts.dtypes import ctype, dtype_bytes


def static_ints(values, what):
    out = []
    for v in values:
        v = v.value if isinstance(v, tirx.IntImm) else v
        if not isinstance(v, int):
            raise KernelError(f"{what}: backend 'ascend' needs static tile shapes, got {v}")
        out.append(v)
    return out


def offset_expr(region: Region):
    """The element offset of the region's start in its buffer (row-major)."""
    # a tensor's dimensions may be dynamic (T.dynamic): kernel arguments
    shape = [d.value if isinstance(d, tirx.IntImm) else d for d in region.buffer.shape]
    offset, stride = 0, 1
    for start, dim in reversed(list(zip(region.starts, shape))):
        offset = offset + (start if not isinstance(start, int) else tirx.const(start, "int32")) \
            * stride
        stride *= dim
    return offset


def offset_of(em, region: Region) -> str:
    return em.expr(offset_expr(region))


def tensor(em, region: Region) -> str:
    off = offset_of(em, region)
    name = em.buf(region.buffer)
    return name if off == "0" else f"{name}[{off}]"


def view(em, region: Region) -> tuple[int, int, int]:
    """The region as (rows, cols, row stride in elements) of its buffer. The stride is an
    expression when a dimension of the tensor is dynamic (T.dynamic)."""
    name = em.tile_name(region.buffer)
    shape = [d.value if isinstance(d, tirx.IntImm) else d for d in region.buffer.shape]
    if str(region.buffer.scope()) != "global":
        shape = static_ints(shape, name)
    ext = static_ints(region.extents, name)
    cols, stride = ext[-1], shape[-1]
    rows = 1
    for e in ext[:-1]:
        rows *= e
    outer = [i for i in range(len(ext) - 1) if ext[i] > 1]
    if not _spaced(shape, ext, outer):
        raise KernelError(f"the region of {name} with extents {ext} is not a "
                          "set of equally spaced rows; copy it in parts")
    if outer:  # dimensions of extent 1 after the rows only offset them
        stride = 1
        for dim in shape[outer[-1] + 1:]:
            stride = stride * dim
    if rows == 1:
        stride = cols
    return rows, cols, stride


def _spaced(shape, ext, outer) -> bool:
    return not outer or all(isinstance(shape[j], int) and ext[j] == shape[j]
                            for j in range(outer[0] + 1, outer[-1] + 1))


def row_set(region: Region) -> bool:
    """Whether ``region`` is one set of equally spaced rows (what :func:`view` takes)."""
    shape = [d.value if isinstance(d, tirx.IntImm) else d for d in region.buffer.shape]
    ext = [e.value if isinstance(e, tirx.IntImm) else e for e in region.extents]
    if not all(isinstance(e, int) for e in ext):
        return True  # view names the dynamic extent
    return _spaced(shape, ext, [i for i in range(len(ext) - 1) if ext[i] > 1])


def split_outer(a: Region, b: Region, index) -> tuple[int, Region, Region] | None:
    """The copy ``a`` -> ``b``, where ``a`` is not a set of equally spaced rows, as ``count``
    copies along ``a``'s outermost dimension of extent above 1: (count, part ``index`` of
    ``a``, part ``index`` of ``b``); ``b``'s part is its share of the rows of its own outermost
    such dimension. None when ``b`` has no such dimension or its extent is not a multiple."""
    def outer(r):
        ext = [e.value if isinstance(e, tirx.IntImm) else e for e in r.extents]
        dims = [d for d in range(len(ext) - 1) if isinstance(ext[d], int) and ext[d] > 1]
        return (dims[0], ext[dims[0]]) if dims else None

    (da, count), ob = outer(a), outer(b)
    if ob is None or ob[1] % count:
        return None

    def part(r, d, share):
        starts, extents = list(r.starts), list(r.extents)
        starts[d] = starts[d] + index * share
        extents[d] = tirx.const(share, "int32")
        return Region(r.buffer, tuple(starts), tuple(extents))

    return count, part(a, da, 1), part(b, ob[0], ob[1] // count)


def blocks(nbytes: int, what: str) -> int:
    if nbytes % ALIGN:
        raise KernelError(f"{what}: {nbytes} bytes is not a multiple of {ALIGN}; Ascend "
                          "DataCopy moves 32-byte blocks, so make the tile's last dimension a "
                          f"multiple of {ALIGN} bytes")
    return nbytes // ALIGN


class Operand:
    """A UB region as rows of ``cols`` elements, ``stride`` apart, from element ``off``."""

    def __init__(self, em, region: Region, what: str):
        self.region, self.name = region, em.buf(region.buffer)
        self.label = em.tile_name(region.buffer)
        self.rows, self.cols, self.stride = view(em, region)
        self.off = offset_of(em, region)
        self.eb = dtype_bytes(str(region.buffer.dtype))
        self.ctype = ctype(str(region.buffer.dtype))
        if str(region.buffer.scope()) != "ascend.ub":
            raise KernelError(f"{what}: {self.label} is in "
                              f"{short(region.buffer.scope())}; vector operands are "
                              "UB tiles")
        if self.off.lstrip("-").isdigit() and int(self.off) * self.eb % ALIGN:
            raise KernelError(f"{what}: {self.label} starts at element {self.off}, "
                              f"which is not {ALIGN}-byte aligned; vector instructions start "
                              f"on {ALIGN}-byte boundaries of the Unified Buffer")

    @property
    def contiguous(self) -> bool:
        return self.rows == 1 or self.cols == self.stride

    def at(self, row: str | None = None, col: int = 0) -> str:
        parts = [p for p in (self.off if self.off != "0" else "",
                             f"{row} * {self.stride}" if row else "",
                             str(col) if col else "") if p]
        return self.name if not parts else f"{self.name}[{' + '.join(parts)}]"


def like(op: Operand, name: str) -> Operand:
    """``op``'s row layout over another buffer, from its element 0."""
    out = object.__new__(Operand)
    out.__dict__.update(op.__dict__)
    out.name, out.off = name, "0"
    return out


def by_rows(em, operands, emit_one, what):
    """Call ``emit_one(args, count)`` once over contiguous operands, else once per row."""
    rows = {o.rows for o in operands if o.rows > 1} or {1}
    counts = {o.rows * o.cols for o in operands}
    if len(counts) == 1 and all(o.contiguous for o in operands):
        emit_one([o.at() for o in operands], counts.pop())
        return
    if len(rows) != 1 or len({o.cols for o in operands}) != 1:
        shapes = ", ".join(f"{o.label} {o.rows}x{o.cols}" for o in operands)
        raise KernelError(f"{what}: operand shapes differ ({shapes})")
    check_rows_aligned(operands, what)
    r = em.ident("r")
    with em.block(f"for (int32_t {r} = 0; {r} < {rows.pop()}; ++{r})"):
        emit_one([o.at(r if o.rows > 1 else None) for o in operands], operands[0].cols)


def check_rows_aligned(operands, what) -> None:
    """A row-by-row vector instruction starts each row of an operand 32-byte aligned."""
    for o in operands:
        if o.rows > 1 and o.stride * o.eb % ALIGN:
            raise KernelError(f"{what}: rows of {o.label} are {o.stride * o.eb} "
                              f"bytes apart, not a multiple of {ALIGN}")


def vector_operands(em, regions, what) -> tuple[list[str], int]:
    counts = set()
    out = []
    for r in regions:
        rows, cols, stride = view(em, r)
        if rows > 1 and cols != stride:
            raise KernelError(f"{what}: the region of {em.tile_name(r.buffer)} is not contiguous; "
                              "vector instructions take contiguous UB ranges")
        off = offset_of(em, r)
        if off.lstrip("-").isdigit() and int(off) * dtype_bytes(str(r.buffer.dtype)) % ALIGN:
            raise KernelError(f"{what}: {em.tile_name(r.buffer)} starts at element {off}, "
                              f"which is not {ALIGN}-byte aligned; vector instructions start "
                              f"on {ALIGN}-byte boundaries of the Unified Buffer")
        counts.add(rows * cols)
        out.append(tensor(em, r))
    return out, counts.pop()
