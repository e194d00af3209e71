"""The cube data path in the fractal formats of the hardware, one rule per data path.

A cube operand is a 2-D tile (the last two dimensions of its buffer; leading dimensions index
versions of the tile) stored in fractals of 16 rows x C0 elements, C0 = 32 bytes / element
size (512 bytes a fractal):

- L1 ``NZ``: column blocks of C0 elements, each holding every (padded) row;
- L0A ``ZZ`` (m x k): fractals row-major over (m block, k block), row-major inside;
- L0B ``ZN`` (k x n): fractals row-major over (k block, n block), column-major inside;
- L0C ``NZ`` (m x n, 16 x 16 fractals): fractals column-major, row-major inside.

GM -> L1 is ``DataCopy`` with ``Nd2NzParams``; a tile that the copy may not fill entirely (a
partial tile at the edge of the tensor, or a tile whose shape is not a whole number of
fractals) is first zeroed with ``InitConstValue``, so the padding adds nothing to a GEMM.
L1 -> L0A/L0B is ``LoadData`` with ``LoadData2DParams`` (``ifTranspose`` for the operands whose
fractals must be transposed: 2-byte types only), ``Mmad`` multiplies, and L0C -> GM is
``Fixpipe`` with ``CFG_ROW_MAJOR`` (NZ -> ND), writing only the rows and columns inside the
tensor.
"""

from __future__ import annotations

from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.ir import Region
from tvm import tirx

from .passes import dtype_bytes

FRACTAL = 512  # bytes


def c0(dtype: str) -> int:
    return 32 // dtype_bytes(dtype)


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def padded_tile(scope: str, rows: int, cols: int, dtype: str) -> tuple[int, int]:
    """The (rows, cols) a tile of ``scope`` occupies in its fractal format."""
    k0 = c0(dtype)
    if scope == "ascend.l0b":
        return _up(rows, k0), _up(cols, 16)
    if scope == "ascend.l0c":
        return _up(rows, 16), _up(cols, 16)
    if scope == "ascend.l1" and dtype_bytes(dtype) == 4:
        # 16 x 16 squares (two fractals) for LoadDataWithTranspose
        return _up(rows, 16), _up(cols, 16)
    return _up(rows, 16), _up(cols, k0)


def padded_bytes(buf) -> int:
    """Bytes of a cube-memory buffer in its fractal format (every version padded)."""
    shape = [int(s) for s in buf.shape]
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
    versions = 1
    for s in shape[:-2]:
        versions *= s
    pr, pc = padded_tile(str(buf.scope()), rows, cols, str(buf.dtype))
    return versions * pr * pc * dtype_bytes(str(buf.dtype))


class Tile:
    """A whole cube tile addressed by a region: its base element offset (as C++ text), its
    rows and columns and their padded counts."""

    def __init__(self, em, region: Region, what: str):
        low = _low()
        buf = region.buffer
        shape = low._ints(buf.shape, buf.name)
        if len(shape) < 2:
            raise KernelError(f"{what}: {buf.name!r} must be a 2-D tile (the cube works on "
                              "matrices)")
        ext = low._ints(region.extents, buf.name)
        starts = list(region.starts)
        if ext[-2:] != shape[-2:] or any(not _is_zero(s) for s in starts[-2:]) or \
                any(e != 1 for e in ext[:-2]):
            raise KernelError(f"{what}: the cube moves whole tiles of {buf.name!r} "
                              f"({shape[-2]}x{shape[-1]}); a part of it is not supported")
        self.dtype = str(buf.dtype)
        self.rows, self.cols = shape[-2:]
        self.prows, self.pcols = padded_tile(str(buf.scope()), self.rows, self.cols,
                                             self.dtype)
        offset, stride = tirx.const(0, "int32"), self.prows * self.pcols
        for start, dim in reversed(list(zip(starts[:-2], shape[:-2]))):
            offset = offset + _expr(start) * stride
            stride *= dim
        self.name = em.buf(buf)
        self.base = em.expr(offset)
        self.square = square_layout(em, buf)

    def at(self, extra: str = "0") -> str:
        parts = [p for p in (self.base, extra) if p != "0"]
        return self.name if not parts else f"{self.name}[{' + '.join(parts)}]"


def _low():
    """The generic lowering helpers (imported late: :mod:`.lowering` dispatches to this
    module)."""
    from . import lowering

    return lowering


def _is_zero(e) -> bool:
    return (isinstance(e, int) and e == 0) or (isinstance(e, tirx.IntImm) and e.value == 0)


def _expr(e):
    return tirx.const(e, "int32") if isinstance(e, int) else e


def _gm_extent(em, region: Region) -> tuple[str, str, int, bool]:
    """(valid rows, valid cols, row stride) of a GM region clipped to its tensor, as C++
    text, and whether the clip is provably the whole region. The region has at most two
    dimensions of extent > 1 (rows, then columns); the columns are contiguous in GM."""
    low = _low()
    buf = region.buffer
    shape = list(buf.shape)
    ext = low._ints(region.extents, buf.name)
    starts = [_expr(s) for s in region.starts]
    dims = [d for d, e in enumerate(ext) if e > 1] or [len(ext) - 1]
    if len(dims) > 2 or any(e != 1 for e in ext[dims[-1] + 1:]):
        raise KernelError(f"the cube copies 2-D regions of {buf.name!r} whose rows are "
                          f"contiguous; got extents {ext}")
    full, out = True, []
    for dim in ([None] if len(dims) == 1 else []) + dims:
        if dim is None:
            out.append("1")
            continue
        valid = em.analyzer.simplify(tirx.Max(tirx.const(0, "int32"), tirx.Min(
            tirx.const(ext[dim], "int32"), _expr(shape[dim]) - starts[dim])))
        if not (isinstance(valid, tirx.IntImm) and valid.value == ext[dim]):
            full = False
        out.append(em.expr(valid))
    stride = 1  # elements between rows: a C++ expression when a dimension is dynamic
    for s in shape[dims[0] + 1:] if len(dims) == 2 else []:
        stride = stride * (s.value if isinstance(s, tirx.IntImm) else s)
    if not isinstance(stride, int):
        stride = em.expr(stride)
    return out[0], out[1], stride, full


def _valid(em, rows: str, cols: str) -> tuple[str, str]:
    """Bind the valid rows and columns of a partial tile to named locals."""
    r, c = em.ident("tw_rows"), em.ident("tw_cols")
    em.line(f"int32_t {r} = {rows};")
    em.line(f"int32_t {c} = {cols};")
    return r, c


def square_layout(em, buf) -> bool:
    """Whether the L1 buffer ``buf`` holds a 4-byte operand whose fractals must be transposed
    on the way to L0 (B not transposed, A transposed). Such a tile is stored in L1 as rows of
    fractals (fractal (row block, column block) at (row block * column blocks + column
    block) * 512 bytes), so that each 16 x 16 square is two consecutive fractals, as
    LoadDataWithTranspose takes them."""
    if str(buf.scope()) != "ascend.l1" or dtype_bytes(str(buf.dtype)) != 4:
        return False
    cached = getattr(em, "_square_l1", None)
    if cached is None:
        squares, plain = {}, {}
        for call in getattr(em, "gemms", []):
            for operand, flag in (("A", "transpose_A"), ("B", "transpose_B")):
                b = call.operands[operand].buffer
                if dtype_bytes(str(b.dtype)) != 4:
                    continue
                wants = bool(call.attrs[flag]) == (operand == "A")
                (squares if wants else plain)[str(b.name)] = call
        both = set(squares) & set(plain)
        if both:
            name = sorted(both)[0]
            raise KernelError(f"{name!r} (4-byte) is a GEMM operand both with and without a "
                              "fractal transpose; its L1 layout cannot serve both: use two "
                              "buffers")
        cached = em._square_l1 = set(squares)
    return str(buf.name) in cached


def _copy_squares(em, tile, src: Region, rows: str, cols: str, stride) -> None:
    """GM (ND) -> L1 as rows of fractals: one Nd2Nz copy per 16-row slab (a slab is a row of
    fractals, ``dstNzC0Stride`` 16 puts its column blocks one fractal apart)."""
    low = _low()
    slab = 16 * tile.pcols  # elements of a row of fractals
    gm = low.tensor(em, src)
    name, _, off = gm.partition("[")
    off = off[:-1] if off else "0"
    s = em.ident("tw_slab")
    with em.block(f"for (int32_t {s} = 0; {s} * 16 < ({rows}); ++{s})"):
        em.line(f"DataCopy({tile.at(f'{s} * {slab}')}, {name}[{off} + {s} * 16 * {stride}], "
                f"Nd2NzParams(1, (({rows}) - {s} * 16 < 16 ? ({rows}) - {s} * 16 : 16), "
                f"{cols}, 0, {stride}, 16, 1, 0));")


def copy_gm_to_l1(em, src: Region, dst: Region, what: str) -> None:
    low = _low()
    tile = Tile(em, dst, what)
    squares = square_layout(em, dst.buffer)
    rows, cols, stride, full = _gm_extent(em, src)
    if str(src.buffer.dtype) != tile.dtype:
        raise KernelError(f"{what}: {src.buffer.name!r} is {src.buffer.dtype} but "
                          f"{dst.buffer.name!r} is {tile.dtype}; DataCopy does not convert")
    full = full and rows == str(tile.rows)
    nbytes = tile.prows * tile.pcols * dtype_bytes(tile.dtype)
    zero = (f"InitConstValue({tile.at()}, InitConstValueParams<{low.ctype(tile.dtype)}>"
            f"(1, {nbytes // 32}, 0, 0));")

    def copy(r, c):
        if squares:
            _copy_squares(em, tile, src, r, c, stride)
            return
        em.line(f"DataCopy({tile.at()}, {low.tensor(em, src)}, Nd2NzParams(1, {r}, {c}, 0, "
                f"{stride}, {tile.prows}, 1, 0));")

    if full:
        if (tile.prows, tile.pcols) != (tile.rows, tile.cols):
            em.line(zero)  # the fractal padding must add nothing
        copy(rows, cols)
        return
    with em.block(""):  # a partial tile: zero it, then copy what is inside the tensor
        r, c = _valid(em, rows, cols)
        em.line(zero)
        with em.block(f"if ({r} > 0 && {c} > 0)"):
            copy(r, c)


def copy_l0c_to_gm(em, src: Region, dst: Region, what: str) -> None:
    low = _low()
    tile = Tile(em, src, what)
    rows, cols, stride, full = _gm_extent(em, dst)
    d, s = str(dst.buffer.dtype), tile.dtype
    quant = {("float32", "float16"): "F322F16", ("float32", "bfloat16"): "F322BF16"}.get(
        (s, d), "NoQuant" if s == d else None)
    if quant is None:
        raise KernelError(f"{what}: Fixpipe cannot convert {s} to {d}")
    with em.block(""):
        if not full:  # only the rows and columns inside the tensor are written
            rows, cols = _valid(em, rows, cols)
            em.line(f"if ({rows} > 0 && {cols} > 0) {{")
            em.depth += 1
        em.line(f"FixpipeParamsV220 fp; fp.nSize = {cols}; fp.mSize = {rows}; "
                f"fp.srcStride = {tile.prows}; fp.dstStride = {stride}; "
                f"fp.quantPre = QuantMode_t::{quant};")
        em.line(f"Fixpipe<{low.ctype(d)}, {low.ctype(s)}, CFG_ROW_MAJOR>({low.tensor(em, dst)}, "
                f"{tile.at()}, fp);")
        if not full:
            em.depth -= 1
            em.line("}")


def _load(em, dst: str, src: str, repeat: int, src_stride: int, transpose: bool) -> None:
    if repeat > 255:
        raise KernelError(f"LoadData of {repeat} fractals at once exceeds 255; use a smaller "
                          "tile or kL0Size")
    em.line(f"LoadData({dst}, {src}, LoadData2DParams{{0, {repeat}, {src_stride}, 0, 0, "
            f"{'true' if transpose else 'false'}, 0}});")


def _load_t(em, dst: str, src: str, repeat: int, dst_gap: int, frac_gap: int) -> None:
    if repeat > 255:
        raise KernelError(f"LoadDataWithTranspose of {repeat} squares at once exceeds 255; use "
                          "a smaller tile")
    em.line(f"LoadDataWithTranspose({dst}, {src}, LoadData2dTransposeParams{{0, {repeat}, 1, "
            f"{dst_gap}, {frac_gap}, 0}});")


def _need_b16(dtype: str, what: str, operand: str) -> None:
    if dtype_bytes(dtype) != 2:
        raise UnsupportedOpError(
            f"{what}: {operand} in {dtype} needs its fractals transposed, which "
            "LoadData2D does for 2-byte types only; on backend 'ascend' a "
            f"{dtype} GEMM needs A not transposed and B transposed "
            "(T.gemm(A, B, C, transpose_B=True) with B stored N x K)")


def load_a(em, a: Tile, dst: str, kk: str, kl0: int, transpose: bool, what: str) -> None:
    """The m x kl0 slice ``kk`` of op(A) from L1 (NZ) into L0A (ZZ)."""
    k0 = c0(a.dtype)
    mb = em.ident("mb")
    if not transpose:  # L1 holds A (m x K): row block mb, column blocks kk*kl0/C0 ...
        with em.block(f"for (int32_t {mb} = 0; {mb} < {a.prows // 16}; ++{mb})"):
            _load(em, f"{dst}[{mb} * {16 * kl0}]",
                  a.at(f"{kk} * {kl0 * a.prows} + {mb} * {16 * k0}"), kl0 // k0, a.prows // 16,
                  False)
        return
    if dtype_bytes(a.dtype) == 4 and a.square:
        # L1 holds A^T (K x m) as rows of fractals: per 16-row slab of K, each 16 x 16
        # square (m block j) transposes into L0A fractals (j, 2 kb) and (j, 2 kb + 1)
        kb = em.ident("kb")
        with em.block(f"for (int32_t {kb} = 0; {kb} < {kl0 // 16}; ++{kb})"):
            _load_t(em, f"{dst}[{kb} * 256]", a.at(f"({kk} * {kl0 // 16} + {kb}) * "
                                                   f"{16 * a.pcols}"),
                    a.pcols // 16, kl0 // 8 - 1, 0)
        return
    _need_b16(a.dtype, what, "A^T")
    with em.block(f"for (int32_t {mb} = 0; {mb} < {a.pcols // 16}; ++{mb})"):
        # L1 holds A^T (K x m): the fractals of column block mb, transposed
        _load(em, f"{dst}[{mb} * {16 * kl0}]", a.at(f"{mb} * {a.prows * 16} + {kk} * {kl0 * 16}"),
              kl0 // 16, 1, True)


def load_b(em, b: Tile, dst: str, kk: str, kl0: int, transpose: bool, what: str) -> None:
    """The kl0 x n slice ``kk`` of op(B) from L1 (NZ) into L0B (ZN)."""
    k0 = c0(b.dtype)
    if transpose:  # L1 holds B^T (n x K): its fractals are ZN fractals already, in order
        _load(em, dst, b.at(f"{kk} * {kl0 * b.prows}"), (kl0 // k0) * (b.prows // 16), 1, False)
        return
    if dtype_bytes(b.dtype) == 4 and b.square:
        # L1 holds B (K x n) as rows of fractals: per 16-row slab of K, each 16 x 16 square
        # (n block j) transposes into L0B fractals (2 kb, j) and (2 kb + 1, j)
        kb = em.ident("kb")
        nb = b.pcols // 16
        with em.block(f"for (int32_t {kb} = 0; {kb} < {kl0 // 16}; ++{kb})"):
            _load_t(em, f"{dst}[{kb} * {2 * nb * 128}]",
                    b.at(f"({kk} * {kl0 // 16} + {kb}) * {16 * b.pcols}"), nb, 0, nb - 1)
        return
    _need_b16(b.dtype, what, "B")
    kb = em.ident("kb")
    nblocks = b.pcols // 16
    with em.block(f"for (int32_t {kb} = 0; {kb} < {kl0 // 16}; ++{kb})"):
        _load(em, f"{dst}[{kb} * {nblocks * 256}]", b.at(f"({kk} * {kl0 // 16} + {kb}) * 256"),
              nblocks, b.prows // 16, True)


def rule_gemm_v0(em, call) -> None:
    what = "T.gemm_v0"
    ta, tb = call.attrs["transpose_A"], call.attrs["transpose_B"]
    a = Tile(em, call.operands["A"], what)
    b = Tile(em, call.operands["B"], what)
    c = Tile(em, call.operands["C"], what)
    m, k = (a.cols, a.rows) if ta else (a.rows, a.cols)
    kb_, n = (b.cols, b.rows) if tb else (b.rows, b.cols)
    if k != kb_ or (c.rows, c.cols) != (m, n):
        raise KernelError(f"{what}: shapes do not match: op(A) {m}x{k}, op(B) {kb_}x{n}, "
                          f"C {c.rows}x{c.cols}")
    kl0, kp = gemm_k(call)
    index = em.gemm_index(call)
    l0a = em.buffer_names[f"gemm{index}_l0a"]
    l0b = em.buffer_names[f"gemm{index}_l0b"]
    kk = em.ident("kk")
    init = em.expr(call.operands["init"])
    with em.block(f"for (int32_t {kk} = 0; {kk} < {kp // kl0}; ++{kk})"):
        load_a(em, a, l0a, kk, kl0, ta, what)
        load_b(em, b, l0b, kk, kl0, tb, what)
        em.line("SetFlag<HardEvent::MTE1_M>(0);")
        em.line("WaitFlag<HardEvent::MTE1_M>(0);")
        em.line(f"MmadParams mp; mp.m = {m}; mp.n = {n}; mp.k = {kl0}; "
                f"mp.cmatrixInitVal = ({init}) && {kk} == 0;")
        em.line(f"Mmad({c.at()}, {l0a}, {l0b}, mp);")
        em.line("SetFlag<HardEvent::M_MTE1>(0);")
        em.line("WaitFlag<HardEvent::M_MTE1>(0);")


def gemm_k(call) -> tuple[int, int]:
    """(K step through L0, K padded to whole steps) of a gemm_v0 call."""
    a = call.operands["A"]
    shape = [int(s) for s in a.buffer.shape]
    k = shape[-2] if call.attrs["transpose_A"] else shape[-1]
    kp = _up(k, 16)
    kl0 = _up(min(int(call.attrs["kL0Size"]), kp), 16)
    if kp % kl0:
        raise KernelError(f"T.gemm_v0: K = {k} (padded to {kp}) is not a multiple of "
                          f"kL0Size = {kl0}")
    return kl0, kp


def gemm_dims(call) -> tuple[int, int]:
    """(padded M, padded N) of a gemm_v0 call."""
    a, b = call.operands["A"], call.operands["B"]
    ash, bsh = [int(s) for s in a.buffer.shape], [int(s) for s in b.buffer.shape]
    m = ash[-1] if call.attrs["transpose_A"] else ash[-2]
    n = bsh[-2] if call.attrs["transpose_B"] else bsh[-1]
    return _up(m, 16), _up(n, 16)


def copy_l1_to_l0(em, src: Region, dst: Region, what: str) -> None:
    """A whole L1 tile into L0A (as the A operand) or L0B (as the B operand)."""
    s, d = Tile(em, src, what), Tile(em, dst, what)
    if (s.rows, s.cols) != (d.rows, d.cols):
        raise KernelError(f"{what}: L1 -> L0 copies whole 2-D tiles of equal shape")
    if str(dst.buffer.scope()) == "ascend.l0a":
        load_a(em, s, d.at(), "0", s.pcols, False, what)
    else:
        load_b(em, s, d.at(), "0", s.prows, False, what)


def rule_mma(em, call) -> None:
    a = Tile(em, call.operands["A"], "T.mma")
    b = Tile(em, call.operands["B"], "T.mma")
    c = Tile(em, call.operands["C"], "T.mma")
    init = em.expr(call.operands["init"])
    em.line(f"{{ MmadParams mp; mp.m = {a.rows}; mp.n = {b.cols}; mp.k = {a.cols}; "
            f"mp.cmatrixInitVal = {init}; Mmad({c.at()}, {a.at()}, {b.at()}, mp); }}")
