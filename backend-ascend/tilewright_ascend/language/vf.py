"""The vector-function scopes of the mainline dialect: ``T.SimtVF`` and ``T.SimdVF`` with
``T.simd.*``.

``with T.SimtVF(threads=N):`` is a SIMT vector function of ``N`` threads, as in TileLang
mainline: its ``T.Parallel`` nests are spread over the threads and ``T.get_thread_binding()``
is the thread's index (:mod:`..transforms.simt` lowers it, the barriers between threads
included). The scope is the statement ``AttrStmt(tid, SIMT_KEY, N, body)``.

``with T.SimdVF():`` holds register-level code over 2048-bit vector registers
(:data:`..facts.arch.ARCHS`: 64 float32 or 128 float16 lanes): ``mask = T.simd.pset(32)``,
``r = T.simd.vld(a[i * 64])``, ``T.simd.vadd(r, s, mask)`` ..., ``T.simd.vsts(c[i * 64], r,
mask)``. A register is the value of its lanes as an expression of the lane; each ``vsts``
becomes one ``T.Parallel`` nest over the register's lanes storing that expression, which the
vector path lowers to vector instructions. Masks are whole registers (``pset`` of the
element width); a mask of another width than its operands is an error.

Both scopes take the ``latency=`` scheduling hint (cycles) and check it.
"""

from __future__ import annotations

import builtins as py
from dataclasses import dataclass

import tvm
from tilewright.errors import KernelError
from tilewright.language import (
    Parallel,
    alloc_shared,
    exp,
    if_then_else,
    log,
    reduce_max,
    reduce_min,
    reduce_sum,
    sqrt,
)
from tilewright.language import abs as abs_
from tilewright.language import builder as B
from tilewright.language import max as max_
from tilewright.language import min as min_
from tilewright.language.buffer import TileBuffer
from tvm import sym, tirx

from ..facts.arch import ARCHS
from ..facts.dtypes import dtype_bytes
from ..facts.keys import SIMT_KEY
from ..facts.simt import MAX_THREADS
from ._emit import error, span
from .trees import MAINLINE, claim

REGISTER_BYTES = ARCHS[MAINLINE.target].vector_bits // 8
_SIMPLIFY = sym.Analyzer()


def _latency(latency, what: str) -> None:
    if latency is not None and (not isinstance(latency, py.int) or latency <= 0):
        raise error(f"{what}: latency= is a positive number of cycles, got {latency!r}")


class _Scope:
    kind = ""
    what = ""

    def __enter__(self):
        builder = B.current(self.what)
        if not builder.in_kernel():
            raise error(f"{self.what} must be used inside 'with T.Kernel(...)'")
        if builder.enclosing("ascend_simt", "ascend_simd") is not None:
            raise error(f"{self.what} cannot be nested in another vector-function scope")
        claim(MAINLINE, self.what.removeprefix("T.").split("(")[0])
        self._frame = builder.open(self.kind)

    def __exit__(self, exc_type, exc, tb):
        builder = B.current(self.what)
        body = builder.close(self._frame)
        if exc_type is None:
            builder.emit(self.wrap(body))
        return False

    def wrap(self, body):
        return body


class SimtVF(_Scope):
    """``with T.SimtVF(threads=N):`` a SIMT vector function holding ``T.Parallel`` nests."""

    kind, what = "ascend_simt", "T.SimtVF"

    def __init__(self, threads=128, latency=None):
        if not isinstance(threads, py.int) or not 0 < threads <= MAX_THREADS:
            raise error(f"T.SimtVF: threads= is 1 to {MAX_THREADS}, got {threads!r}")
        _latency(latency, "T.SimtVF")
        self.threads = threads
        self.tid = tirx.Var("tid", "int32")

    def __enter__(self):
        self._span = span()  # the user's line of the scope
        super().__enter__()
        self._frame.info["tid"] = self.tid

    def wrap(self, body):
        return tirx.AttrStmt(self.tid, SIMT_KEY, tirx.const(self.threads, "int32"), body,
                             span=self._span)


class SimdVF(_Scope):
    """``with T.SimdVF():`` register-level SIMD code with ``T.simd.*``."""

    kind, what = "ascend_simd", "T.SimdVF"

    def __init__(self, latency=None):
        _latency(latency, "T.SimdVF")


def get_thread_binding(dim=0):
    """``T.get_thread_binding()``: the index of the running thread of the enclosing
    ``T.SimtVF`` (0 to ``threads - 1``; the threads are one-dimensional, ``dim`` is 0)."""
    frame = B.current("T.get_thread_binding").enclosing("ascend_simt")
    if frame is None:
        raise error("T.get_thread_binding() is the thread index of a SIMT vector function: "
                    "use it inside 'with T.SimtVF(threads=N):'")
    if dim != 0:
        raise error(f"T.get_thread_binding({dim!r}): the threads of T.SimtVF are "
                    "one-dimensional, the only dimension is 0")
    return frame.info["tid"]


@dataclass(frozen=True)
class Mask:
    """A predicate over the lanes of registers of ``bits``-bit elements (all lanes)."""

    bits: int


@dataclass(frozen=True)
class Register:
    """A vector register: ``lane(l)`` is the value of lane ``l``; ``dtype`` its elements."""

    lane: object
    dtype: str

    @property
    def lanes(self) -> int:
        return REGISTER_BYTES // dtype_bytes(self.dtype)


def _in_simd(what: str):
    builder = B.current(what)
    if builder.enclosing("ascend_simd") is None:
        raise error(f"{what} is a register instruction: use it inside 'with T.SimdVF():'")
    return builder


def _address(ref, what: str):
    """The buffer and element indices of ``a[i * 64]`` (a UB tile element)."""
    if not isinstance(ref, tvm.ir.TensorLoad) or str(ref.source.scope()) != "ascend.ub":
        raise error(f"{what} takes one element of a UB tile (T.alloc_shared) as its address, "
                    f"like a[i * 64]; got {ref!r}")
    return ref.source, list(ref.indices)


def _lane_index(indices, lane):
    return [*indices[:-1], indices[-1] + lane]


def _check_span(buf, indices, lanes: int, what: str) -> None:
    last = buf.shape[-1]
    start = indices[-1]
    if isinstance(last, tirx.IntImm) and isinstance(start, tirx.IntImm) and \
            int(start) + lanes > int(last):
        raise error(f"{what}: {lanes} lanes from element {int(start)} run past the last "
                    f"dimension of {buf.name!r} ({int(last)})")


def _checked(reg: Register, what: str) -> Register:
    """``reg`` once its lane 0 builds: an error there (a float function of integers) is
    reported at the user's call of ``what``."""
    try:
        reg.lane(0)
    except KernelError as exc:
        raise error(f"{what}: {exc.message}") from None
    return reg


def _store_lanes(lanes: int, store) -> None:
    """A ``T.Parallel`` nest over ``lanes`` lanes running ``store(lane)``, at the user's line
    (the core would give it this module's)."""
    builder = B.current("T.simd")
    for lane in Parallel(lanes).run(("lane",)):
        store(lane)
    stmts = builder.frames[-1].stmts
    loop = stmts[-1]
    stmts[-1] = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                         annotations=loop.annotations, span=span())


def _even(lane, value, zero, odd: int):
    """Lane ``lane`` of a register whose lanes ``2 * i + odd`` hold ``value(i)`` and the
    others zero; the parity is decided here when the index's simplified form shows it
    (``2 * l``), so a register packed and unpacked again is indexed by ``l``."""
    parity = _SIMPLIFY.simplify(tirx.const(0, "int32") + lane % 2)
    half = _SIMPLIFY.simplify(tirx.const(0, "int32") + lane // 2)
    if isinstance(parity, tirx.IntImm):
        return value(half) if parity.value == odd else zero
    return if_then_else(parity == odd, value(half), zero)


def _mask(mask, regs, what: str) -> None:
    if not isinstance(mask, Mask):
        raise error(f"{what} takes a mask from T.simd.pset(...) last, got {mask!r}")
    for reg in regs:
        bits = 8 * dtype_bytes(reg.dtype)
        if mask.bits != bits:
            raise error(f"{what}: the mask is for {mask.bits}-bit lanes but the register "
                        f"holds {reg.dtype} ({bits}-bit lanes); use T.simd.pset({bits})")


def _register(value, what: str) -> Register:
    if not isinstance(value, Register):
        raise error(f"{what} takes registers (from T.simd.vld or another T.simd op), got "
                    f"{value!r}")
    return value


def _operands(what: str, values, mask) -> list[Register]:
    """The registers of an instruction called inside ``T.SimdVF``, checked against ``mask``."""
    _in_simd(what)
    regs = [_register(v, what) for v in values]
    _mask(mask, regs, what)
    return regs


def _named(op, name: str):
    op.__name__ = name
    return op


def _same_type(regs, what: str) -> str:
    dtypes = {r.dtype for r in regs}
    if len(dtypes) != 1:
        raise error(f"{what}: the registers hold different types ({', '.join(sorted(dtypes))})")
    return dtypes.pop()


# The computing instructions of T.simd: name (the arch-3510 builtin the vendor's C API calls,
# impl/c_api/instr_impl/npu_arch_3510/vector_compute_impl) -> (form, the C API function of
# include/c_api/reg_compute/reg_vector.h, the lane function). Forms: binary (two registers),
# unary, scalar (a register and a scalar), reduce (the lanes into lane 0, the rest zero).
INSTRUCTIONS = {
    "vadd": ("binary", "asc_add", lambda a, b: a + b),
    "vsub": ("binary", "asc_sub", lambda a, b: a - b),
    "vmul": ("binary", "asc_mul", lambda a, b: a * b),
    "vdiv": ("binary", "asc_div", lambda a, b: a / b),
    "vmax": ("binary", "asc_max", max_),
    "vmin": ("binary", "asc_min", min_),
    "vexp": ("unary", "asc_exp", exp),
    "vln": ("unary", "asc_ln", log),
    "vsqrt": ("unary", "asc_sqrt", sqrt),
    "vabs": ("unary", "asc_abs", abs_),
    "vrelu": ("unary", "asc_relu", lambda a: max_(a, tirx.const(0, a.ty))),
    "vadds": ("scalar", "asc_add_scalar", lambda a, s: a + s),
    "vmuls": ("scalar", "asc_mul_scalar", lambda a, s: a * s),
    "vmaxs": ("scalar", "asc_max_scalar", max_),
    "vmins": ("scalar", "asc_min_scalar", min_),
    "vcadd": ("reduce", "asc_reduce_sum", reduce_sum),
    "vcmax": ("reduce", "asc_reduce_max", reduce_max),
    "vcmin": ("reduce", "asc_reduce_min", reduce_min),
}


class _Simd:
    """``T.simd``: register-level instructions, inside ``with T.SimdVF():``."""

    def __init__(self):
        forms = {"binary": self._binary, "unary": self._unary, "scalar": self._scalar,
                 "reduce": self._reduce}
        for name, (form, _api, fn) in INSTRUCTIONS.items():
            setattr(self, name, forms[form](name, fn))

    @staticmethod
    def pset(bits):
        """``T.simd.pset(32)``: a mask of every lane of ``bits``-bit elements."""
        _in_simd("T.simd.pset")
        if bits not in (8, 16, 32):
            raise error(f"T.simd.pset takes the element width 8, 16 or 32, got {bits!r}")
        return Mask(bits)

    @staticmethod
    def vld(ref, dist="norm"):
        """``T.simd.vld(a[i * 64])``: load one register from UB, from that element on
        (``asc_loadalign``, builtin ``vlds(..., NORM)``). ``dist="unpack"`` (16-bit elements,
        ``asc_loadalign_unpack``, ``vlds(..., UNPK_B16)``) loads half a register's elements
        into its even lanes, the odd lanes zero: the layout ``T.simd.vcvt`` widens from."""
        what = "T.simd.vld"
        _in_simd(what)
        buf, indices = _address(ref, what)
        dtype = str(buf.dtype)
        if dist == "norm":
            reg = Register(lambda lane: tirx.BufferLoad(buf, _lane_index(indices, lane)), dtype)
            _check_span(buf, indices, reg.lanes, what)
            return reg
        if dist != "unpack":
            raise error(f"{what}: dist= is 'norm' or 'unpack', got {dist!r}")
        if dtype_bytes(dtype) != 2:
            raise error(f"{what}(..., dist='unpack') loads 16-bit elements, not {dtype}")
        zero = tirx.const(0, dtype)
        reg = Register(lambda lane: _even(lane, lambda half: tirx.BufferLoad(
            buf, _lane_index(indices, half)), zero, 0), dtype)
        _check_span(buf, indices, reg.lanes // 2, what)
        return reg

    @staticmethod
    def vdup(value, mask=None, dtype="float32"):
        """``T.simd.vdup(x, dtype=...)``: a register of the scalar ``x`` in every lane
        (``asc_duplicate_scalar``, builtin ``vdup``); ``T.simd.vdup(r, mask)``: lane 0 of the
        register ``r`` in every lane (``asc_duplicate``, ``vdup(..., POS_LOWEST, ...)``), the
        broadcast of a reduction's result."""
        _in_simd("T.simd.vdup")
        if isinstance(value, Register):
            _mask(mask, [value], "T.simd.vdup")
            return Register(lambda lane: value.lane(0), value.dtype)
        scalar = tirx.const(value, dtype) if isinstance(value, (py.int, py.float)) else value
        reg = Register(lambda lane: scalar, str(scalar.ty))
        if mask is not None:
            _mask(mask, [reg], "T.simd.vdup")
        return reg

    @staticmethod
    def vcvt(reg, dtype, mask, part="even"):
        """``T.simd.vcvt(r, dtype, mask, part="even")``: convert between float16 or bfloat16
        and float32. The widths differ 2:1, so one register converts half the lanes of a
        wider one: widening (``asc_half2float``, ``asc_bfloat162float``; ``_v2`` for the
        odd part) reads the even or odd lanes of ``r``; narrowing (``asc_float2half_rn``,
        ``asc_float2bfloat16_rn``, round to nearest even, not saturating; ``_v2``) writes
        the even or odd lanes of the result, the others zero (``MODE_ZEROING``): add the
        even and odd results of two registers for a whole one. Builtin ``vcvt(...,
        PART_EVEN|PART_ODD, ...)``."""
        what = "T.simd.vcvt"
        _in_simd(what)
        src = _register(reg, what)
        _mask(mask, [src], what)
        dtype = str(dtype)
        if part not in ("even", "odd"):
            raise error(f"{what}: part= is 'even' or 'odd', got {part!r}")
        if {src.dtype, dtype} not in ({"float16", "float32"}, {"bfloat16", "float32"}):
            raise error(f"{what}: converts float16 or bfloat16 to float32 and back, not "
                        f"{src.dtype} to {dtype}")
        odd = py.int(part == "odd")
        if dtype == "float32":
            return Register(lambda lane: tirx.Cast(dtype, src.lane(2 * lane + odd)), dtype)
        zero = tirx.const(0, dtype)
        return Register(lambda lane: _even(lane, lambda wide: tirx.Cast(dtype, src.lane(wide)),
                                           zero, odd), dtype)

    @staticmethod
    def vsts(ref, reg, mask, dist="norm"):
        """``T.simd.vsts(c[i * 64], r, mask)``: store the register's lanes to UB
        (``asc_storealign``, builtin ``vsts(..., NORM_B32)`` or ``NORM_B16``).
        ``dist="pack"`` stores the even lanes of a 16-bit register, half a register of
        elements, with a 32-bit mask (``asc_storealign_pack`` of the register as 32-bit
        elements, ``vsts(..., PK_B32)``: the low half of each): what ``T.simd.vcvt`` narrowed
        into the even lanes."""
        what = "T.simd.vsts"
        _in_simd(what)
        buf, indices = _address(ref, what)
        reg = _register(reg, what)
        if str(buf.dtype) != reg.dtype:
            raise error(f"{what}: the register holds {reg.dtype} but {buf.name!r} is "
                        f"{buf.dtype}")
        lanes, lane_of = reg.lanes, reg.lane
        if dist == "pack":
            if dtype_bytes(reg.dtype) != 2:
                raise error(f"{what}(..., dist='pack') stores the even lanes of a 16-bit "
                            f"register, not {reg.dtype}")
            if not isinstance(mask, Mask) or mask.bits != 32:
                raise error(f"{what}(..., dist='pack') selects 32-bit slots: give it "
                            f"T.simd.pset(32), got {mask!r}")
            lanes, lane_of = lanes // 2, lambda lane: reg.lane(2 * lane)
        elif dist != "norm":
            raise error(f"{what}: dist= is 'norm' or 'pack', got {dist!r}")
        else:
            _mask(mask, [reg], what)
        _check_span(buf, indices, lanes, what)
        target = TileBuffer(buf)
        _store_lanes(lanes, lambda lane: target.__setitem__(tuple(_lane_index(indices, lane)),
                                                            lane_of(lane)))

    @staticmethod
    def _binary(name, fn):
        what = f"T.simd.{name}"

        def op(a, b, mask):
            ra, rb = _operands(what, (a, b), mask)
            dtype = _same_type([ra, rb], what)
            return _checked(Register(lambda lane: fn(ra.lane(lane), rb.lane(lane)), dtype), what)

        return _named(op, name)

    @staticmethod
    def _unary(name, fn):
        what = f"T.simd.{name}"

        def op(a, mask):
            (reg,) = _operands(what, (a,), mask)
            return _checked(Register(lambda lane: fn(reg.lane(lane)), reg.dtype), what)

        return _named(op, name)

    @staticmethod
    def _scalar(name, fn):
        what = f"T.simd.{name}"

        def op(a, scalar, mask):
            (reg,) = _operands(what, (a,), mask)
            value = tirx.const(scalar, reg.dtype) if isinstance(scalar, (py.int, py.float)) \
                else scalar
            return _checked(Register(lambda lane: fn(reg.lane(lane), value), reg.dtype), what)

        return _named(op, name)

    @staticmethod
    def _reduce(name, reducer):
        """The lanes stored to a UB tile and reduced there; lane 0 of the result reads it."""
        what = f"T.simd.{name}"

        def op(a, mask):
            (reg,) = _operands(what, (a,), mask)
            lanes = alloc_shared((1, reg.lanes), reg.dtype, scope="ascend.ub")
            result = alloc_shared((1,), reg.dtype, scope="ascend.ub")
            _store_lanes(reg.lanes, lambda lane: lanes.__setitem__((0, lane), reg.lane(lane)))
            reducer(lanes, result, dim=-1)
            value, zero = result[0], tirx.const(0, reg.dtype)

            def first(lane):
                if isinstance(lane, py.int):
                    return value if lane == 0 else zero
                return if_then_else(lane == 0, value, zero)

            return Register(first, reg.dtype)

        return _named(op, name)

    def __getattr__(self, name):
        raise AttributeError(
            f"T.simd.{name} is not supported by backend 'ascend'; T.simd has pset, vld, vsts, "
            f"vdup, vcvt, {', '.join(INSTRUCTIONS)}")


simd = _Simd()
