"""The Ascend dialect calls. Each checks its operands at the user's line and emits one op."""

from __future__ import annotations

import tvm
from tilewright.language import Kernel as _PortableKernel
from tilewright.language import builder as B
from tilewright.language.buffer import (
    TileBuffer,
    as_int,
    declare,
    region_of,
    resolve,
    shape_str,
    squeeze,
    to_expr,
)
from tilewright.language.frames import BLOCK_AXES
from tvm import tirx

from ..facts import ops
from ..facts.events import (
    EVENT_IDS,
    EVENTS,
    PIPES,
    TPIPE_IDS,
    USER_IDS,
    event_cores,
    event_name,
)
from ..facts.instructions import CAST_MODES, VECTOR_DTYPES, cast_mode, computes
from ..facts.keys import ADDRESS_KEY, NPU_KEY, SCOPE_KEY, VID_TAG
from ._emit import emit, error, span
from .trees import ADAPTER, claim


class Kernel(_PortableKernel):
    """``with T.Kernel(n, is_npu=True) as (cid, vid):`` — one AI core group (1 AIC + 2 AIV).

    ``cid`` is the block on the 1-D core grid; ``vid`` (0 or 1) the vector sub-core.
    """

    KEYWORDS = ("threads", "prelude", "is_npu")

    def __init__(self, *grid, is_npu=False, threads=None, **options):
        if not is_npu:
            raise error("Ascend kernels are written 'with T.Kernel(n, is_npu=True) as (cid, "
                        "vid)'; import tilewright.language for portable kernels")
        if len(grid) != 1:
            raise error(f"Ascend grids are 1-D, got {len(grid)} dimensions: use T.Kernel(m * n, "
                        "is_npu=True) and recover 2-D tiles with cid // n and cid % n")
        if threads is not None:
            raise error("T.Kernel(..., is_npu=True) takes no threads=: an AI core has no "
                        "thread block")
        super().__init__(grid[0], threads=1, **options)
        self.vars = (tirx.Var("cid", "int32"), tirx.Var("vid", "int32"))

    def __enter__(self):
        out = super().__enter__()
        self._span = span()  # the user's line, not this module's
        claim(ADAPTER, "Kernel")
        return out

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.Kernel")
        body = builder.close(self._frame)
        if exc_type is not None:
            return False
        cid, vid = self.vars
        body = tirx.For(vid, 0, 2, tirx.ForKind.THREAD_BINDING, body,
                        thread_binding=tirx.IterVar(tvm.ir.Range(0, 2), vid,
                                                    tirx.IterVar.ThreadIndex, VID_TAG),
                        span=self._span)
        annotations = {"tw.threads": [1, 1, 1], NPU_KEY: True,
                       **builder.kernel_annotations}
        extent = to_expr(self.grid[0])
        iv = tirx.IterVar(tvm.ir.Range(0, extent), cid, tirx.IterVar.ThreadIndex, BLOCK_AXES[0])
        builder.emit(tirx.For(cid, 0, extent, tirx.ForKind.THREAD_BINDING, body,
                              thread_binding=iv, annotations=annotations, span=self._span))
        return False


class Scope:
    """``with T.Scope("C"):`` cube-core code; ``with T.Scope("V"):`` vector-core code."""

    def __init__(self, kind: str):
        if kind not in ("C", "V"):
            raise error(f"T.Scope takes 'C' (cube core) or 'V' (vector core), got {kind!r}")
        self.kind = kind

    def __enter__(self):
        builder = B.current("T.Scope")
        if not builder.in_kernel():
            raise error("T.Scope must be used inside 'with T.Kernel(...)'")
        if builder.enclosing("ascend_scope") is not None:
            raise error("T.Scope blocks cannot be nested")
        claim(ADAPTER, "Scope")
        self._span = span()
        self._frame = builder.open("ascend_scope")

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.Scope")
        body = builder.close(self._frame)
        if exc_type is None:
            builder.emit(tirx.AttrStmt(tirx.IntImm("int32", 0), SCOPE_KEY,
                                       tvm.ir.StringImm(self.kind), body, span=self._span))
        return False


# -- allocation ------------------------------------------------------------------------------
def allocate(shape, dtype, scope: str, what: str, name: str | None = None) -> TileBuffer:
    """A tile in the Ascend memory ``scope``, its allocation at the user's line."""
    builder = B.current(what)
    if not builder.in_kernel():
        raise error(f"{what} must be used inside 'with T.Kernel(...)'")
    if builder.enclosing("parallel") is not None:
        raise error(f"{what} inside a T.Parallel loop: allocate before the loop")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(name or f"{scope.split('.')[-1]}_{n}", shape, dtype, scope)
    builder.emit(tirx.AllocBuffer(buf, span=span()))
    return TileBuffer(buf)


def _alloc(shape, dtype, scope: str, what: str) -> TileBuffer:
    claim(ADAPTER, what.removeprefix("T."))
    return allocate(shape, dtype, scope, what)


def alloc_L1(shape, dtype):
    """A tile in L1, the cube core's staging memory (512 KiB)."""
    return _alloc(shape, dtype, "ascend.l1", "T.alloc_L1")


def alloc_L0A(shape, dtype):
    """A tile in L0A, the cube's left operand memory (64 KiB)."""
    return _alloc(shape, dtype, "ascend.l0a", "T.alloc_L0A")


def alloc_L0B(shape, dtype):
    """A tile in L0B, the cube's right operand memory (64 KiB)."""
    return _alloc(shape, dtype, "ascend.l0b", "T.alloc_L0B")


def alloc_L0C(shape, dtype):
    """A tile in L0C, the cube's accumulator memory (128 KiB)."""
    return _alloc(shape, dtype, "ascend.l0c", "T.alloc_L0C")


def alloc_ub(shape, dtype):
    """A tile in the vector core's unified buffer (192 KiB)."""
    return _alloc(shape, dtype, "ascend.ub", "T.alloc_ub")


def annotate_address(mapping: dict):
    """Place buffers at fixed byte offsets in their memory: ``{buf: offset}``."""
    builder = B.current("T.annotate_address")
    claim(ADAPTER, "annotate_address")
    table = dict(builder.kernel_annotations.get(ADDRESS_KEY, {}))
    for buf, offset in mapping.items():
        if not isinstance(buf, TileBuffer) or buf.scope == "global":
            raise error("T.annotate_address maps on-chip buffers (T.alloc_*) to byte offsets")
        if not isinstance(offset, int) or offset < 0:
            raise error(f"T.annotate_address: offset of {buf.name!r} must be a non-negative int")
        table[buf.name] = offset
    builder.kernel_annotations[ADDRESS_KEY] = table


# -- synchronisation -------------------------------------------------------------------------
def _pipe(name, what: str) -> str:
    key = str(name).lower().removeprefix("pipe_")
    if key not in PIPES:
        raise error(f"{what}: unknown pipe {name!r}; pipes are {', '.join(PIPES)}")
    return key


def _event(src, dst, event_id, what: str):
    s, d = _pipe(src, what), _pipe(dst, what)
    event = event_name(s, d)
    if not event_cores(event):
        raise error(f"{what}: there is no hardware event {event} on A2/A3; the cube core has "
                    f"{', '.join(sorted(EVENTS['AIC']))}; the vector cores have "
                    f"{', '.join(sorted(EVENTS['AIV']))}")
    value = as_int(event_id)
    if isinstance(value, int):
        if value in range(USER_IDS, EVENT_IDS):
            raise error(f"{what}: event id {value} is reserved (6 for the system, 7 for TPipe's "
                        f"automatic synchronisation); kernels use ids 0-{USER_IDS - 1}")
        if not 0 <= value < EVENT_IDS:
            raise error(f"{what}: event id {value} is out of range; A2/A3 have ids "
                        f"0-{USER_IDS - 1} per event for kernels")
        for (core, held), ids in TPIPE_IDS.items():
            if held == event and value in ids:
                raise error(f"{what}: {event} ids {ids[0]}-{ids[-1]} are held by TPipe on the "
                            f"{core} (its constructor sets them and its destructor waits for "
                            "them; a second set is undefined behaviour); use another id")
    return s, d, to_expr(event_id)


def emit_flag(kind: str, src, dst, event_id, what: str) -> None:
    """Emit a ``set`` or ``wait`` of the hardware event SRC_DST with ``event_id`` (checked at
    the user's line; ``what`` names the call in messages)."""
    s, d, eid = _event(src, dst, event_id, what)
    op = ops.SET_FLAG if kind == "set" else ops.WAIT_FLAG
    emit(op.name, {"event_id": eid}, {"src": s, "dst": d})


def set_flag(src, dst, event_id=0):
    """``T.set_flag("mte2", "v", id)``: after the SRC pipe's earlier work, raise the flag."""
    claim(ADAPTER, "set_flag")
    emit_flag("set", src, dst, event_id, "T.set_flag")


def wait_flag(src, dst, event_id=0):
    """``T.wait_flag("mte2", "v", id)``: the DST pipe waits for the flag, then clears it."""
    claim(ADAPTER, "wait_flag")
    emit_flag("wait", src, dst, event_id, "T.wait_flag")


def emit_pipe_barrier(pipe, what: str) -> None:
    """Emit a barrier of one pipe (not ``all``), checked at the user's line."""
    p = _pipe(pipe, what)
    if p == "s":
        raise error(f"{what}('s') is a hardware error on Ascend; the scalar pipe is in order "
                    "already")
    emit(ops.PIPE_BARRIER.name, {}, {"pipe": p})


def emit_barrier_all() -> None:
    """Emit a barrier of every pipe of the core."""
    emit(ops.BARRIER_ALL.name, {})


def pipe_barrier(pipe):
    """``T.pipe_barrier("v")``: order the instructions of one pipe."""
    claim(ADAPTER, "pipe_barrier")
    if str(pipe).lower().removeprefix("pipe_") == "all":
        return barrier_all()
    emit_pipe_barrier(pipe, "T.pipe_barrier")


def barrier_all():
    """Wait until every instruction issued so far on this core has finished."""
    claim(ADAPTER, "barrier_all")
    emit_barrier_all()


def _cross_id(flag_id, what):
    claim(ADAPTER, what.removeprefix("T."))
    value = as_int(flag_id)
    if isinstance(value, int) and not 0 <= value <= 10:
        raise error(f"{what}: cross-core flag id {value} is out of range 0-10")
    return to_expr(flag_id)


def set_cross_flag(pipe, flag_id, mode=2):
    """Cube/vector handoff: after PIPE's earlier work, count up cross-core flag ``flag_id``."""
    emit(ops.SET_CROSS_FLAG.name, {"event_id": _cross_id(flag_id, "T.set_cross_flag")},
         {"pipe": _pipe(pipe, "T.set_cross_flag"), "mode": int(mode)})


def wait_cross_flag(flag_id):
    """Block until cross-core flag ``flag_id`` was counted up by the other core type."""
    emit(ops.WAIT_CROSS_FLAG.name, {"event_id": _cross_id(flag_id, "T.wait_cross_flag")})


# -- cube ------------------------------------------------------------------------------------
def _matrix(value, what: str, scopes: tuple, hint: str):
    claim(ADAPTER, what.removeprefix("T.").split()[0])
    region = resolve(region_of(value, what), None, what)
    scope = str(region.buffer.scope())
    if scope not in scopes:
        raise error(f"{what}: {region.buffer.name!r} is in {scope}; it must be {hint}")
    extents = list(region.extents)  # a one-row (GEMV) tile keeps its unit dimension
    dims = [*squeeze(extents[:-2]), *extents[-2:]]
    if len(dims) != 2:
        raise error(f"{what}: {region.buffer.name!r} must be a 2-D tile, got "
                    f"{shape_str(region.extents)}")
    return region, [as_int(d) for d in dims]


def _mkn(a, b, c, ta, tb, what):
    (a0, a1), (b0, b1), (c0, c1) = a[1], b[1], c[1]
    m, ka = (a1, a0) if ta else (a0, a1)
    kb, n = (b1, b0) if tb else (b0, b1)
    if ka != kb:
        raise error(f"{what}: K mismatch, A gives {ka} and B gives {kb}")
    if (m, n) != (c0, c1):
        raise error(f"{what}: op(A) @ op(B) is ({m}, {n}) but C is ({c0}, {c1})")
    return m, n, ka


def gemm_v0(A, B, C, transpose_A=False, transpose_B=False, init=False, kL0Size=128,
            n_actual=None):
    """C (L0C) = [C +] op(A) @ op(B) with A, B in L1; moves L1 -> L0A/L0B in K steps of
    ``kL0Size``. ``init`` (for example ``k == 0``) overwrites C instead of accumulating."""
    a = _matrix(A, "T.gemm_v0 A", ("ascend.l1",), "in L1 (T.alloc_L1)")
    b = _matrix(B, "T.gemm_v0 B", ("ascend.l1",), "in L1 (T.alloc_L1)")
    c = _matrix(C, "T.gemm_v0 C", ("ascend.l0c",), "in L0C (T.alloc_L0C)")
    if n_actual is not None:
        raise error("T.gemm_v0: n_actual is not supported by this backend; use full tiles")
    k = _mkn(a, b, c, transpose_A, transpose_B, "T.gemm_v0")[2]
    if k % min(int(kL0Size), k):
        raise error(f"T.gemm_v0: K = {k} is not a multiple of kL0Size = {kL0Size}")
    emit(ops.GEMM_V0.name, {"A": a[0], "B": b[0], "C": c[0], "init": to_expr(init, "bool")},
         {"transpose_A": bool(transpose_A), "transpose_B": bool(transpose_B),
          "kL0Size": int(min(int(kL0Size), k))})


def mma(A, B, C, init=False):
    """One cube MMAD: C (L0C) = [C +] A (L0A) @ B (L0B)."""
    a = _matrix(A, "T.mma A", ("ascend.l0a",), "in L0A (T.alloc_L0A)")
    b = _matrix(B, "T.mma B", ("ascend.l0b",), "in L0B (T.alloc_L0B)")
    c = _matrix(C, "T.mma C", ("ascend.l0c",), "in L0C (T.alloc_L0C)")
    _mkn(a, b, c, False, False, "T.mma")
    emit(ops.MMA.name, {"A": a[0], "B": b[0], "C": c[0], "init": to_expr(init, "bool")})


# -- vector ----------------------------------------------------------------------------------
def _ub(value, what: str):
    claim(ADAPTER, what.removeprefix("T."))
    region = resolve(region_of(value, what), None, what)
    if str(region.buffer.scope()) != "ascend.ub":
        raise error(f"{what}: {region.buffer.name!r} is in {region.buffer.scope()}; vector "
                    "operands live in UB (T.alloc_ub)")
    return region


def _computes(instruction: str, region, what: str) -> None:
    dtype = str(region.buffer.dtype)
    if not computes(instruction, dtype):
        raise error(f"{what}: A2's vector unit computes {instruction} on "
                    f"{', '.join(sorted(VECTOR_DTYPES[instruction]))}, not {dtype} "
                    f"({region.buffer.name!r}); convert with T.tile.cast first")


def _same_shape(regions, what):
    shapes = [[as_int(e) for e in squeeze(r.extents)] for r in regions]
    if any(s != shapes[0] for s in shapes[1:]):
        names = ", ".join(f"{r.buffer.name} {shape_str(r.extents)}" for r in regions)
        raise error(f"{what}: operand shapes differ: {names}")


class _Tile:
    """``T.tile.add(dst, src0, src1)``, ``T.tile.exp(dst, src)``, ``T.tile.adds(dst, src, x)``,
    ``T.tile.fill(dst, x)``, ``T.tile.cast(dst, src)``: vector instructions on UB tiles."""

    def __init__(self):
        for name in ops.BINARY:
            setattr(self, name, self._binary(name))
        for name in ops.UNARY:
            setattr(self, name, self._unary(name))
        for name in ops.SCALAR:
            setattr(self, name, self._scalar(name))

    @staticmethod
    def _binary(name):
        def op(dst, src0, src1):
            what = f"T.tile.{name}"
            regions = [_ub(dst, what), _ub(src0, what), _ub(src1, what)]
            _same_shape(regions, what)
            _computes(ops.BINARY[name], regions[0], what)
            emit(f"ascend.tile.{name}", dict(zip(("dst", "src0", "src1"), regions)))
        op.__name__ = name
        return op

    @staticmethod
    def _unary(name):
        def op(dst, src):
            what = f"T.tile.{name}"
            regions = [_ub(dst, what), _ub(src, what)]
            _same_shape(regions, what)
            if ops.UNARY[name] in VECTOR_DTYPES:
                _computes(ops.UNARY[name], regions[0], what)
            emit(f"ascend.tile.{name}", dict(zip(("dst", "src"), regions)))
        op.__name__ = name
        return op

    @staticmethod
    def _scalar(name):
        def op(dst, src, scalar):
            what = f"T.tile.{name}"
            regions = [_ub(dst, what), _ub(src, what)]
            _same_shape(regions, what)
            _computes(ops.SCALAR[name], regions[0], what)
            value = to_expr(scalar, str(regions[0].buffer.dtype))
            emit(f"ascend.tile.{name}", {"dst": regions[0], "src": regions[1],
                                         "scalar": value})
        op.__name__ = name
        return op

    @staticmethod
    def fill(dst, value):
        region = _ub(dst, "T.tile.fill")
        _computes("Duplicate", region, "T.tile.fill")
        emit(ops.FILL.name, {"dst": region, "value": to_expr(value, str(region.buffer.dtype))})

    @staticmethod
    def cast(dst, src, round_mode=None):
        """``T.tile.cast(dst, src[, round_mode])``: the rounding mode defaults to a TIR cast's
        (truncation to integers, round to nearest even when narrowing)."""
        regions = [_ub(dst, "T.tile.cast"), _ub(src, "T.tile.cast")]
        _same_shape(regions, "T.tile.cast")
        pair = (str(regions[1].buffer.dtype), str(regions[0].buffer.dtype))
        modes = CAST_MODES.get(pair)
        if modes is None:
            raise error(f"T.tile.cast: A2's Cast does not convert {pair[0]} to {pair[1]}; "
                        "convert through float32 or float16")
        mode = cast_mode(*pair) if round_mode is None else str(round_mode)
        if mode not in modes:
            raise error(f"T.tile.cast: A2's Cast from {pair[0]} to {pair[1]} takes "
                        f"{', '.join(modes)}, not {mode}")
        emit(ops.CAST.name, {"dst": regions[0], "src": regions[1]}, {"round": mode})


tile = _Tile()


# -- debugging -------------------------------------------------------------------------------
def printf(format_str: str, *args):
    """``T.printf("cid:%d\\n", cid)``: print from the AI core (%d %i %u %f %x %s %p; each
    argument a 64-bit slot, see rules/debug.py)."""
    if not isinstance(format_str, str):
        raise error("T.printf takes a format string first")
    emit(ops.PRINTF.name, {"args": ops.pack([to_expr(a) for a in args])}, {"format": format_str})


def dump_tensor(tensor, desc: int, dump_size: int, shape_info: tuple = ()):
    """Print ``dump_size`` elements of a tile (UB, L1, L0C or GM) under a header with ``desc``."""
    region = resolve(region_of(tensor, "T.dump_tensor"), None, "T.dump_tensor")
    if not isinstance(desc, int) or not 0 <= desc < 2**32:
        raise error("T.dump_tensor: desc must be a uint32")
    emit(ops.DUMP_TENSOR.name, {"src": region},
         {"desc": desc, "dump_size": int(dump_size),
          "shape": ",".join(str(int(s)) for s in shape_info)})


__all__ = ["Kernel", "Scope", "alloc_L0A", "alloc_L0B", "alloc_L0C", "alloc_L1", "alloc_ub",
           "annotate_address", "barrier_all", "dump_tensor", "gemm_v0", "mma",
           "pipe_barrier", "printf", "set_cross_flag", "set_flag", "tile", "wait_cross_flag",
           "wait_flag"]
