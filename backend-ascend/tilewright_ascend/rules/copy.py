"""``T.copy`` by data path (:mod:`..facts.paths`), GM <-> UB copies with bounds, and atomics.

GM <-> UB copies that may run past the tensor's end, or whose rows are not whole 32-byte
blocks, are ``DataCopyPad`` with the valid rows and columns computed at run time; the others
are ``DataCopy`` of whole blocks. Atomics set the MTE3 atomic mode around the UB -> GM copy.
The cube paths are in :mod:`.cube`.
"""

from __future__ import annotations

import tvm
from tilewright.errors import KernelError
from tilewright.ir import Region
from tvm import tirx

from ..facts.arch import ALIGN, short
from ..facts.dtypes import ctype, dtype_bytes
from ..facts.paths import GM, PATHS, UB
from .regions import blocks, offset_of, row_set, split_outer, tensor, view
from .table import COPY_RULES, copy_rule, rule


@rule("copy")
def rule_copy(em, call) -> None:
    src, dst = call.operands["src"], call.operands["dst"]
    key = (str(src.buffer.scope()), str(dst.buffer.scope()))
    what = f"T.copy {em.tile_name(src.buffer)} -> {em.tile_name(dst.buffer)}"
    fn = COPY_RULES.get(key)
    if fn is None:
        paths = ", ".join(f"{short(s)}->{short(d)}" for s, d in PATHS)
        raise KernelError(f"{what}: no Ascend data path from {short(key[0])} to "
                          f"{short(key[1])} (paths: {paths}; cube and vector cores meet only "
                          "in GM)")
    copy_in_parts(em, src, dst, fn, what)


def copy_in_parts(em, src: Region, dst: Region, fn, what: str) -> None:
    """``fn(em, src, dst, what)``, or, where a region is not one set of equally spaced rows
    (a 3-D tile of a larger tensor), a loop of such copies over its outermost dimension
    (:func:`.regions.split_outer`): each copy one instruction with its own block parameters."""
    split = src if not row_set(src) else dst if not row_set(dst) else None
    if split is None:
        fn(em, src, dst, what)
        return
    index = tirx.Var("p", "int32")
    parts = split_outer(split, dst if split is src else src, index)
    if parts is None:
        view(em, split)  # names the region that cannot be copied
    count, part, other = parts
    em.analyzer.bind(index, tvm.ir.Range.from_min_extent(0, count))
    v = em.var(index)
    with em.block(f"for (int32_t {v} = 0; {v} < {count}; ++{v})"):
        if split is src:
            copy_in_parts(em, part, other, fn, what)
        else:
            copy_in_parts(em, other, part, fn, what)


@copy_rule((GM, UB), (UB, GM))
def copy_gm_ub(em, src: Region, dst: Region, what: str) -> None:
    if not pad_copy(em, src, dst, what):
        data_copy(em, src, dst, what)


@copy_rule((UB, UB))
def data_copy(em, src: Region, dst: Region, what: str) -> None:
    eb = dtype_bytes(str(src.buffer.dtype))
    if str(src.buffer.dtype) != str(dst.buffer.dtype):
        raise KernelError(f"{what}: {em.tile_name(src.buffer)} is {src.buffer.dtype} but "
                          f"{em.tile_name(dst.buffer)} is {dst.buffer.dtype}; DataCopy does not "
                          "convert (use T.tile.cast in UB)")
    sr, sc, ss = view(em, src)
    dr, dc, ds = view(em, dst)
    if sr * sc != dr * dc:
        raise KernelError(f"{what}: {sr}x{sc} elements do not fit {dr}x{dc}")
    if sc != dc and not (sr == 1 or dr == 1):
        raise KernelError(f"{what}: row lengths differ ({sc} vs {dc})")
    if (sr == 1 or sc == ss) and (dr == 1 or dc == ds):
        count = sr * sc
        blocks(count * eb, what)
        em.line(f"DataCopy({tensor(em, dst)}, {tensor(em, src)}, {count});")
        return
    blen = blocks(sc * eb, what)
    sgap = blocks((ss - sc) * eb, what)
    dgap = blocks((ds - dc) * eb, what)
    em.line(f"DataCopy({tensor(em, dst)}, {tensor(em, src)}, "
            f"DataCopyParams({sr}, {blen}, {sgap}, {dgap}));")


def _bind_grid(em):
    if getattr(em, "_tw_grid_bound", False):
        return
    loop = em.func.body
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING:
        try:
            em.analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
        except Exception:  # noqa: BLE001 - already bound
            pass
        loop = loop.body
    em._tw_grid_bound = True


def _valid(em, start, extent: int, dim) -> str | None:
    """The valid extent of a GM region dimension as C, or None when it is always whole."""
    end = tirx.const(0, "int32") + start + extent
    if em.analyzer.can_prove(end <= dim):
        return None
    return em.expr(tirx.Min(tirx.const(extent, "int32"), dim - start))


def pad_copy(em, src: Region, dst: Region, what: str, atomic: str | None = None) -> bool:
    """A GM <-> UB copy by DataCopyPad; returns False when plain DataCopy does (in bounds,
    whole blocks, no atomic)."""
    to_ub = str(src.buffer.scope()) == "global"
    gm, ub = (src, dst) if to_ub else (dst, src)
    if str(gm.buffer.dtype) != str(ub.buffer.dtype):
        raise KernelError(f"{what}: DataCopy does not convert {gm.buffer.dtype} to "
                          f"{ub.buffer.dtype}")
    _bind_grid(em)
    eb = dtype_bytes(str(ub.buffer.dtype))
    grows, gcols, gstride = view(em, gm)
    urows, ucols, ustride = view(em, ub)
    if grows * gcols != urows * ucols:
        raise KernelError(f"{what}: {grows}x{gcols} elements do not fit {urows}x{ucols}")
    shape = list(gm.buffer.shape)
    exts = [int(e) for e in gm.extents]
    outer = [d for d in range(len(exts) - 1) if exts[d] > 1]
    checks = []
    for d in range(len(exts) - 1):
        if exts[d] == 1 and not em.analyzer.can_prove(gm.starts[d] < shape[d]):
            checks.append(em.expr(gm.starts[d] < shape[d]))
    cols = _valid(em, gm.starts[-1], exts[-1], shape[-1])
    rows = _valid(em, gm.starts[outer[-1]], exts[outer[-1]], shape[outer[-1]]) \
        if len(outer) == 1 else None
    if len(outer) > 1 and not all(em.analyzer.can_prove(
            tirx.const(0, "int32") + gm.starts[d] + exts[d] <= shape[d]) for d in outer):
        raise KernelError(f"{what}: a region of more than two dimensions must lie inside the "
                          "tensor")
    if gcols != ucols and not (grows == 1 or urows == 1):
        raise KernelError(f"{what}: row lengths differ ({gcols} vs {ucols})")
    if gcols != ucols:  # one side is a single row: both must be dense
        if not ((grows == 1 or (isinstance(gstride, int) and gcols == gstride)) and
                (urows == 1 or ucols == ustride)):
            raise KernelError(f"{what}: cannot pair rows of {gcols} with rows of {ucols}")
        if rows is not None:  # the valid GM rows are contiguous: as many whole rows of one row
            if cols is not None:
                raise KernelError(f"{what}: a region cut short in both dimensions cannot pair "
                                  f"rows of {gcols} with rows of {ucols}")
            rows, cols = None, f"({rows}) * {gcols}"
        total = grows * gcols
        grows, gcols, gstride = 1, total, total
        urows, ucols, ustride = 1, total, total
    whole = cols is None and rows is None and not checks
    if whole and atomic is None and gcols * eb % ALIGN == 0 and \
            (grows == 1 or (gstride * eb % ALIGN == 0 and ustride * eb % ALIGN == 0)):
        return False
    if urows > 1 and ustride * eb % ALIGN:
        raise KernelError(f"{what}: UB rows of {em.tile_name(ub.buffer)} are {ustride * eb} bytes "
                          f"apart, not a multiple of {ALIGN}")
    t = ctype(str(ub.buffer.dtype))
    nr, nc = em.ident("tw_rows"), em.ident("tw_cols")
    gm_t, ub_t = (f"{em.buf(gm.buffer)}[{offset_of(em, gm)}]",
                  f"{em.buf(ub.buffer)}[{offset_of(em, ub)}]")
    with em.block(""):
        em.line(f"int32_t {nr} = {rows or grows};")
        em.line(f"int32_t {nc} = {cols or gcols};")
        cond = " && ".join([f"{nr} > 0", f"{nc} > 0", *checks])
        with em.block(f"if ({cond})"):
            gap = f"({ustride * eb} - ({nc} * {eb} + 31) / 32 * 32) / 32" if urows > 1 else "0"
            gs = gstride if isinstance(gstride, int) else em.expr(gstride)
            ggap = f"({gs} - {nc}) * {eb}" if grows > 1 else "0"
            if to_ub:
                # the lanes up to each row's 32-byte boundary are padded with 0: without
                # padding the hardware fills them with the row's first element
                # (DataCopyPad（GMToUB非对齐数据搬运）.md), which a whole-row op would read
                pad = f"(32 - {nc} * {eb} % 32) % 32 / {eb}" if eb < ALIGN else "0"
                em.line(f"DataCopyPad({ub_t}, {gm_t}, DataCopyExtParams({nr}, {nc} * {eb}, "
                        f"{ggap}, {gap}, 0), DataCopyPadExtParams<{t}>(true, 0, {pad}, 0));")
            else:
                if atomic:
                    em.line(f"SetAtomic{atomic}<{t}>();")
                em.line(f"DataCopyPad({gm_t}, {ub_t}, DataCopyExtParams({nr}, {nc} * {eb}, "
                        f"{gap}, {ggap}, 0));")
                if atomic:
                    em.line("SetAtomicNone();")
    return True


def _make_atomic_rule(kind: str):
    def rule(em, call):
        dst, src = call.operands["dst"], call.operands["src"]
        if not isinstance(src, Region) or str(src.buffer.scope()) != "ascend.ub" or \
                str(dst.buffer.scope()) != "global":
            raise KernelError(f"T.atomic_{kind}: backend 'ascend' adds a UB tile into global "
                              "memory (SetAtomic + DataCopy on MTE3)")
        pad_copy(em, src, dst, f"T.atomic_{kind} {em.tile_name(src.buffer)} -> "
                 f"{em.tile_name(dst.buffer)}",
                 atomic=kind.capitalize())

    rule.__name__ = f"rule_atomic_{kind}"
    return rule


for _kind in ("add", "max", "min"):
    rule(f"atomic_{_kind}")(_make_atomic_rule(_kind))
