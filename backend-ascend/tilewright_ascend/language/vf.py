"""The vector-function scopes of the mainline dialect: ``T.SimtVF`` and ``T.SimdVF`` with
``T.simd.*``.

``with T.SimtVF(threads=N):`` is a SIMT vector function of ``N`` threads, as in TileLang
mainline: its ``T.Parallel`` nests are spread over the threads and ``T.get_thread_binding()``
is the thread's index (:mod:`..transforms.simt` lowers it, the barriers between threads
included). ``threads=(X, Y)`` or ``(X, Y, Z)`` is a block of two or three dimensions
(``T.get_thread_binding(1)`` the index along ``Y``). The scope is the statement
``AttrStmt(tid, SIMT_KEY, block, body)``: ``tid`` the thread's linear index
``x + y * X + z * X * Y``, ``block`` :func:`..facts.simt.block_value` of ``(X, Y, Z)``.

``with T.SimdVF():`` holds register-level code over 2048-bit vector registers
(:data:`..facts.registers.REGISTER_BYTES`: 64 float32 or 128 float16 lanes):
``mask = T.simd.pset(32)``, ``r = T.simd.vld(a[i * 64])``, ``T.simd.vadd(r, s, mask)`` ...,
``T.simd.vsts(c[i * 64], r, mask)``. The scope becomes one vector function of the arch-3510
register API and each ``T.simd`` call one register instruction in it (the tile ops
:data:`..facts.ops.REGISTER_INSTRUCTIONS`, numbered registers), the ``Reg::`` function
:data:`..facts.registers.REGISTER_OPS` names; a load reads and a store writes its UB lanes, so
the synchronisation pass orders the whole function against the other pipes. A mask is every
lane of its element width (``pset(32)``) or its first ``count`` lanes (``pset(32, count=n)``,
``Reg::UpdateMask``: the tail of a row that is not a whole number of registers); a mask of
another width than its operands is an error, and so is a register of another ``T.SimdVF``.

Both scopes take the ``latency=`` hint (cycles), TileLang's input to its scheduling model, and
check it. The arch-3510 API has no counterpart (no latency or scheduling hint in
``include/simt_api``, ``include/basic_api/reg_compute`` or ``asc_vf_call``; ``Nop<count>`` of
``kernel_operator_utils_intf.h`` is a delay, not a hint), so the hint is accepted, logged in one
line naming the user's line, and not emitted.
"""

from __future__ import annotations

import builtins as py
import logging
import math
from dataclasses import dataclass

import tvm
from tilewright.ir import Region, make_call
from tilewright.language import builder as B
from tvm import tirx

from ..facts.dtypes import dtype_bytes
from ..facts.keys import SIMD_VF_KEY, SIMT_KEY
from ..facts.ops import REG_LOAD, REG_OP, REG_STORE
from ..facts.registers import REGISTER_BYTES, REGISTER_OPS
from ..facts.simt import MAX_THREADS, block_value
from ._emit import error, location, span
from .trees import MAINLINE, claim

_log = logging.getLogger(__name__)


def _latency(latency, what: str) -> None:
    if latency is None:
        return
    if not isinstance(latency, py.int) or latency <= 0:
        raise error(f"{what}: latency= is a positive number of cycles, got {latency!r}")
    _log.warning("%s: %s(latency=%d) is a hint to TileLang's scheduling model; the arch-3510 "
                 "API has no counterpart, so it is accepted and not emitted", location(), what,
                 latency)


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
        block = tuple(threads) if isinstance(threads, (py.tuple, py.list)) else (threads,)
        if not 1 <= len(block) <= 3 or \
                not all(isinstance(d, py.int) and not isinstance(d, py.bool) and d > 0
                        for d in block) or math.prod(block) > MAX_THREADS:
            raise error(f"T.SimtVF: threads= is a number of threads or a block of two or three "
                        f"dimensions, {MAX_THREADS} threads at most in all, got {threads!r}")
        _latency(latency, "T.SimtVF")
        self.block = (*block, *(1 for _ in range(3 - len(block))))
        self.dims = len(block)
        self.tid = tirx.Var("tid", "int32")

    def __enter__(self):
        self._span = span()  # the user's line of the scope
        super().__enter__()
        self._frame.info["vf"] = self

    def binding(self, dim: int):
        """The thread's index along ``dim``, from its linear index (a ``floormod`` by the
        dimension, so that its range is known where the linear index's is not)."""
        x, y, _ = self.block
        if self.dims == 1:
            return self.tid
        index = (self.tid, tirx.floordiv(self.tid, x), tirx.floordiv(self.tid, x * y))[dim]
        return tirx.floormod(index, self.block[dim])

    def wrap(self, body):
        return tirx.AttrStmt(self.tid, SIMT_KEY, block_value(self.block), body,
                             span=self._span)


class SimdVF(_Scope):
    """``with T.SimdVF():`` register-level SIMD code with ``T.simd.*``: one vector function
    (an AttrStmt :data:`..facts.keys.SIMD_VF_KEY` around its register instructions)."""

    kind, what = "ascend_simd", "T.SimdVF"

    def __init__(self, latency=None):
        _latency(latency, "T.SimdVF")
        self.latency = latency or 0
        self.registers = 0

    def __enter__(self):
        super().__enter__()
        self._frame.info["vf"] = self

    def __exit__(self, exc_type, exc, tb):
        builder = B.current(self.what)
        body = builder.close(self._frame)
        if exc_type is None:
            builder.emit(tirx.AttrStmt(tirx.IntImm("int32", 0), SIMD_VF_KEY,
                                       tirx.IntImm("int32", self.latency), body, span=span()))
        return False

    def register(self, dtype: str) -> Register:
        return Register(self.number(), dtype, self)

    def number(self) -> int:
        """The next number of a register or mask register of this function."""
        self.registers += 1
        return self.registers - 1


def get_thread_binding(dim=0):
    """``T.get_thread_binding(dim=0)``: the index of the running thread of the enclosing
    ``T.SimtVF`` along ``dim`` of its block (``threadIdx.x``, ``.y``, ``.z``: 0 to
    ``threads - 1`` for a block of one dimension)."""
    frame = B.current("T.get_thread_binding").enclosing("ascend_simt")
    if frame is None:
        raise error("T.get_thread_binding() is the thread index of a SIMT vector function: "
                    "use it inside 'with T.SimtVF(threads=N):'")
    vf = frame.info["vf"]
    if not isinstance(dim, py.int) or not 0 <= dim < vf.dims:
        raise error(f"T.get_thread_binding({dim!r}): the block of T.SimtVF(threads="
                    f"{vf.block[:vf.dims]!r}) has {vf.dims} dimension(s), 0 to {vf.dims - 1}")
    return vf.binding(dim)


@dataclass(frozen=True)
class Mask:
    """A predicate over the lanes of registers of ``bits``-bit elements: every lane
    (``index`` -1) or the first ``count`` lanes, mask register ``index`` of its vector
    function."""

    bits: int
    index: int = -1


@dataclass(frozen=True, eq=False)
class Register:
    """A vector register of ``dtype`` elements, number ``index`` of its ``T.SimdVF``."""

    index: int
    dtype: str
    vf: SimdVF

    @property
    def lanes(self) -> int:
        return REGISTER_BYTES // dtype_bytes(self.dtype)


def _in_simd(what: str) -> SimdVF:
    frame = B.current(what).enclosing("ascend_simd")
    if frame is None:
        raise error(f"{what} is a register instruction: use it inside 'with T.SimdVF():'")
    return frame.info["vf"]


def _address(ref, what: str):
    """The buffer and element indices of ``a[i * 64]`` (a UB tile element)."""
    if not isinstance(ref, tvm.ir.TensorLoad) or str(ref.source.scope()) != "ascend.ub":
        raise error(f"{what} takes one element of a UB tile (T.alloc_shared) as its address, "
                    f"like a[i * 64]; got {ref!r}")
    return ref.source, list(ref.indices)


def _lanes_region(buf, indices, lanes: int, what: str) -> Region:
    """The ``lanes`` elements of ``buf`` from ``indices`` on, within its last dimension."""
    last = buf.shape[-1]
    start = indices[-1]
    if isinstance(last, tirx.IntImm) and isinstance(start, tirx.IntImm) and \
            int(start) + lanes > int(last):
        raise error(f"{what}: {lanes} lanes from element {int(start)} run past the last "
                    f"dimension of {buf.name!r} ({int(last)}); a register reads and writes "
                    f"whole: for a row that is not a whole number of registers, pad the tile's "
                    f"last dimension to a multiple of {lanes} and mask the tail with "
                    f"T.simd.pset(bits, count=...)")
    return Region(buf, tuple(indices), (*(1 for _ in indices[:-1]), lanes))


def _mask(mask, regs, what: str) -> None:
    if not isinstance(mask, Mask):
        raise error(f"{what} takes a mask from T.simd.pset(...) last, got {mask!r}")
    for reg in regs:
        bits = 8 * dtype_bytes(reg.dtype)
        if mask.bits != bits:
            raise error(f"{what}: the mask is for {mask.bits}-bit lanes but the register "
                        f"holds {reg.dtype} ({bits}-bit lanes); use T.simd.pset({bits})")


def _register(value, vf: SimdVF, what: str) -> Register:
    if not isinstance(value, Register):
        raise error(f"{what} takes registers (from T.simd.vld or another T.simd op), got "
                    f"{value!r}")
    if value.vf is not vf:
        raise error(f"{what}: the register comes from another T.SimdVF; registers live "
                    "within one vector function")
    return value


def _takes(op: str, dtype: str, what: str) -> None:
    instr = REGISTER_OPS[op]
    if dtype not in instr.dtypes:
        raise error(f"{what}: Reg::{instr.function} ({instr.header}) takes "
                    f"{', '.join(sorted(instr.dtypes))} registers, not {dtype}")


def _operands(what: str, values, mask) -> tuple[SimdVF, list[Register]]:
    """The registers of an instruction called inside ``T.SimdVF``, checked against ``mask``."""
    vf = _in_simd(what)
    regs = [_register(v, vf, what) for v in values]
    _mask(mask, regs, what)
    return vf, regs


def _emit(name: str, operands: dict, op: str, dst: Register | None = None, srcs=(),
          mask: Mask | None = None) -> None:
    """One register instruction at the user's line."""
    src = [r.index for r in srcs] + [-1, -1]
    attrs = {"op": op, "dst": dst.index if dst is not None else -1, "src0": src[0],
             "src1": src[1], "dtype": (dst or srcs[0]).dtype,
             "bits": mask.bits if mask is not None else 0,
             "mask": mask.index if mask is not None else -1}
    B.current("T.simd").emit(make_call(name, operands, attrs, span()))


def _compute(op: str, what: str, dtype: str, vf: SimdVF, srcs, mask: Mask,
             scalar=None) -> Register:
    _takes(op, dtype, what)
    dst = vf.register(dtype)
    value = tirx.const(0, "int32") if scalar is None else scalar
    _emit(REG_OP.name, {"scalar": value}, op, dst, srcs, mask)
    return dst


def _named(op, name: str):
    op.__name__ = name
    return op


def _same_type(regs, what: str) -> str:
    dtypes = {r.dtype for r in regs}
    if len(dtypes) != 1:
        raise error(f"{what}: the registers hold different types ({', '.join(sorted(dtypes))})")
    return dtypes.pop()


def _scalar_of(value, dtype: str):
    return tirx.const(value, dtype) if isinstance(value, (py.int, py.float)) else value


class _Simd:
    """``T.simd``: register-level instructions, inside ``with T.SimdVF():``; each one the
    ``Reg::`` function :data:`..facts.registers.REGISTER_OPS` names."""

    def __init__(self):
        forms = {"binary": self._binary, "unary": self._unary, "scalar": self._scalar,
                 "reduce": self._unary}
        for name, instr in REGISTER_OPS.items():
            if instr.form in forms:
                setattr(self, name, forms[instr.form](name))

    @staticmethod
    def pset(bits, count=None):
        """``T.simd.pset(32)``: a mask of every lane of ``bits``-bit elements
        (``Reg::CreateMask<T, Reg::MaskPattern::ALL>()``). ``T.simd.pset(32, count=n)``: a mask
        of the first ``n`` lanes (every lane where ``n`` is at least the register's lanes, none
        where it is 0 or less), computed where it is written (``Reg::UpdateMask<T>(n)``): the
        tail of a row whose length is not a whole number of registers, e.g.
        ``T.simd.pset(32, count=N - g * 64)`` in the row's last register."""
        what = "T.simd.pset"
        vf = _in_simd(what)
        if bits not in (8, 16, 32):
            raise error(f"{what} takes the element width 8, 16 or 32, got {bits!r}")
        if count is None:
            return Mask(bits)
        if isinstance(count, py.int):
            count = tirx.const(count, "int32")
        if not isinstance(count, tvm.ir.Expr) or not str(count.ty).startswith(("int", "uint")):
            raise error(f"{what}: count= is a number of lanes (an integer expression), got "
                        f"{count!r}")
        mask = Mask(bits, vf.number())
        count = tirx.Max(tirx.Cast("int32", count), tirx.const(0, "int32"))
        dtype = {8: "uint8", 16: "uint16", 32: "uint32"}[bits]
        attrs = {"op": "pset.count", "dst": mask.index, "src0": -1, "src1": -1,
                 "dtype": dtype, "bits": bits, "mask": mask.index}
        B.current(what).emit(make_call(REG_OP.name, {"scalar": count}, attrs, span()))
        return mask

    @staticmethod
    def vld(ref, dist="norm"):
        """``T.simd.vld(a[i * 64])``: load one register from UB, from that element on
        (``Reg::LoadAlign``). ``dist="unpack"`` (16-bit elements, ``LoadDist::DIST_UNPACK_B16``)
        loads half a register's elements into its even lanes, the odd lanes zero: the layout
        ``T.simd.vcvt`` widens from."""
        what = "T.simd.vld"
        vf = _in_simd(what)
        buf, indices = _address(ref, what)
        dtype = str(buf.dtype)
        if dist not in ("norm", "unpack"):
            raise error(f"{what}: dist= is 'norm' or 'unpack', got {dist!r}")
        op = "vld" if dist == "norm" else "vld.unpack"
        _takes(op, dtype, f"{what}(..., dist={dist!r})")
        reg = vf.register(dtype)
        count = reg.lanes if dist == "norm" else reg.lanes // 2
        _emit(REG_LOAD.name, {"ub": _lanes_region(buf, indices, count, what)}, op, reg)
        return reg

    @staticmethod
    def vdup(value, mask=None, dtype="float32"):
        """``T.simd.vdup(x, dtype=...)``: a register of the scalar ``x`` in every lane;
        ``T.simd.vdup(r, mask)``: lane 0 of the register ``r`` in every lane, the broadcast of
        a reduction's result (both ``Reg::Duplicate``)."""
        what = "T.simd.vdup"
        vf = _in_simd(what)
        if isinstance(value, Register):
            _, (src,) = _operands(what, (value,), mask)
            return _compute("vdup.lane0", what, src.dtype, vf, [src], mask)
        scalar = _scalar_of(value, dtype)
        dtype = str(scalar.ty)
        bits = 8 * dtype_bytes(dtype)
        if mask is not None and (not isinstance(mask, Mask) or mask.bits != bits):
            raise error(f"{what}: the mask is for {getattr(mask, 'bits', mask)}-bit lanes but "
                        f"the register holds {dtype}; use T.simd.pset({bits})")
        return _compute("vdup", what, dtype, vf, [], mask or Mask(bits), scalar)

    @staticmethod
    def vcvt(reg, dtype, mask, part="even"):
        """``T.simd.vcvt(r, dtype, mask, part="even")``: convert between float16 or bfloat16
        and float32 (``Reg::Cast``). The widths differ 2:1, so one register converts half the
        lanes of a wider one: widening reads the even or odd lanes of ``r``
        (``RegLayout::ZERO``/``ONE``); narrowing (round to nearest even, not saturating) writes
        the even or odd lanes of the result, the others zero (``MaskMergeMode::ZEROING``): add
        the even and odd results of two registers for a whole one. ``mask`` is of ``r``'s
        lanes."""
        what = "T.simd.vcvt"
        vf, (src,) = _operands(what, (reg,), mask)
        dtype = str(dtype)
        if part not in ("even", "odd"):
            raise error(f"{what}: part= is 'even' or 'odd', got {part!r}")
        if {src.dtype, dtype} not in ({"float16", "float32"}, {"bfloat16", "float32"}):
            raise error(f"{what}: converts float16 or bfloat16 to float32 and back, not "
                        f"{src.dtype} to {dtype}")
        return _compute(f"vcvt.{part}", what, dtype, vf, [src], mask)

    @staticmethod
    def vsts(ref, reg, mask, dist="norm"):
        """``T.simd.vsts(c[i * 64], r, mask)``: store the register's lanes to UB
        (``Reg::StoreAlign``). ``dist="pack"`` stores the even lanes of a 16-bit register, half
        a register of elements, with a 32-bit mask (``StoreDist::DIST_PACK_B32``: the low half
        of each 32-bit slot): what ``T.simd.vcvt`` narrowed into the even lanes."""
        what = "T.simd.vsts"
        vf = _in_simd(what)
        buf, indices = _address(ref, what)
        reg = _register(reg, vf, what)
        if str(buf.dtype) != reg.dtype:
            raise error(f"{what}: the register holds {reg.dtype} but {buf.name!r} is "
                        f"{buf.dtype}")
        count = reg.lanes
        if dist == "pack":
            _takes("vsts.pack", reg.dtype, f"{what}(..., dist='pack')")
            if not isinstance(mask, Mask) or mask.bits != 32:
                raise error(f"{what}(..., dist='pack') selects 32-bit slots: give it "
                            f"T.simd.pset(32), got {mask!r}")
            count //= 2
        elif dist != "norm":
            raise error(f"{what}: dist= is 'norm' or 'pack', got {dist!r}")
        else:
            _mask(mask, [reg], what)
        op = "vsts" if dist == "norm" else "vsts.pack"
        _emit(REG_STORE.name, {"ub": _lanes_region(buf, indices, count, what)}, op,
              srcs=[reg], mask=mask)

    @staticmethod
    def _binary(name):
        what = f"T.simd.{name}"

        def op(a, b, mask):
            vf, regs = _operands(what, (a, b), mask)
            return _compute(name, what, _same_type(regs, what), vf, regs, mask)

        return _named(op, name)

    @staticmethod
    def _unary(name):
        what = f"T.simd.{name}"

        def op(a, mask):
            vf, (reg,) = _operands(what, (a,), mask)
            return _compute(name, what, reg.dtype, vf, [reg], mask)

        return _named(op, name)

    @staticmethod
    def _scalar(name):
        what = f"T.simd.{name}"

        def op(a, scalar, mask):
            vf, (reg,) = _operands(what, (a,), mask)
            return _compute(name, what, reg.dtype, vf, [reg], mask,
                            _scalar_of(scalar, reg.dtype))

        return _named(op, name)

    def __getattr__(self, name):
        names = sorted({n.split(".")[0] for n in REGISTER_OPS} | {"pset"})
        raise AttributeError(f"T.simd.{name} is not supported by backend 'ascend'; T.simd has "
                             f"{', '.join(names)}")


simd = _Simd()
