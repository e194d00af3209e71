"""The vector-function scopes of the mainline dialect: ``T.SimtVF`` and ``T.SimdVF`` with
``T.simd.*``.

``with T.SimtVF(threads=N):`` holds ``T.Parallel`` nests, as in TileLang mainline; this
backend lowers each nest to vector instructions on UB tiles (the vector path of portable
kernels), which computes what the threads would. ``T.get_thread_binding()`` is refused: the
lowering has no thread index to give.

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
from tilewright.language import Parallel, exp, log, sqrt
from tilewright.language import abs as abs_
from tilewright.language import builder as B
from tilewright.language import max as max_
from tilewright.language import min as min_
from tilewright.language.buffer import TileBuffer
from tvm import tirx

from ..facts.arch import ARCHS
from ..facts.dtypes import dtype_bytes
from ._emit import error
from .trees import MAINLINE, claim

REGISTER_BYTES = ARCHS[MAINLINE.target].vector_bits // 8
SIMT_MAX_THREADS = 2048  # TileLang mainline's example_vecadd uses T.SimtVF(threads=2048)


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
            builder.emit(body)
        return False


class SimtVF(_Scope):
    """``with T.SimtVF(threads=N):`` a SIMT vector function holding ``T.Parallel`` nests."""

    kind, what = "ascend_simt", "T.SimtVF"

    def __init__(self, threads=128, latency=None):
        if not isinstance(threads, py.int) or not 0 < threads <= SIMT_MAX_THREADS:
            raise error(f"T.SimtVF: threads= is 1 to {SIMT_MAX_THREADS}, got {threads!r}")
        _latency(latency, "T.SimtVF")
        self.threads = threads


class SimdVF(_Scope):
    """``with T.SimdVF():`` register-level SIMD code with ``T.simd.*``."""

    kind, what = "ascend_simd", "T.SimdVF"

    def __init__(self, latency=None):
        _latency(latency, "T.SimdVF")


def get_thread_binding(*_args):
    """Refused: T.Parallel inside T.SimtVF is lowered to vector instructions here."""
    raise error("T.get_thread_binding(): backend 'ascend' lowers the T.Parallel nests of "
                "T.SimtVF to vector instructions, which have no thread index; index with the "
                "T.Parallel loop variables instead")


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


def _same_type(regs, what: str) -> str:
    dtypes = {r.dtype for r in regs}
    if len(dtypes) != 1:
        raise error(f"{what}: the registers hold different types ({', '.join(sorted(dtypes))})")
    return dtypes.pop()


class _Simd:
    """``T.simd``: register-level instructions, inside ``with T.SimdVF():``."""

    def __init__(self):
        binary = {"vadd": lambda a, b: a + b, "vsub": lambda a, b: a - b,
                  "vmul": lambda a, b: a * b, "vdiv": lambda a, b: a / b,
                  "vmax": max_, "vmin": min_}
        unary = {"vexp": exp, "vln": log, "vsqrt": sqrt, "vabs": abs_,
                 "vrelu": lambda a: max_(a, tirx.const(0, a.ty))}
        scalar = {"vadds": lambda a, s: a + s, "vmuls": lambda a, s: a * s,
                  "vmaxs": max_, "vmins": min_}
        for name, fn in binary.items():
            setattr(self, name, self._binary(name, fn))
        for name, fn in unary.items():
            setattr(self, name, self._unary(name, fn))
        for name, fn in scalar.items():
            setattr(self, name, self._scalar(name, fn))

    @staticmethod
    def pset(bits):
        """``T.simd.pset(32)``: a mask of every lane of ``bits``-bit elements."""
        _in_simd("T.simd.pset")
        if bits not in (8, 16, 32):
            raise error(f"T.simd.pset takes the element width 8, 16 or 32, got {bits!r}")
        return Mask(bits)

    @staticmethod
    def vld(ref):
        """``T.simd.vld(a[i * 64])``: load one register from UB, from that element on."""
        _in_simd("T.simd.vld")
        buf, indices = _address(ref, "T.simd.vld")
        reg = Register(lambda lane: tirx.BufferLoad(buf, _lane_index(indices, lane)),
                       str(buf.dtype))
        _check_span(buf, indices, reg.lanes, "T.simd.vld")
        return reg

    @staticmethod
    def vdup(value, dtype="float32"):
        """``T.simd.vdup(x, dtype)``: a register of ``x`` in every lane."""
        _in_simd("T.simd.vdup")
        scalar = tirx.const(value, dtype) if isinstance(value, (py.int, py.float)) else value
        return Register(lambda lane: scalar, str(dtype))

    @staticmethod
    def vsts(ref, reg, mask):
        """``T.simd.vsts(c[i * 64], r, mask)``: store the register's lanes to UB."""
        _in_simd("T.simd.vsts")
        buf, indices = _address(ref, "T.simd.vsts")
        reg = _register(reg, "T.simd.vsts")
        _mask(mask, [reg], "T.simd.vsts")
        if str(buf.dtype) != reg.dtype:
            raise error(f"T.simd.vsts: the register holds {reg.dtype} but {buf.name!r} is "
                        f"{buf.dtype}")
        _check_span(buf, indices, reg.lanes, "T.simd.vsts")
        target = TileBuffer(buf)
        for lane in Parallel(reg.lanes).run(("lane",)):
            target[tuple(_lane_index(indices, lane))] = reg.lane(lane)

    @staticmethod
    def _binary(name, fn):
        what = f"T.simd.{name}"

        def op(a, b, mask):
            _in_simd(what)
            regs = [_register(a, what), _register(b, what)]
            dtype = _same_type(regs, what)
            _mask(mask, regs, what)
            return Register(lambda lane: fn(regs[0].lane(lane), regs[1].lane(lane)), dtype)

        op.__name__ = name
        return op

    @staticmethod
    def _unary(name, fn):
        what = f"T.simd.{name}"

        def op(a, mask):
            _in_simd(what)
            reg = _register(a, what)
            _mask(mask, [reg], what)
            return Register(lambda lane: fn(reg.lane(lane)), reg.dtype)

        op.__name__ = name
        return op

    @staticmethod
    def _scalar(name, fn):
        what = f"T.simd.{name}"

        def op(a, scalar, mask):
            _in_simd(what)
            reg = _register(a, what)
            _mask(mask, [reg], what)
            value = tirx.const(scalar, reg.dtype) if isinstance(scalar, (py.int, py.float)) \
                else scalar
            return Register(lambda lane: fn(reg.lane(lane), value), reg.dtype)

        op.__name__ = name
        return op

    def __getattr__(self, name):
        raise AttributeError(
            f"T.simd.{name} is not supported by backend 'ascend'; T.simd has pset, vld, vsts, "
            "vdup, vadd, vsub, vmul, vdiv, vmax, vmin, vexp, vln, vsqrt, vabs, vrelu, vadds, "
            "vmuls, vmaxs, vmins")


simd = _Simd()
