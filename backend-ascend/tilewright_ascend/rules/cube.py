"""The cube data paths in the fractal formats of the hardware (:mod:`..facts.layout`), one
rule per data path, and the cube instructions.

GM -> L1 is ``DataCopy`` with ``Nd2NzParams``; a tile that the copy may not fill entirely (a
partial tile at the edge of the tensor, or a tile whose shape is not a whole number of
fractals) is first zeroed with ``InitConstValue``, so the padding adds nothing to a GEMM.
L1 -> L0A/L0B is ``LoadData`` with ``LoadData2DParams`` (``ifTranspose`` for the operands whose
fractals must be transposed: 2-byte types only; ``LoadDataWithTranspose`` for 4-byte operands
stored as rows of fractals), ``Mmad`` multiplies, and L0C -> GM is ``Fixpipe`` with
``CFG_ROW_MAJOR`` (NZ -> ND), writing only the rows and columns inside the tensor.
"""

from __future__ import annotations

from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.ir import Region
from tvm import tirx

from ..analysis.gemm import gemm_k
from ..facts import ops
from ..facts.dtypes import ctype, dtype_bytes
from ..facts.instructions import ND2NZ_SRC_D_LIMIT, REPEAT_LIMIT
from ..facts.layout import c0, padded_tile
from ..facts.paths import GM, L0A, L0B, L0C, L1
from .regions import static_ints, tensor
from .table import copy_rule, rule


class Tile:
    """A whole cube tile addressed by a region: its base element offset (as C++ text), its
    rows and columns and their padded counts."""

    def __init__(self, em, region: Region, what: str):
        buf = region.buffer
        name = em.tile_name(buf)
        shape = static_ints(buf.shape, name)
        if len(shape) < 2:
            raise KernelError(f"{what}: {name} must be a 2-D tile (the cube works on "
                              "matrices)")
        ext = static_ints(region.extents, name)
        starts = list(region.starts)
        if ext[-2:] != shape[-2:] or any(not _is_zero(s) for s in starts[-2:]) or \
                any(e != 1 for e in ext[:-2]):
            raise KernelError(f"{what}: the cube moves whole tiles of {name} "
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
        self.square = buf in em.squares

    def at(self, extra: str = "0") -> str:
        parts = [p for p in (self.base, extra) if p != "0"]
        return self.name if not parts else f"{self.name}[{' + '.join(parts)}]"


def _is_zero(e) -> bool:
    return (isinstance(e, int) and e == 0) or (isinstance(e, tirx.IntImm) and e.value == 0)


def _expr(e):
    return tirx.const(e, "int32") if isinstance(e, int) else e


def _gm_extent(em, region: Region) -> tuple[str, str, int, bool]:
    """(valid rows, valid cols, row stride) of a GM region clipped to its tensor, as C++
    text, and whether the clip is provably the whole region. The region has at most two
    dimensions of extent > 1 (rows, then columns); the columns are contiguous in GM. Its last
    dimension is the columns even where it is one element wide (a (K, 1) column of a GEMV's B
    is K rows of one element, not a row)."""
    buf = region.buffer
    shape = list(buf.shape)
    ext = static_ints(region.extents, em.tile_name(buf))
    starts = [_expr(s) for s in region.starts]
    dims = [d for d, e in enumerate(ext[:-1]) if e > 1] + [len(ext) - 1]
    if len(dims) > 2 or any(e != 1 for e in ext[dims[-1] + 1:]):
        raise KernelError(f"the cube copies 2-D regions of {em.tile_name(buf)} whose rows are "
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


def _copy_squares(em, tile, src: Region, rows: str, cols: str, stride) -> None:
    """GM (ND) -> L1 as rows of fractals: one Nd2Nz copy per 16-row slab (a slab is a row of
    fractals, ``dstNzC0Stride`` 16 puts its column blocks one fractal apart)."""
    slab = 16 * tile.pcols  # elements of a row of fractals
    gm = tensor(em, src)
    name, _, off = gm.partition("[")
    off = off[:-1] if off else "0"
    s = em.ident("tw_slab")
    with em.block(f"for (int32_t {s} = 0; {s} * 16 < ({rows}); ++{s})"):
        em.line(f"DataCopy({tile.at(f'{s} * {slab}')}, {name}[{off} + {s} * 16 * {stride}], "
                f"Nd2NzParams(1, (({rows}) - {s} * 16 < 16 ? ({rows}) - {s} * 16 : 16), "
                f"{cols}, 0, {stride}, 16, 1, 0));")


@copy_rule((GM, L1))
def copy_gm_to_l1(em, src: Region, dst: Region, what: str) -> None:
    tile = Tile(em, dst, what)
    squares = tile.square
    rows, cols, stride, full = _gm_extent(em, src)
    if str(src.buffer.dtype) != tile.dtype:
        raise KernelError(f"{what}: {em.tile_name(src.buffer)} is {src.buffer.dtype} but "
                          f"{em.tile_name(dst.buffer)} is {tile.dtype}; DataCopy does not "
                          "convert")
    full = full and rows == str(tile.rows)
    if isinstance(stride, int) and stride > ND2NZ_SRC_D_LIMIT:
        raise KernelError(f"{what}: the rows of {em.tile_name(src.buffer)} are {stride} "
                          "elements apart, but the copy to L1 (Nd2NzParams.srcDValue) takes "
                          f"at most {ND2NZ_SRC_D_LIMIT}; make the tensor's last dimension at most "
                          f"{ND2NZ_SRC_D_LIMIT}")
    nbytes = tile.prows * tile.pcols * dtype_bytes(tile.dtype)
    zero = (f"InitConstValue({tile.at()}, InitConstValueParams<{ctype(tile.dtype)}>"
            f"(1, {nbytes // 32}, 0, 0));")

    def copy(r, c):
        if squares:
            _copy_squares(em, tile, src, r, c, stride)
            return
        em.line(f"DataCopy({tile.at()}, {tensor(em, src)}, Nd2NzParams(1, {r}, {c}, 0, "
                f"{stride}, {tile.prows}, 1, 0));")

    # InitConstValue and the copy are both MTE2 writes of the tile: the pipe does not order
    # overlapping writes by itself (PipeBarrier(ISASI).md), so a barrier separates them
    if full:
        if (tile.prows, tile.pcols) != (tile.rows, tile.cols):
            em.line(zero)  # the fractal padding must add nothing
            em.line("PipeBarrier<PIPE_MTE2>();")
        copy(rows, cols)
        return
    with em.block(""):  # a partial tile: zero it, then copy what is inside the tensor
        r, c = _valid(em, rows, cols)
        em.line(zero)
        em.line("PipeBarrier<PIPE_MTE2>();")
        with em.block(f"if ({r} > 0 && {c} > 0)"):
            copy(r, c)


@copy_rule((L0C, GM))
def copy_l0c_to_gm(em, src: Region, dst: Region, what: str) -> None:
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
        em.line(f"Fixpipe<{ctype(d)}, {ctype(s)}, CFG_ROW_MAJOR>({tensor(em, dst)}, "
                f"{tile.at()}, fp);")
        if not full:
            em.depth -= 1
            em.line("}")


def _repeats(what: str, unit: str, repeat: int, hint: str) -> None:
    """LoadData's repeatTimes is 8 bits, as the vector instructions' repeatTime."""
    if repeat > REPEAT_LIMIT:
        raise KernelError(f"{what} of {repeat} {unit} at once exceeds {REPEAT_LIMIT}; use "
                          f"{hint}")


def _load(em, dst: str, src: str, repeat: int, src_stride: int, transpose: bool) -> None:
    _repeats("LoadData", "fractals", repeat, "a smaller tile or kL0Size")
    em.line(f"LoadData({dst}, {src}, LoadData2DParams{{0, {repeat}, {src_stride}, 0, 0, "
            f"{'true' if transpose else 'false'}, 0}});")


def _load_t(em, dst: str, src: str, repeat: int, dst_gap: int, frac_gap: int) -> None:
    _repeats("LoadDataWithTranspose", "squares", repeat, "a smaller tile")
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


def mmad_m(m: int) -> int:
    """``MmadParams.m`` of an op(A) of ``m`` rows. With m == 1 A2's cube multiplies in GEMV
    mode, reading L0A as one ND row of K elements (Mmad.md, GEMV.md; only the 950 can switch
    it off with ``disableGemv``), while L0A holds op(A) as ZZ fractals padded to 16 rows: a one-row
    op(A) runs as one fractal row of 16 (the rows past the first are computed and never copied
    out, as for any m that is not a multiple of 16)."""
    return 16 if m == 1 else m


@rule(ops.GEMM_V0.name)
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
    l0a, l0b = (em.buf(b) for b in em.staging_of(call))
    kk = em.ident("kk")
    init = em.expr(call.operands["init"])
    # TPipe raised M_MTE1 id 0 on the cube core (and waits for it when it is destroyed): it
    # says "L0A/L0B are free"; each K step waits for it, loads, and raises it after its Mmad
    with em.block(f"for (int32_t {kk} = 0; {kk} < {kp // kl0}; ++{kk})"):
        em.line("WaitFlag<HardEvent::M_MTE1>(0);")
        load_a(em, a, l0a, kk, kl0, ta, what)
        load_b(em, b, l0b, kk, kl0, tb, what)
        em.line("SetFlag<HardEvent::MTE1_M>(0);")
        em.line("WaitFlag<HardEvent::MTE1_M>(0);")
        em.line(f"MmadParams mp; mp.m = {mmad_m(m)}; mp.n = {n}; mp.k = {kl0}; "
                f"mp.cmatrixInitVal = ({init}) && {kk} == 0;")
        em.line(f"Mmad({c.at()}, {l0a}, {l0b}, mp);")
        em.line("SetFlag<HardEvent::M_MTE1>(0);")


def load_l0(em, src: Region, dst: Region, transpose: bool, what: str) -> None:
    """A whole L1 tile into L0A (as op(A)) or L0B (as op(B)), transposed or not."""
    s, d = Tile(em, src, what), Tile(em, dst, what)
    if (s.rows, s.cols) != (d.rows, d.cols):
        raise KernelError(f"{what}: L1 -> L0 copies whole 2-D tiles of equal shape")
    if str(dst.buffer.scope()) == L0A:  # K is the rows of a transposed A, else its columns
        load_a(em, s, d.at(), "0", s.prows if transpose else s.pcols, transpose, what)
    else:  # K is the columns of a transposed B, else its rows
        load_b(em, s, d.at(), "0", s.pcols if transpose else s.prows, transpose, what)


@copy_rule((L1, L0A), (L1, L0B))
def copy_l1_to_l0(em, src: Region, dst: Region, what: str) -> None:
    """A whole L1 tile into L0A (as the A operand) or L0B (as the B operand), untransposed."""
    load_l0(em, src, dst, False, what)


@rule(ops.LOAD_L0.name)
def rule_load_l0(em, call) -> None:
    load_l0(em, call.operands["src"], call.operands["dst"], call.attrs["transpose"], "T.copy")


@rule(ops.MMA.name)
def rule_mma(em, call) -> None:
    a = Tile(em, call.operands["A"], "T.mma")
    b = Tile(em, call.operands["B"], "T.mma")
    c = Tile(em, call.operands["C"], "T.mma")
    init = em.expr(call.operands["init"])
    m, k = (a.cols, a.rows) if call.attrs["transpose_A"] else (a.rows, a.cols)
    n = b.rows if call.attrs["transpose_B"] else b.cols
    em.line(f"{{ MmadParams mp; mp.m = {mmad_m(m)}; mp.n = {n}; mp.k = {k}; "
            f"mp.cmatrixInitVal = {init}; Mmad({c.at()}, {a.at()}, {b.at()}, mp); }}")


@rule(ops.DUAL_FIXPIPE.name)
def rule_dual_fixpipe(em, call) -> None:
    """``T.dual_copy`` L0C -> UB on the 950: one ``Fixpipe`` of the whole L0C tile into the UB
    of both vector sub-cores (``FixpipeParamsArch3510::dualDstCtl``, 1: M split, the first
    M/2 rows to sub-core 0; 2: N split, the first N/2 columns; NZ -> ND as to GM, ``dstStride``
    the row length of each half; impl/basic_api/dav_3510/kernel_operator_fixpipe_impl.h,
    ``FixpipeL0cToUB``, requires an even M or an N that is a multiple of 32)."""
    src, dst = call.operands["src"], call.operands["dst"]
    tile = Tile(em, src, "T.dual_copy")
    d, s = str(dst.buffer.dtype), tile.dtype
    if d != s:
        raise KernelError(f"T.dual_copy: the dual-destination Fixpipe copies {s} as it is, "
                          f"not into {d}")
    ub = dst.buffer
    scope, offset, size = em.plan[ub]
    m_split = int(call.attrs["axis"]) == len(src.extents) - 2
    t = ctype(d)
    with em.block(""):  # the vector cores' tile, addressed from the cube core
        em.line(f"LocalTensor<{t}> {em.buf(ub)} = {em.memory_var(scope)}.GetWithOffset<{t}>("
                f"{size // dtype_bytes(d)}, {offset});")
        em.line(f"FixpipeParamsArch3510<CO2Layout::ROW_MAJOR> fp; fp.nSize = {tile.cols}; "
                f"fp.mSize = {tile.rows}; fp.srcStride = {tile.prows}; "
                f"fp.dstStride = {static_ints(ub.shape, em.tile_name(ub))[-1]}; "
                f"fp.dualDstCtl = {1 if m_split else 2};")
        em.line(f"Fixpipe<{t}, {t}, CFG_ROW_MAJOR>({em.buf(ub)}, {tile.at()}, fp);")
