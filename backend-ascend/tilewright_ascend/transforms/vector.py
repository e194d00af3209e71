"""The vector path of portable kernels: T.Parallel nests, reductions, scans and tile copies
become Ascend vector ops on UB tiles before memory planning and synchronisation.

The pass runs on kernels the ``portable`` phase converted (function attribute
:data:`PORTABLE_KEY`); hand-written dialect kernels are left as they are.

- 2-D UB tiles get their rows padded to 32 bytes, so every row starts on a 32-byte boundary
  (DataCopyPad rows, per-row vector instructions, WholeReduce repeat strides).
- Global tensors read or written inside a ``T.Parallel`` nest are staged through UB tiles
  (a store outside any nest is a nest of one element):
  a bounds-checked ``T.copy`` in before the nest, one out after it. A guard of the nest that
  only checks the global indices against the tensor's shape is dropped (the copies check the
  bounds); any other guard keeps the nest on the scalar unit.
- Each store ``dst[i, j] = expr`` becomes one vector op per node of ``expr`` (Add, Sub, Mul,
  Div, Max, Min; Adds/Muls/Maxs/Mins with a scalar; Exp, Ln, Abs, Sqrt, Reciprocal, Cast;
  Duplicate), each intermediate in its own UB temporary (a subexpression used twice is
  computed once). Math functions without an instruction (log2, tanh, sin, cos, the rounding
  functions) are first written as float32 expressions of those with one (:data:`_MATH`).
  An operand indexed by the row only (``row_max[i]``) is a row broadcast (one scalar per
  row, read with GetValue on the S pipe); one indexed by the column only (``W[j]``) a column
  broadcast (one vector per row); one tile element indexed by no loop variable (``total[0]``)
  one scalar for the whole nest, read with GetValue.
- A select ``c ? x : y`` whose condition compares tile values (or a tile value with a
  scalar, or is ``T.isnan``) becomes Compare/Compares into a uint8 bit mask and Select on A2
  (:meth:`_Lowering._select`; what the instructions take is
  :data:`..facts.instructions.COMPARE_MODES`), and so does a nest guarded by one such
  comparison, each store ``x = v`` written ``x = c ? v : x``. Compare reads whole 256-byte
  repeats: a source whose tile does not hold them is copied into one that does.
- What the vector unit cannot do (other conditions and selects, integer division, index
  arithmetic as data) stays a loop of GetValue/SetValue on the scalar unit, marked
  :data:`SCALAR_KEY` with the reason; the codegen writes the reason as a comment. Math
  functions in it run on the vector unit: over the tile before the loop where they can, else
  inside the loop on one-element tiles (:meth:`_Lowering.split`).
- ``T.reduce_*`` become ``VREDUCE`` (one reduction per row, vector adds down columns)
  with a UB work tile (integer ones, which WholeReduce does not take, a scalar loop);
  ``T.cumsum`` a scalar loop; ``T.fill`` of UB Duplicate; a ``T.copy`` that converts
  dtypes goes through a UB staging tile and Cast (float -> integer saturating,
  :func:`..facts.instructions.float_to_int_steps`; an integer conversion that may overflow
  wraps in a scalar loop, since A2's Cast saturates); a scalar ``T.atomic_*`` writes
  its value into a one-element UB tile that the atomic copy adds to global memory.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import Region, decode, make_call
from tilewright.transform.walk import prim_func_pass
from tvm import sym, tirx

from ..analysis.buffers import loads_and_stores
from ..facts.arch import ALIGN, ARCH
from ..facts.dtypes import dtype_bytes
from ..facts.instructions import (
    COMPARISONS,
    ROUNDING_CASTS,
    SELECT_DTYPES,
    VECTOR_DTYPES,
    cast_route,
    compare_count,
    compare_takes,
    computes,
    float_to_int_steps,
)
from ..facts.keys import (
    PORTABLE_KEY,
    SCALAR_KEY,
    SCOPE_KEY,
    SIMT_KEY,
    VID_TAG,
    WORKSPACES_KEY,
)
from ..facts.ops import VBIN, VBRC, VCMP, VCMPS, VDUP, VREDUCE, VSCA, VSEL, VSELS, VUN
from .simt import lower_simt

UB = "ascend.ub"
# portable tile ops this pass rewrites (their rules are the vector-path ops)
PORTABLE_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_abssum",
                       "reduce_absmax")
PORTABLE_VECTOR_OPS = (*PORTABLE_REDUCTIONS, "cumsum")
# the dtypes a portable reduction takes: those the WholeReduce family computes on, bfloat16
# through a float32 copy, and the integers A2's WholeReduce lacks on the scalar unit (the
# capabilities declare them, so other dtypes are refused before lowering and reported
# unsupported by the conformance suite)
_SCALAR_REDUCTION_DTYPES = ("int8", "int16", "int32")
REDUCTION_DTYPES = frozenset({*VECTOR_DTYPES["WholeReduceSum"], "bfloat16",
                              *_SCALAR_REDUCTION_DTYPES})

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
_COMMUTES = {"add", "mul", "max", "min"}
# a vector op -> the A2 instruction family that computes it (its dtypes: VECTOR_DTYPES)
_INSTRUCTION = {"add": "Add", "sub": "Sub", "rsub": "Sub", "mul": "Mul", "div": "Div",
                "rdiv": "Div", "max": "Max", "min": "Min"}
_REVERSED = {"sub": "rsub", "div": "rdiv"}
_UNARY_CALLS = {"tirx.exp": "exp", "tirx.log": "ln", "tirx.fabs": "abs", "tirx.sqrt": "sqrt",
                "tirx.rsqrt": "rsqrt"}
_FLOATS = ("float32", "float16", "bfloat16")
# a comparison with its operands swapped (s < x is x > s)
_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}
_INTEGERS = ("int8", "uint8", "int16", "int32", "int64")


def _f32(value: float):
    return tirx.const(value, "float32")


def _horner(t, coefficients):
    """c0 + t * (c1 + t * (c2 + ...)), as vector ops on the tile ``t``."""
    acc = _f32(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = _f32(c) + t * acc
    return acc


def _half_angle(x):
    """(sin h, cos h) of h = r / 2, r = x - 2 pi round(x / 2 pi) in [-pi, pi] (2 pi split in
    two constants, Cody-Waite: k * 6.28125 is exact, so the reduction loses little for
    moderate |x|): Taylor series of degrees 13 and 14 on [-pi/2, pi/2], each truncated below
    1e-9."""
    high = 6.28125  # 2 pi to 9 bits: k * high is exact
    k = tirx.round(x * _f32(1 / (2 * math.pi)))
    h = ((x - k * _f32(high)) - k * _f32(2 * math.pi - high)) * _f32(0.5)
    t = h * h
    sin_h = h * _horner(t, [(-1) ** n / math.factorial(2 * n + 1) for n in range(7)])
    cos_h = _horner(t, [(-1) ** n / math.factorial(2 * n) for n in range(8)])
    return sin_h, cos_h


def _sin(x):
    sin_h, cos_h = _half_angle(x)
    return _f32(2.0) * sin_h * cos_h


def _cos(x):
    sin_h, cos_h = _half_angle(x)
    return (cos_h - sin_h) * (cos_h + sin_h)  # relative errors of its factors: no 1 - 2 s^2


# Cephes tanhf: tanh x = x + x**3 P(x**2) for |x| <= 0.625
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)
_TANH_SPLIT = 0.625


def _tanh(x):
    """``tanh x`` without a select (A2's vector path has none): Cephes' odd polynomial ``s`` of
    ``x`` clamped to [-0.625, 0.625], ``b = sign(x) (1 - 2 / (e**2|x| + 1))`` (which cancels
    for small ``|x|``: 1.7e7 ulp off at 1e-8 alone), blended as ``s + w (b - s)`` with ``w`` 0 for
    ``|x| <= 0.625`` and 1 beyond; there ``b - s`` is exact (Sterbenz: ``b / s`` is within
    [1, 2]), so the sum is ``b``."""
    clamped = tirx.Min(tirx.Max(x, _f32(-_TANH_SPLIT)), _f32(_TANH_SPLIT))
    square = clamped * clamped
    poly = _f32(_TANH_P[0])
    for c in _TANH_P[1:]:
        poly = poly * square + _f32(c)
    small = clamped + clamped * square * poly
    magnitude = tirx.abs(x)
    # +-1 where the blend takes ``big`` (0.625 * float32(1.6) rounds to 1), finite for +-inf
    sign = clamped * _f32(1 / _TANH_SPLIT)
    big = sign * (_f32(1.0) - _f32(2.0) / (tirx.exp(magnitude * _f32(2.0)) + _f32(1.0)))
    step = tirx.Min(tirx.Max((magnitude - _f32(_TANH_SPLIT)) * _f32(2.0 ** 64), _f32(0.0)),
                    _f32(1.0))
    return small + step * (big - small)


# math functions A2 has no instruction for, as float32 expressions of those it has (a 16-bit
# argument is converted to float32 and the result back); each within a few float32 roundings
_MATH = {
    "log2": lambda x: tirx.log(x) * _f32(1 / math.log(2.0)),
    "tanh": _tanh,
    "sin": _sin,
    "cos": _cos,
    **{name: lambda x, _n=name: getattr(tirx, _n)(x) for name in ROUNDING_CASTS},
}

# math functions A2 computes through another (exp2 as exp(x ln 2)) whose 16-bit argument is
# converted to float32 first: the language's 16-bit math is the float32 function rounded once
# (tilewright.transform.narrow_float), and x ln 2 rounded to float16 put exp2 two units in the
# last place off for x near 4
_ON_FLOAT32 = frozenset({"exp2"})


def _math_name(e) -> str | None:
    if type(e).__name__ == "Call" and isinstance(e.op, tvm.ir.Op) and len(e.args) == 1:
        return str(e.op.name).split(".")[-1]
    return None


def _expand_math(e):
    """``e`` with each math function of :data:`_MATH` written with the instructions A2 has
    (a rounding function stays a call on float32: a Cast to an integral value)."""

    def expand(call):
        name = _math_name(call)
        if name in _ON_FLOAT32 and str(call.ty) != "float32":
            return _cast(tvm.ir.Call(call.op, [_cast(call.args[0], "float32")], ret_ty="float32",
                                     span=call.span), str(call.ty))
        if name not in _MATH or (name in ROUNDING_CASTS and str(call.ty) == "float32"):
            return call
        dtype = str(call.ty)
        return _cast(_MATH[name](_cast(call.args[0], "float32")), dtype)

    return tvm_ffi.structural_map(e, (tvm.ir.Call, expand))


class Unvectorizable(Exception):
    """The expression has a node the vector unit cannot compute."""


def _simplify(e):
    return sym.Analyzer().simplify(e)


def _vars_in(e) -> list:
    found = []
    tvm_ffi.structural_walk(e, (tirx.Var, lambda v: found.append(v)))
    return found


def _uses_any(e, variables) -> bool:
    return any(any(v.same_as(w) for w in variables) for v in _vars_in(e))


def _subst(e, mapping):
    return tvm_ffi.structural_map(e, (tirx.Var, lambda v: next(
        (val for k, val in mapping if k.same_as(v)), v)))


def _loads(e) -> list:
    found = []
    tvm_ffi.structural_walk(e, (tvm.ir.TensorLoad, lambda x: found.append(x)))
    return found


def _ints(values) -> list[int] | None:
    out = []
    for v in values:
        v = v.value if isinstance(v, tirx.IntImm) else v
        if not isinstance(v, int):
            return None
        out.append(v)
    return out


def padded_shape(shape, dtype):
    """The shape of a UB tile whose rows are padded to 32 bytes (2-D and up)."""
    dims = _ints(shape)
    if dims is None or len(dims) < 2:
        return None
    per = ALIGN // dtype_bytes(dtype)
    last = -(-dims[-1] // per) * per
    return None if last == dims[-1] else [*dims[:-1], last]


class _Lowering:
    """Rewrites one converted kernel body."""

    def __init__(self, selects: bool = False):
        self.selects = selects  # tile selects on the vector unit (Compare + Select: A2)
        self.count = 0
        self.loops: list = []  # the loops around the statement being rewritten
        self.computed = []  # see eval
        self.conditions: list = []  # the conditions bound by _fold_branches

    # -- temporaries ---------------------------------------------------------------------
    def temp(self, extents, dtype, out: list, reach: int = 0) -> Region:
        """A fresh UB tile; ``reach`` elements from its start readable at least (the
        allocation grows by whole rows: Compare reads whole repeats)."""
        shape = [int(e) for e in extents] or [1]
        self.count += 1
        alloc_shape = padded_shape(shape, dtype) or shape
        row = math.prod(alloc_shape[1:])
        if reach > math.prod(alloc_shape):
            alloc_shape = [-(-reach // row), *alloc_shape[1:]]
        buf = tirx.decl_buffer(alloc_shape, dtype, f"tw_t{self.count}", scope=UB)
        out.append(tirx.AllocBuffer(buf))
        return Region(buf, tuple(0 for _ in shape), tuple(tirx.IntImm("int32", s)
                                                          for s in shape))

    # -- statements ----------------------------------------------------------------------
    def visit(self, stmt):
        if isinstance(stmt, tirx.SeqStmt):
            out = []
            for s in stmt.seq:
                new = self.visit(s)
                out.extend(new.seq if isinstance(new, tirx.SeqStmt) else [new])
            return tirx.SeqStmt(out) if len(out) > 1 else out[0]
        if isinstance(stmt, tirx.For):
            if str(stmt.annotations.get("tw.loop", "")) == "parallel":
                return _seq(self.parallel(stmt))
            self.loops.append(stmt)
            body = self.visit(stmt.body)
            self.loops.pop()
            return stmt if body.same_as(stmt.body) else tirx.For(
                stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                thread_binding=stmt.thread_binding, annotations=stmt.annotations,
                span=stmt.span)
        if isinstance(stmt, tirx.IfThenElse):
            then = self.visit(stmt.then_case)
            other = self.visit(stmt.else_case) if stmt.else_case is not None else None
            return tirx.IfThenElse(stmt.condition, then, other, span=stmt.span)
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SIMT_KEY:
            return lower_simt(stmt)  # the threads' code, not vector instructions
        if isinstance(stmt, tirx.AttrStmt):
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, self.visit(stmt.body),
                                 span=stmt.span)
        if isinstance(stmt, tirx.BufferStore):  # one element: a T.Parallel of extent 1
            one = tirx.For(tirx.Var("e0", "int32"), 0, 1, tirx.ForKind.SERIAL, stmt,
                           annotations={"tw.loop": "parallel"}, span=stmt.span)
            return _seq(self.parallel(one))
        call = decode(stmt)
        if call is not None:
            family = call.name.split("_")[0] if call.name.startswith(("reduce_", "atomic_")) \
                else call.name
            handler = getattr(self, "op_" + family, None)
            if handler is not None:
                return _seq(handler(call, stmt))
        return stmt

    # -- tile ops ------------------------------------------------------------------------
    def op_fill(self, call, stmt):
        dst = call.operands["dst"]
        if str(dst.buffer.scope()) != UB:
            return [stmt]
        value = call.operands["value"]
        if str(value.ty) != str(dst.buffer.dtype):
            value = tirx.Cast(str(dst.buffer.dtype), value)
        return [make_call(VDUP.name, {"dst": dst, "value": value}, span=stmt.span)]

    def op_copy(self, call, stmt):
        src, dst = call.operands["src"], call.operands["dst"]
        ss, ds = str(src.buffer.scope()), str(dst.buffer.scope())
        sd, dd = str(src.buffer.dtype), str(dst.buffer.dtype)
        if ss == UB and ds == UB:
            if sd == dd:
                return [make_call(VUN.name, {"dst": dst, "src": src}, {"op": "copy"},
                                  span=stmt.span)]
            out = []
            self._convert(dst, src, out, stmt.span)
            return out
        # T.copy reads 0 past the end of a tensor: zero a tile the copy may not fill
        zero = [make_call(VDUP.name, {"dst": dst, "value": tirx.const(0, dd)}, span=stmt.span)] \
            if ss == "global" and ds == UB and not _inside(src, self.loops) else []
        if sd == dd or (ss, ds) not in (("global", UB), (UB, "global")):
            return [*zero, stmt]
        out = []
        if ss == "global":  # GM -> UB staging tile in the source dtype -> Cast
            stage = self.temp(_non_unit(dst), sd, out)
            if zero:
                out.append(make_call(VDUP.name, {"dst": stage, "value": tirx.const(0, sd)},
                                     span=stmt.span))
            out.append(make_call("copy", {"src": src, "dst": stage}, span=stmt.span))
            self._convert(dst, stage, out, stmt.span)
        else:
            stage = self.temp(_non_unit(src), dd, out)
            self._convert(stage, src, out, stmt.span)
            out.append(make_call("copy", {"src": stage, "dst": dst}, span=stmt.span))
        return out

    def op_reduce(self, call, stmt):
        src, dst = call.operands["src"], call.operands["dst"]
        kind = call.name.removeprefix("reduce_")
        if str(src.buffer.scope()) != UB or str(dst.buffer.scope()) != UB:
            raise KernelError(f"T.{call.name}: backend 'ascend' reduces UB tiles (fragments); "
                              f"{src.buffer.name!r} -> {dst.buffer.name!r} are not both tiles",
                              span_location(stmt.span))
        dims = _non_unit(src)
        dim = call.attrs["dim"]
        rank = len(src.extents)
        dim = dim + rank if dim < 0 else dim
        out = []
        extents = _ints(src.extents)
        if extents is None or str(src.buffer.dtype) != str(dst.buffer.dtype):
            raise KernelError(f"T.{call.name}: backend 'ascend' reduces tiles of static shape "
                              f"into tiles of the same dtype ({src.buffer.name!r} is "
                              f"{src.buffer.dtype}, {dst.buffer.name!r} {dst.buffer.dtype})",
                              span_location(stmt.span))
        if len(dims) > 2 or (rank > 1 and dim not in (rank - 1, rank - 2)):
            raise KernelError(f"T.{call.name}: backend 'ascend' reduces 1-D and 2-D tiles",
                              span_location(stmt.span))
        rows = math.prod(extents[:dim]) if dim == rank - 1 else math.prod(extents[dim + 1:])
        dtype = str(src.buffer.dtype)
        if dtype in _SCALAR_REDUCTION_DTYPES and not computes("WholeReduceSum", dtype):
            return [_scalar_reduction(src, dst, kind, dim, call.attrs["clear"], stmt.span)]
        if not computes("WholeReduceSum", dtype):
            if not dtype.startswith("bfloat"):
                raise KernelError(f"T.{call.name}: A2's vector unit reduces float16 and float32, "
                                  f"not {dtype}", span_location(stmt.span))
            # bfloat16: reduce a float32 copy (A2 converts bfloat16 but does not compute in it)
            wide_src = self.temp(_ints(src.extents), "float32", out)
            wide_dst = self.temp(_ints(dst.extents), "float32", out)
            out.append(make_call(VUN.name, {"dst": wide_src, "src": src}, {"op": "cast"},
                                 span=stmt.span))
            if not call.attrs["clear"]:
                out.append(make_call(VUN.name, {"dst": wide_dst, "src": dst}, {"op": "cast"},
                                     span=stmt.span))
            self._reduce(wide_src, wide_dst, kind, dim, rank, rows, call.attrs["clear"], out,
                         stmt.span)
            out.append(make_call(VUN.name, {"dst": dst, "src": wide_dst}, {"op": "cast"},
                                 span=stmt.span))
            return out
        self._reduce(src, dst, kind, dim, rank, rows, call.attrs["clear"], out, stmt.span)
        return out

    def _reduce(self, src, dst, kind, dim, rank, rows, clear, out, span):
        per = ALIGN // dtype_bytes(str(src.buffer.dtype))
        work = self.temp([-(-math.prod(_ints(src.buffer.shape)) // per) * per +
                          -(-rows // per) * per],
                         str(src.buffer.dtype), out)
        out.append(make_call(VREDUCE.name, {"dst": dst, "src": src, "work": work},
                             {"kind": kind, "dim": 1 if dim == rank - 1 else 0,
                              "clear": clear}, span=span))

    def op_cumsum(self, call, stmt):
        src, dst = call.operands["src"], call.operands["dst"]
        extents = _ints(src.extents)
        if extents is None or str(src.buffer.scope()) != UB or str(dst.buffer.scope()) != UB:
            raise KernelError("T.cumsum: backend 'ascend' scans UB tiles of static shape",
                              span_location(stmt.span))
        dim = call.attrs["dim"] % len(extents)
        loops = [tirx.Var(f"c{n}", "int32") for n in range(len(extents))]
        axis = loops[dim]
        n = extents[dim]
        pos = (n - 1 - axis) if call.attrs["reverse"] else axis
        prev = (pos + 1) if call.attrs["reverse"] else (pos - 1)

        def at(region, p):
            idx = [tirx.const(0, "int32") + s + (p if d == dim else loops[d])
                   for d, s in enumerate(_as_exprs(region.starts))]
            return idx

        x = tirx.BufferLoad(src.buffer, at(src, pos))
        if str(src.buffer.dtype) != str(dst.buffer.dtype):
            x = tirx.Cast(str(dst.buffer.dtype), x)
        acc = tirx.BufferLoad(dst.buffer, at(dst, prev))
        body = tirx.IfThenElse(tirx.EQ(axis, 0), tirx.BufferStore(dst.buffer, x, at(dst, pos)),
                               tirx.BufferStore(dst.buffer, acc + x, at(dst, pos)))
        for d in reversed(range(len(extents))):
            body = tirx.For(loops[d], 0, extents[d], tirx.ForKind.SERIAL, body,
                            annotations={SCALAR_KEY: "T.cumsum: each element adds the one "
                                         "before it"} if d == 0 else {})
        return [_with_span(body, stmt.span)]

    def op_atomic(self, call, stmt):
        src = call.operands["src"]
        if isinstance(src, Region):
            return [stmt]
        dst = call.operands["dst"]
        out = []
        tile = self.temp([1], str(dst.buffer.dtype), out)
        value = src if str(src.ty) == str(dst.buffer.dtype) else tirx.Cast(str(dst.buffer.dtype),
                                                                          src)
        v = tirx.Var("a0", "int32")
        out.append(tirx.For(v, 0, 1, tirx.ForKind.SERIAL,
                            tirx.BufferStore(tile.buffer, value, [v]),
                            annotations={SCALAR_KEY: "a scalar atomic's value is computed on "
                                         "the scalar unit"}, span=stmt.span))
        out.append(make_call(call.name, {"dst": dst, "src": tile}, call.attrs, span=stmt.span))
        return out

    # -- T.Parallel --------------------------------------------------------------------------
    def parallel(self, loop, fold_guard: bool = True) -> list:
        loops, body = [], loop
        while isinstance(body, tirx.For) and \
                str(body.annotations.get("tw.loop", "")) == "parallel":
            loops.append(body)
            body = body.body
        variables = [lp.loop_var for lp in loops]
        extents = _ints([lp.extent for lp in loops])
        if extents is None:
            raise KernelError("T.Parallel on backend 'ascend' needs constant extents",
                              span_location(loop.span))
        pre, post = [], []
        guard = written = None  # written: the guard as written, kept on the scalar unit
        if isinstance(body, tirx.IfThenElse) and body.else_case is None:
            guard = written = body.condition
            body = body.then_case
        if guard is not None and _bounds_only(guard, body, variables):
            guard = None
        if guard is not None and fold_guard and self.selects:
            folded = _guard_as_selects(guard, body)
            if folded is not None:  # each store x = v as x = guard ? v : x, on the vector unit
                for lp in reversed(loops):
                    folded = tirx.For(lp.loop_var, lp.min, lp.extent, lp.kind, folded,
                                      annotations=lp.annotations, span=lp.span)
                attempt = self.parallel(folded, fold_guard=False)
                if not _any_scalar(attempt):
                    return attempt
        reason = None
        try:
            body = self.stage_global(body, variables, extents, pre, post, loop.span,
                                     keep=guard is not None)
        except Unvectorizable as exc:  # a global index the copies cannot tile
            reason = str(exc)
            pre.clear()
            post.clear()
        stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        if reason is None and guard is not None:
            reason = f"the guard {guard} is not a bounds check of the tensors"
        elif reason is None and not all(isinstance(s, tirx.BufferStore) for s in stores):
            reason = "the loop body is not a sequence of element stores"
        ops = []
        if reason is None:
            try:
                for store in stores:
                    self.store(store, variables, extents, ops)
            except Unvectorizable as exc:
                reason = str(exc)
        if reason is not None:
            math = []
            body = self.hoist_math(body, variables, extents, math)
            if written is not None:  # a dropped bounds check too: the nest may read GM
                body = tirx.IfThenElse(written, body, None)
            nest = _fold_branches(body, self.conditions)
            for lp, v in reversed(list(zip(loops, variables))):
                nest = tirx.For(v, lp.min, lp.extent, tirx.ForKind.SERIAL, nest,
                                annotations={SCALAR_KEY: reason} if lp is loops[0] else {},
                                span=lp.span)
            _check_scalar_buffers(nest, loop.span)
            if _lacking_math(nest):  # on a value only the nest knows
                nest = _seq(self.split(nest, reason, math))
            ops = [*[_with_span(s, loop.span) for s in math], nest]
        else:
            ops = [_with_span(s, loop.span) for s in ops]
        return [*pre, *ops, *post]

    def hoist_math(self, body, variables, extents, ops):
        """``body`` of a scalar nest with each math function the scalar unit lacks (A2's AI
        core computes exp, ln, sqrt and their kin only on the vector unit: its scalar
        instructions, "标量计算" in the API documentation, have none) computed first by vector
        instructions (into ``ops``) in a UB temporary that the nest reads instead: over the
        tile where the argument is a tile expression of the nest's indices (a select's arm is
        then computed for every element and the select keeps the ones it picks), else on one
        element that the scalar unit writes into a one-element tile. A name the nest binds
        is read through its value, whose reads move to the call: a call stays where a store
        of the nest may change what it reads before it runs, or where it uses a loop variable
        of a loop inside the nest (:meth:`split` then computes it inside the nest)."""
        statements = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        inner = []  # names the nest binds
        tvm_ffi.structural_walk(body, [(tirx.Bind, lambda b: inner.append(b.var)),
                                       (tirx.For, lambda f: inner.append(f.loop_var))])
        stores = {}
        tvm_ffi.structural_walk(body, (tirx.BufferStore, lambda x: stores.setdefault(
            x.buffer, []).append(list(x.indices))))
        bound = []  # (name, value) of the nest's names, a call reads through them
        tvm_ffi.structural_walk(body, (tirx.Bind, lambda b: bound.append((b.var, b.value))))
        full = tuple(range(len(variables)))
        once = all(e == 1 for e in extents)  # one iteration: no store of it comes before

        def inline(call):
            for _ in bound:
                if not _uses_any(call, [v for v, _ in bound]):
                    break
                call = _subst(call, bound)
            return call

        def hoistable(call, blocked) -> bool:
            if _uses_any(call, inner):
                return False
            for x in _loads(call):
                if str(x.source.scope()) != UB:
                    return False
                if x.source not in stores or (once and x.source not in blocked):
                    continue
                operand = _operand(x.source, x.indices, variables, extents)
                if x.source in blocked or operand is None or operand[1] != full or \
                        not all(tvm_ffi.structural_equal(list(x.indices), k)
                                for k in stores[x.source]):
                    return False  # an element a store of the nest writes first
            return True

        out, before = [], set()
        for stmt in statements:
            written = set(loads_and_stores(stmt)[1])
            blocked = before | (set() if isinstance(stmt, tirx.BufferStore) else written)

            def hoist(call, blocked=blocked):
                if _math_name(call) is None or not _scalar_lacks(call):
                    return call
                call = tvm.ir.Call(call.op, [tvm_ffi.structural_map(
                    call.args[0], (tvm.ir.Call, hoist))], ret_ty=call.ty, span=call.span)
                if not hoistable(inline(call), blocked):
                    return call
                new = []
                try:
                    load = self.math_tile(inline(call), variables, extents, new)
                except (Unvectorizable, KernelError):
                    return call
                ops.extend(new)
                return load

            out.append(tvm_ffi.structural_map(stmt, (tvm.ir.Call, hoist)))
            before |= written
        return _seq(out)

    def math_tile(self, call, variables, extents, ops):
        """A load of the UB temporary into which vector instructions compute ``call``."""
        if _uses_any(call, variables):
            value = self.eval(_expand_math(call), variables, extents, ops, None)
            if value[0] != "t":
                raise Unvectorizable(f"{call} is a scalar expression")
            return tirx.BufferLoad(value[1].buffer, [variables[d] for d in value[2]] or
                                   [tirx.const(0, "int32")])
        return self.math_element(call, ops)

    def math_element(self, call, ops):
        """A load of the one-element UB temporary into which vector instructions compute
        ``call`` of the one-element tile the scalar unit writes its argument into (an
        argument that is the first element of a UB tile, such as another call's result, is
        read in place: a tile starts 32-byte aligned, as vector operands must)."""
        arg = call.args[0]
        zero = tirx.const(0, "int32")
        if isinstance(arg, tvm.ir.TensorLoad) and str(arg.source.scope()) == UB and \
                all(isinstance(k, tirx.IntImm) and k.value == 0 for k in arg.indices):
            on_tile = call
        else:
            one = self.temp([1], str(arg.ty), ops)
            ops.append(tirx.For(tirx.Var("e0", "int32"), 0, 1, tirx.ForKind.SERIAL,
                                tirx.BufferStore(one.buffer, arg, [zero]),
                                annotations={SCALAR_KEY: f"the argument of {call} is computed "
                                                         "on the scalar unit, the function on "
                                                         "the vector unit"}))
            on_tile = tvm.ir.Call(call.op, [tirx.BufferLoad(one.buffer, [zero])],
                                  ret_ty=call.ty, span=call.span)
        value = self.eval(_expand_math(on_tile), [], [], ops, None)
        return tirx.BufferLoad(value[1].buffer, [zero])

    def split(self, stmt, reason, allocs) -> list:
        """``stmt`` of a scalar nest that calls a math function the scalar unit lacks on a value
        only the nest knows (a name it binds, an element it stores first, a loop variable of
        an inner loop): its loops become serial loops whose bodies alternate one-trip scalar
        loops (:data:`SCALAR_KEY`, written without a C++ scope, so the names they bind stay
        visible) and vector instructions on one-element UB tiles (:meth:`math_element`): the
        scalar unit writes the argument (``SetValue``), the vector unit computes the function
        and the scalar unit reads the result (``GetValue``). The synchronisation pass orders
        the pipes with the vendor's S_V and V_S events (``HardEventAiv`` in
        ``impl/basic_api/kernel_event.h``). The temporaries' allocations go to ``allocs``."""
        if isinstance(stmt, tirx.SeqStmt):
            return _merge_scalar([x for s in stmt.seq for x in self.split(s, reason, allocs)])
        if isinstance(stmt, tirx.For) and _ints([stmt.extent]) == [1]:  # one trip: its body
            return self.split(_subst(stmt.body, [(stmt.loop_var, stmt.min)]), reason, allocs)
        if isinstance(stmt, tirx.For):
            return [tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL,
                             _seq(self.split(stmt.body, reason, allocs)),
                             annotations={"tw.loop": "serial"}, span=stmt.span)]
        if isinstance(stmt, tirx.IfThenElse) and not _loads(stmt.condition) and \
                _lacking_math(stmt):
            other = None if stmt.else_case is None else \
                _seq(self.split(stmt.else_case, reason, allocs))
            return [tirx.IfThenElse(stmt.condition, _seq(self.split(stmt.then_case, reason,
                                                                    allocs)),
                                    other, span=stmt.span)]
        out = []

        def stage(call):
            if _math_name(call) is None or not _scalar_lacks(call):
                return call
            call = tvm.ir.Call(call.op, [tvm_ffi.structural_map(
                call.args[0], (tvm.ir.Call, stage))], ret_ty=call.ty, span=call.span)
            ops = []
            try:
                load = self.math_element(call, ops)
            except (Unvectorizable, KernelError):
                return call  # the printer refuses it, at the user's line
            allocs.extend(s for s in ops if isinstance(s, tirx.AllocBuffer))
            out.extend(s for s in ops if not isinstance(s, tirx.AllocBuffer))
            return load

        if not isinstance(stmt, tirx.IfThenElse):  # a branch on tile data: the printer says
            stmt = tvm_ffi.structural_map(stmt, (tvm.ir.Call, stage))
        out.append(tirx.For(tirx.Var("s0", "int32"), 0, 1, tirx.ForKind.SERIAL, stmt,
                            annotations={SCALAR_KEY: reason}, span=getattr(stmt, "span", None)))
        return _merge_scalar(out)

    def stage_global(self, body, variables, extents, pre, post, span, keep):
        """Replace global loads and stores in ``body`` by UB tiles copied in and out."""
        staged = {}

        problems = []  # recorded, not raised: the callbacks run inside TVM

        def region_of(buffer, indices):
            starts, exts, used = [], [], []
            for index in indices:
                mine = [v for v in variables if _uses_any(index, [v])]
                if not mine:
                    starts.append(index)
                    exts.append(1)
                    continue
                v = mine[0]
                start = _simplify(_subst(index, [(v, tirx.const(0, "int32"))]))
                rest = _simplify(index - start - v)
                if len(mine) > 1 or not (isinstance(rest, tirx.IntImm) and rest.value == 0):
                    problems.append(f"the index {index} of {buffer.name!r} is not one loop "
                                    "variable + offset")
                    return None
                starts.append(start)
                exts.append(extents[variables.index(v)])
                used.append(v)
            return starts, exts, used

        def tile_for(buffer, indices, write):
            found = region_of(buffer, indices)
            if found is None:
                return None, None
            starts, exts, used = found
            key = (buffer, tuple(str(s) for s in starts))
            if key not in staged:
                region = Region(buffer, tuple(starts), tuple(tirx.IntImm("int32", e)
                                                             for e in exts))
                tile = self.temp([extents[variables.index(v)] for v in used] or [1],
                                 str(buffer.dtype), pre)
                staged[key] = (region, tile, used, {"read": False, "write": False})
            region, tile, used, how = staged[key]
            how["write" if write else "read"] = True
            return tile, used

        def load(x):
            if str(x.source.scope()) != "global":
                return x
            tile, used = tile_for(x.source, list(x.indices), False)
            if tile is None:
                return x
            return tirx.BufferLoad(tile.buffer, list(used) or [tirx.const(0, "int32")])

        def store(x):
            if str(x.buffer.scope()) != "global":
                return x
            tile, used = tile_for(x.buffer, list(x.indices), True)
            if tile is None:
                return x
            return tirx.BufferStore(tile.buffer, x.value, list(used) or [tirx.const(0, "int32")],
                                    span=x.span)

        body = tvm_ffi.structural_map(body, [(tvm.ir.TensorLoad, load),
                                             (tirx.BufferStore, store)])
        if problems:
            raise Unvectorizable(problems[0])
        for region, tile, _, how in staged.values():
            if how["read"] or (how["write"] and keep):
                pre.append(make_call("copy", {"src": region, "dst": tile}, span=span))
            if how["write"]:
                post.append(make_call("copy", {"src": tile, "dst": region}, span=span))
        return body

    def store(self, store, variables, extents, ops):
        dst = _operand(store.buffer, store.indices, variables, extents)
        if dst is None or len(dst[1]) != len(variables):
            raise Unvectorizable(f"the store to {store.buffer.name!r} does not cover every "
                                 "loop variable")
        self.eval(_expand_math(store.value), variables, extents, ops, target=dst)

    def eval(self, e, variables, extents, ops, target=None):
        """Emit ops computing ``e``; returns ("s", expr) or ("t", region, dims)."""
        full = tuple(range(len(variables)))
        self.computed = []  # (expression, value): a subexpression used twice is computed once
        value = self._eval(e, variables, extents, ops, target)
        if target is None:
            return value
        if value[0] == "s":
            ops.append(make_call(VDUP.name, {"dst": target[0], "value": _cast(value[1],
                                             str(target[0].buffer.dtype))}))
        elif value[1] is not target[0]:
            if value[2] != full:
                zero = tirx.const(0, str(target[0].buffer.dtype))
                ops.append(make_call(VDUP.name, {"dst": target[0], "value": zero}))
                self._broadcast("add", target[0], target[0], value, ops)
            elif str(value[1].buffer.dtype) == str(target[0].buffer.dtype):
                ops.append(make_call(VUN.name, {"dst": target[0], "src": value[1]},
                                     {"op": "copy"}))
            else:
                self._convert(target[0], value[1], ops)
        return value

    def _convert(self, dst: Region, src: Region, ops, span=None) -> None:
        """``src`` cast into ``dst`` through the chain of Casts A2 has (``cast_route``), each
        intermediate in a UB temporary of ``dst``'s extents; a float -> integer conversion
        by :func:`float_to_int_steps` (saturating, NaN gives 0); an integer conversion that
        may wrap by :func:`_wrapping_conversion`."""
        sd, dd = str(src.buffer.dtype), str(dst.buffer.dtype)
        if sd in _INTEGERS and dd in _INTEGERS and not _holds(dd, sd) and \
                _ints(dst.extents) is not None and _ints(src.extents) is not None:
            ops.append(_wrapping_conversion(dst, src, span))
            return
        if sd in _FLOATS and dd in _INTEGERS:
            steps = float_to_int_steps(sd, dd)
        else:
            steps = tuple(("cast", d) for d in cast_route(sd, dd))
        for n, (step, dtype) in enumerate(steps):
            if step == "clamp":  # in place, on the temporary of the Cast before
                for op, bound in (("max", tirx.min_value(dd)), ("min", tirx.max_value(dd))):
                    ops.append(make_call(VSCA.name, {"dst": src, "src": src, "scalar":
                                                     tirx.const(int(bound.value), dtype)},
                                         {"op": op}, span=span))
                continue
            out = dst if n == len(steps) - 1 else self.temp(_ints(dst.extents), dtype, ops)
            ops.append(make_call(VUN.name, {"dst": out, "src": src}, {"op": "cast"},
                                 span=span))
            src = out

    def _new(self, dims, extents, dtype, ops, target):
        if target is not None and tuple(target[1]) == tuple(dims) and \
                str(target[0].buffer.dtype) == dtype:
            return target[0]
        return self.temp([extents[d] for d in dims], dtype, ops)

    def _eval(self, e, variables, extents, ops, target):
        if target is not None:
            return self._compute(e, variables, extents, ops, target)
        for seen, value in self.computed:
            if seen.same_as(e):
                return value
        value = self._compute(e, variables, extents, ops, None)
        self.computed.append((e, value))
        return value

    def _compute(self, e, variables, extents, ops, target):
        kind = type(e).__name__
        dtype = str(e.ty)
        if not _loads(e):
            if _uses_any(e, variables):
                raise Unvectorizable(f"{e} computes with the loop index")
            return ("s", e)
        if kind == "TensorLoad":
            operand = _operand(e.source, e.indices, variables, extents)
            if operand is None:
                raise Unvectorizable(f"the load {e} is not a tile element")
            return ("t", operand[0], operand[1])
        if kind == "Select" or _is_if_then_else(e):
            return self._select(e, variables, extents, ops, target)
        converts = kind == "Cast" and str(e.value.ty) in _FLOATS and dtype in _INTEGERS
        if dtype not in _FLOATS and not converts:
            raise Unvectorizable(f"{e} computes in {dtype}; the vector path handles floats "
                                 "and converts them to integers")
        if kind == "Cast":
            inner = self._eval(e.value, variables, extents, ops, None)
            if inner[0] == "s":
                return ("s", e)
            if str(inner[1].buffer.dtype) == dtype:
                return inner
            out = self._new(inner[2], extents, dtype, ops, target)
            self._convert(out, inner[1], ops)
            return ("t", out, inner[2])
        if kind in _BINARY:
            op = _BINARY[kind]
            a = self._eval(e.a, variables, extents, ops, None)
            b = self._eval(e.b, variables, extents, ops, None)
            if a[0] == "s" and b[0] == "s":
                return ("s", e)
            if a[0] == "s" or b[0] == "s":
                tile, scalar = (a, b[1]) if b[0] == "s" else (b, a[1])
                if a[0] == "s":
                    op = op if op in _COMMUTES else _REVERSED[op]
                value = getattr(_simplify(scalar), "value", None)
                if target is None and (op, value) in (("mul", 1.0), ("div", 1.0), ("add", 0.0),
                                                      ("sub", 0.0)):
                    return tile  # x * 1, x + 0: nothing to compute
                out = self._new(tile[2], extents, dtype, ops, target)
                ops.append(make_call(VSCA.name, {"dst": out, "src": tile[1],
                                                 "scalar": _cast(scalar, dtype)}, {"op": op}))
                return ("t", out, tile[2])
            if () in (a[2], b[2]) and a[2] != b[2]:  # one tile element for every lane
                if a[2] == ():
                    a, b = b, a
                    op = op if op in _COMMUTES else _REVERSED[op]
                out = self._new(a[2], extents, dtype, ops, target)
                self._broadcast(op, out, a[1], b, ops)
                return ("t", out, a[2])
            if a[2] == b[2]:
                out = self._new(a[2], extents, dtype, ops, target)
                ops.append(make_call(VBIN.name, {"dst": out, "src0": a[1], "src1": b[1]},
                                     {"op": op}))
                return ("t", out, a[2])
            full = tuple(range(len(variables)))
            if len(variables) != 2:
                raise Unvectorizable(f"{e} broadcasts in a {len(variables)}-D nest")
            if a[2] != full and b[2] != full:  # row op column: materialise the row operand
                tile = self.temp(extents, dtype, ops)
                ops.append(make_call(VDUP.name, {"dst": tile, "value": tirx.const(0, dtype)}))
                self._broadcast("add", tile, tile, a, ops)
                a = ("t", tile, full)
            if a[2] != full:
                a, b = b, a
                op = op if op in _COMMUTES else _REVERSED[op]
            out = self._new(full, extents, dtype, ops, target)
            self._broadcast(op, out, a[1], b, ops)
            return ("t", out, full)
        if kind == "Call" and isinstance(e.op, tvm.ir.Op):
            name = e.op.name
            if name == "tirx.exp2":  # exp(x * ln 2); a constant factor of x absorbs ln 2
                arg, ln2 = e.args[0], tirx.const(math.log(2.0), dtype)
                if isinstance(arg, tirx.Mul) and not _loads(arg.b) and \
                        not _uses_any(arg.b, variables):
                    arg = tirx.Mul(arg.a, _simplify(arg.b * ln2))
                else:
                    arg = arg * ln2
                scaled = self._eval(arg, variables, extents, ops, None)
                return self._unary("exp", scaled, extents, dtype, ops, target)
            if name in _UNARY_CALLS and len(e.args) == 1:
                inner = self._eval(e.args[0], variables, extents, ops, None)
                return self._unary(_UNARY_CALLS[name], inner, extents, dtype, ops, target)
            if _math_name(e) in ROUNDING_CASTS and dtype == "float32":
                inner = self._eval(e.args[0], variables, extents, ops, None)
                return self._unary(_math_name(e), inner, extents, dtype, ops, target)
        raise Unvectorizable(f"{kind} {e} has no vector instruction here")

    def _select(self, e, variables, extents, ops, target):
        """``c ? x : y`` over tiles: Compare (Compares with a scalar) into a uint8 bit mask,
        then Select between two tiles (VSEL_TENSOR_TENSOR_MODE) or a tile and a scalar false
        arm (VSEL_TENSOR_SCALAR_MODE); what the instructions cannot take
        (:data:`..facts.instructions.COMPARE_MODES`) is Unvectorizable."""
        cond, yes, no = (e.condition, e.true_value, e.false_value) \
            if type(e).__name__ == "Select" else e.args
        dtype = str(e.ty)
        if _math_name(cond) == "isnan":  # x != x
            cond = tirx.NE(cond.args[0], cond.args[0])
        mode = COMPARISONS.get(type(cond).__name__)
        if not self.selects:
            raise Unvectorizable(f"{e}: this architecture's selects run on the scalar unit")
        if dtype == "bfloat16":  # A2 selects float32; bfloat16 -> float32 -> bfloat16 is exact
            wide = tirx.Select(cond, _cast(yes, "float32"), _cast(no, "float32"))
            inner = self._eval(wide, variables, extents, ops, None)
            out = self._new(inner[2], extents, dtype, ops, target)
            self._convert(out, inner[1], ops)
            return ("t", out, inner[2])
        if dtype not in SELECT_DTYPES:
            raise Unvectorizable(f"{e} selects {dtype}; A2's Select takes float16 and float32")
        if mode is None or not compare_takes(cond.a.ty, mode):
            raise Unvectorizable(f"the condition {cond} is not a comparison A2's Compare takes "
                                 "(float16 and float32, int32 ==)")
        left = self._eval(cond.a, variables, extents, ops, None)
        right = self._eval(cond.b, variables, extents, ops, None)
        if left[0] == "s":
            left, right, mode = right, left, _SWAPPED[mode]
        if left[0] == "s":
            raise Unvectorizable(f"the condition {cond} reads no tile")
        arms = [self._eval(x, variables, extents, ops, None) for x in (yes, no)]
        tiles = [v for v in (left, right, *arms) if v[0] == "t"]
        dims = tiles[0][2] if all(v[2] == tiles[0][2] for v in tiles) else \
            tuple(range(len(variables)))
        left, right = (self._full(v, dims, extents, ops) for v in (left, right))
        yes_v, no_v = (self._full(v, dims, extents, ops) for v in arms)
        if yes_v[0] == "s":  # Select's scalar is its false arm
            tile = self.temp([extents[d] for d in dims], dtype, ops)
            ops.append(make_call(VDUP.name, {"dst": tile, "value": _cast(yes_v[1], dtype)}))
            yes_v = ("t", tile, dims)
        out = self._new(dims, extents, dtype, ops, target)
        regions = [out, left[1], yes_v[1], *(v[1] for v in (right, no_v) if v[0] == "t")]
        rows = math.prod(extents[d] for d in dims[:-1]) if dims else 1
        cols = extents[dims[-1]] if dims else 1
        cdtype = str(left[1].buffer.dtype)
        if rows == 1 or all(_contiguous(r) for r in regions):
            slot, mask_bytes = 0, compare_count(rows * cols, cdtype) // 8
        else:  # one Compare and one Select per row, each row's bits from a 32-byte slot
            slot = -(-compare_count(cols, cdtype) // 8 // ALIGN) * ALIGN
            mask_bytes = rows * slot
        mask = self.temp([-(-mask_bytes // ALIGN) * ALIGN], "uint8", ops)
        sources = [self._readable(v, slot, rows, cols, extents, ops) for v in (left, right)]
        if right[0] == "s":
            ops.append(make_call(VCMPS.name, {"dst": mask, "src": sources[0][1],
                                              "scalar": _cast(right[1], cdtype)},
                                 {"op": mode, "slot": slot}))
        else:
            ops.append(make_call(VCMP.name, {"dst": mask, "src0": sources[0][1],
                                             "src1": sources[1][1]},
                                 {"op": mode, "slot": slot}))
        if no_v[0] == "s":
            ops.append(make_call(VSELS.name, {"dst": out, "mask": mask, "src": yes_v[1],
                                              "scalar": _cast(no_v[1], dtype)}, {"slot": slot}))
        else:
            ops.append(make_call(VSEL.name, {"dst": out, "mask": mask, "src0": yes_v[1],
                                             "src1": no_v[1]}, {"slot": slot}))
        return ("t", out, dims)

    def _full(self, value, dims, extents, ops):
        """A tile value over ``dims``: a scalar as it is, a tile of fewer dimensions (a row,
        a column, one element) broadcast into a temporary."""
        if value[0] == "s" or value[2] == dims:
            return value
        if len(dims) > 2:
            raise Unvectorizable(f"a select broadcasts in a {len(dims)}-D nest")
        dtype = str(value[1].buffer.dtype)
        tile = self.temp([extents[d] for d in dims], dtype, ops)
        ops.append(make_call(VDUP.name, {"dst": tile, "value": tirx.const(0, dtype)}))
        self._broadcast("add", tile, tile, value, ops)
        return ("t", tile, dims)

    def _readable(self, value, slot, rows, cols, extents, ops):
        """A Compare source: ``value``'s tile where it is a whole tile whose allocation holds
        what Compare reads (whole repeats from the start of the range, or of each row when
        ``slot``), else a copy into a temporary that does."""
        if value[0] == "s":
            return value
        region = value[1]
        dtype = str(region.buffer.dtype)

        def reach(stride):
            return (rows - 1) * stride + compare_count(cols, dtype) if slot else \
                compare_count(rows * cols, dtype)

        shape = _ints(region.buffer.shape)
        if _whole(region) and math.prod(shape) >= reach(shape[-1]):
            return value
        dims = [extents[d] for d in value[2]]
        stride = (padded_shape([1, cols], dtype) or [1, cols])[-1]
        tile = self.temp(dims, dtype, ops, reach(stride))
        ops.append(make_call(VUN.name, {"dst": tile, "src": region}, {"op": "copy"}))
        return ("t", tile, value[2])

    def _unary(self, op, inner, extents, dtype, ops, target):
        if inner[0] == "s":
            raise Unvectorizable(f"{op} of a scalar expression")
        out = self._new(inner[2], extents, dtype, ops, target)
        ops.append(make_call(VUN.name, {"dst": out, "src": inner[1]}, {"op": op}))
        return ("t", out, inner[2])

    @staticmethod
    def _broadcast(op, out, tile, vec, ops):
        """out = tile op vec, with vec a row (dims (0,)), column (dims (1,)) or single
        element (dims ()) operand."""
        if str(vec[1].buffer.dtype) != str(out.buffer.dtype):
            raise Unvectorizable("a broadcast operand of another dtype")
        instruction = _INSTRUCTION[op]
        if not computes(instruction, out.buffer.dtype):
            raise Unvectorizable(f"a broadcast {op} of {out.buffer.dtype} ({instruction} does "
                                 f"not compute on it on A2)")
        axis = {(): "one", (0,): "row"}.get(vec[2], "col")
        ops.append(make_call(VBRC.name, {"dst": out, "src": tile, "vec": vec[1]},
                             {"op": op, "axis": axis}))


def _guard_as_selects(guard, body):
    """``body`` (element stores) under ``guard`` as unguarded stores ``x[k] = guard ? v :
    x[k]``, when ``guard`` is one comparison of tile data that no store of ``body`` changes;
    None otherwise."""
    stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    if type(guard).__name__ not in COMPARISONS or not _loads(guard) or \
            not all(isinstance(s, tirx.BufferStore) for s in stores):
        return None
    read = {x.source for x in _loads(guard)}
    if any(s.buffer in read for s in stores):
        return None
    return _seq([tirx.BufferStore(s.buffer, tirx.Select(guard, s.value, tirx.BufferLoad(
        s.buffer, list(s.indices))), list(s.indices), span=s.span) for s in stores])


def _any_scalar(stmts) -> bool:
    """Whether any of ``stmts`` holds a loop of the scalar unit."""
    found = []
    for s in stmts:
        tvm_ffi.structural_walk(s, (tirx.For, lambda f: found.append(f)
                                    if SCALAR_KEY in f.annotations else None))
    return bool(found)


def _is_if_then_else(e) -> bool:
    return type(e).__name__ == "Call" and isinstance(e.op, tvm.ir.Op) and \
        str(e.op.name).endswith(".if_then_else")


def _whole(region) -> bool:
    """Whether ``region`` is all of its tile (whose rows may be padded)."""
    extents, shape = _ints(region.extents), _ints(region.buffer.shape)
    if extents is None or shape is None or len(extents) != len(shape) or \
            any(not (isinstance(s, int) and s == 0 or isinstance(s, tirx.IntImm) and s.value == 0)
                for s in region.starts):
        return False
    padded = padded_shape(extents, str(region.buffer.dtype)) or extents
    return list(padded) == list(shape)


def _contiguous(region) -> bool:
    """Whether ``region`` is one contiguous range of its buffer (every dimension after its
    first of extent above 1 whole)."""
    extents, shape = _ints(region.extents), _ints(region.buffer.shape)
    if extents is None or shape is None:
        return False
    outer = next((d for d, e in enumerate(extents) if e != 1), len(extents))
    return all(e == n for e, n in zip(extents[outer + 1:], shape[outer + 1:]))


def _inside(region, loops=()) -> bool:
    """Whether ``region`` provably lies inside its tensor, within the ranges of ``loops``."""
    analyzer = sym.Analyzer()
    for loop in loops:
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    return all(analyzer.can_prove(tirx.const(0, "int32") + start + int(ext) <= dim)
               for start, ext, dim in zip(region.starts, region.extents, region.buffer.shape))


def _holds(dst: str, src: str) -> bool:
    """Whether the integer type ``dst`` holds every value of the integer type ``src``."""
    return int(tirx.min_value(dst).value) <= int(tirx.min_value(src).value) and \
        int(tirx.max_value(src).value) <= int(tirx.max_value(dst).value)


def _wrapping_conversion(dst: Region, src: Region, span):
    """``dst`` = ``src`` converted element by element on the scalar unit: an integer
    conversion wraps modulo the destination's size, where A2's Cast saturates (数据结构/
    precision_conversion.md: int32_t -> int16_t gives 2^15 - 1 for 2^31 - 1) or goes through
    float16 (int16_t -> int8_t). The regions have the same extents but for dimensions of 1."""
    dims = _non_unit(dst)
    loops = [tirx.Var(f"w{n}", "int32") for n in range(len(dims))]

    def at(region):
        free = iter(loops)
        return [tirx.const(0, "int32") + start + (next(free) if extent != 1 else 0)
                for start, extent in zip(_as_exprs(region.starts), _ints(region.extents))]

    value = tirx.Cast(str(dst.buffer.dtype), tirx.BufferLoad(src.buffer, at(src)))
    body = tirx.BufferStore(dst.buffer, value, at(dst))
    for n in reversed(range(len(dims))):
        body = tirx.For(loops[n], 0, dims[n], tirx.ForKind.SERIAL, body,
                        annotations={SCALAR_KEY: "an integer conversion wraps; A2's Cast "
                                     "saturates"} if n == 0 else {}, span=span)
    return body


def _operand(buffer, indices, variables, extents):
    """A UB load or store as (Region, dims) when each index is a loop variable (in nest order)
    plus an offset or free of loop variables; None otherwise."""
    if str(buffer.scope()) != UB:
        return None
    starts, exts, dims = [], [], []
    for index in indices:
        mine = [k for k, v in enumerate(variables) if _uses_any(index, [v])]
        if not mine:
            starts.append(index)
            exts.append(tirx.IntImm("int32", 1))
            continue
        if len(mine) > 1:
            return None
        k = mine[0]
        start = _simplify(_subst(index, [(variables[k], tirx.const(0, "int32"))]))
        rest = _simplify(index - start - variables[k])
        if not (isinstance(rest, tirx.IntImm) and rest.value == 0):
            return None
        starts.append(start)
        exts.append(tirx.IntImm("int32", extents[k]))
        dims.append(k)
    if dims != sorted(dims) or len(set(dims)) != len(dims):
        return None
    return Region(buffer, tuple(starts), tuple(exts)), tuple(dims)


def _bounds_only(guard, body, variables) -> bool:
    """Whether ``body`` stores to global tensors only and every conjunct of ``guard`` is
    ``index < extent`` for an index a global access of ``body`` uses in a dimension of that
    extent (the bounds-checked copies then do what the guard did)."""
    accesses = []
    tvm_ffi.structural_walk(body, [
        (tvm.ir.TensorLoad, lambda x: accesses.append((x.source, list(x.indices)))),
        (tirx.BufferStore, lambda x: accesses.append((x.buffer, list(x.indices))))])
    stores = []
    tvm_ffi.structural_walk(body, (tirx.BufferStore, lambda x: stores.append(x.buffer)))
    if any(str(b.scope()) != "global" for b in stores):
        return False  # the guard also keeps UB elements unwritten
    accesses = [(b, i) for b, i in accesses if str(b.scope()) == "global"]

    def conjuncts(c):
        return conjuncts(c.a) + conjuncts(c.b) if isinstance(c, tirx.And) else [c]

    for c in conjuncts(guard):
        if not isinstance(c, tirx.LT) or not _uses_any(c.a, variables):
            return False
        if not any(tvm_ffi.structural_equal(index, c.a) and
                   tvm_ffi.structural_equal(buf.shape[d], c.b)
                   for buf, idx in accesses for d, index in enumerate(idx)):
            return False
    return True


def _fold_branches(stmt, names):
    """``stmt`` of a scalar nest with each ``if`` on tile data written as selects, so the scalar
    unit never branches on a value it has not read yet: the condition is bound to a name first
    (a store of the arm must not change it for the next), a store ``x[k] = v`` of the then arm
    becomes ``x[k] = c ? v : x[k]`` (of the else arm ``c ? x[k] : v``, nested arms under the
    conjunction), and the arms' names are bound unconditionally. Each arm may only bind names,
    store to UB tiles and read UB tiles (its reads are then made whatever the condition); a
    branch that does anything else is left as it is. ``names`` numbers the bound conditions."""

    def on_tile_data(s, cond) -> bool:
        return cond is not None or (isinstance(s, tirx.IfThenElse) and bool(_loads(s.condition)))

    def fold(s, cond):  # a list of statements, or None where an arm cannot be folded
        if isinstance(s, tirx.SeqStmt):
            out = []
            for child in s.seq:
                new = fold(child, cond)
                if new is None:
                    return None
                out.extend(new)
            return out
        if isinstance(s, tirx.IfThenElse) and on_tile_data(s, cond):
            if any(str(x.source.scope()) != UB for x in _loads(s.condition)):
                return None
            here = s.condition if cond is None else tirx.And(cond, s.condition)
            names.append(0)
            c = tirx.Var(f"tw_c{len(names)}", "bool")
            out = [tirx.Bind(c, here, span=s.span)]
            arms = [(s.then_case, c)]
            if s.else_case is not None:
                names.append(0)
                e = tirx.Var(f"tw_c{len(names)}", "bool")
                out.append(tirx.Bind(e, tirx.Not(c) if cond is None else
                                     tirx.And(cond, tirx.Not(c)), span=s.span))
                arms.append((s.else_case, e))
            for arm, arm_cond in arms:
                new = fold(arm, arm_cond)
                if new is None:
                    return None
                out.extend(new)
            return out
        if isinstance(s, tirx.IfThenElse):  # a branch on indices: the arms may hold some
            then = fold(s.then_case, None)
            other = fold(s.else_case, None) if s.else_case is not None else [None]
            if then is None or other is None:
                return None
            return [tirx.IfThenElse(s.condition, _seq(then),
                                    None if other == [None] else _seq(other), span=s.span)]
        if isinstance(s, tirx.For):
            body = fold(s.body, cond)
            return None if body is None else [tirx.For(
                s.loop_var, s.min, s.extent, s.kind, _seq(body),
                annotations=s.annotations, span=s.span)]
        if cond is None:
            return [s]
        if any(str(x.source.scope()) != UB for x in _loads(s)):
            return None
        if isinstance(s, tirx.Bind):
            return [s]
        if isinstance(s, tirx.BufferStore) and str(s.buffer.scope()) == UB:
            return [tirx.BufferStore(s.buffer, tirx.Select(cond, s.value, tirx.BufferLoad(
                s.buffer, list(s.indices))), list(s.indices), span=s.span)]
        return None

    folded = fold(stmt, None)
    return stmt if folded is None else _seq(folded)


def _scalar_lacks(call) -> bool:
    """Whether ``call`` is a math function the vector path computes and the scalar unit does
    not (the printer's scalar calls are ``TW_FABS`` and ``TW_ISNAN``)."""
    name = str(call.op.name) if isinstance(call.op, tvm.ir.Op) else ""
    return name != "tirx.fabs" and (name in _UNARY_CALLS or name == "tirx.exp2" or
                                    _math_name(call) in _MATH)


def _scalar_reduction(src: Region, dst: Region, kind: str, dim: int, clear: bool, span):
    """``T.reduce_<kind>`` of an integer tile, which A2's WholeReduce family does not take, as a
    loop on the scalar unit: each element of ``dst`` combined with each of its elements of
    ``src`` in turn (``clear``: the first element starts it), in ``src``'s dtype (a sum
    wraps)."""
    extents = _ints(src.extents)
    rank = len(extents)
    if len(dst.extents) not in (rank - 1, rank):
        raise KernelError(f"T.reduce_{kind}: backend 'ascend' reduces a {rank}-D tile into a "
                          f"{rank - 1}-D one; {dst.buffer.name!r} has {len(dst.extents)} "
                          "dimensions", span_location(span))
    loops = [tirx.Var(f"r{n}", "int32") for n in range(rank)]
    kept = [v for d, v in enumerate(loops) if d != dim] if len(dst.extents) == rank - 1 else \
        [tirx.const(0, "int32") if d == dim else v for d, v in enumerate(loops)]
    at_src = [tirx.const(0, "int32") + s + v for s, v in zip(_as_exprs(src.starts), loops)]
    at_dst = [tirx.const(0, "int32") + s + v for s, v in zip(_as_exprs(dst.starts), kept)]
    x = tirx.BufferLoad(src.buffer, at_src)
    if kind.startswith("abs"):
        x = tirx.Select(x < tirx.const(0, str(x.ty)), tirx.const(0, str(x.ty)) - x, x)
    acc = tirx.BufferLoad(dst.buffer, at_dst)
    combined = {"sum": acc + x, "abssum": acc + x, "max": tirx.Max(acc, x),
                "absmax": tirx.Max(acc, x), "min": tirx.Min(acc, x)}[kind]
    body = tirx.BufferStore(dst.buffer, combined, at_dst)
    if clear:
        body = tirx.IfThenElse(tirx.EQ(loops[dim], 0), tirx.BufferStore(dst.buffer, x, at_dst),
                               body)
    order = [d for d in range(rank) if d != dim] + [dim]  # the reduced dimension innermost
    for n, d in enumerate(reversed(order)):
        body = tirx.For(loops[d], 0, extents[d], tirx.ForKind.SERIAL, body,
                        annotations={SCALAR_KEY: f"T.reduce_{kind} of {src.buffer.dtype}: A2's "
                                     "WholeReduce takes floats"} if n == rank - 1 else {},
                        span=span)
    return body


def _lacking_math(stmt) -> bool:
    """Whether ``stmt`` calls a math function the scalar unit lacks."""
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, lambda c: found.append(c) if _math_name(c)
                                   is not None and _scalar_lacks(c) else None))
    return bool(found)


def _merge_scalar(stmts) -> list:
    """``stmts`` with each run of one-trip scalar loops (:meth:`_Lowering.split`) made one."""
    out = []
    for s in stmts:
        if out and _one_trip_scalar(s) and _one_trip_scalar(out[-1]):
            last = out[-1]
            body = [*(last.body.seq if isinstance(last.body, tirx.SeqStmt) else [last.body]),
                    *(s.body.seq if isinstance(s.body, tirx.SeqStmt) else [s.body])]
            out[-1] = tirx.For(last.loop_var, 0, 1, tirx.ForKind.SERIAL, tirx.SeqStmt(body),
                               annotations=last.annotations, span=last.span)
        else:
            out.append(s)
    return out


def _one_trip_scalar(s) -> bool:
    return isinstance(s, tirx.For) and SCALAR_KEY in s.annotations and \
        _ints([s.extent]) == [1] and not _uses_any(s.body, [s.loop_var])


def _check_scalar_buffers(nest, span):
    for x in _loads(nest):
        if str(x.source.scope()) not in (UB, "global"):
            raise KernelError(f"the scalar unit reads UB and GM; {x.source.name!r} is in "
                              f"{x.source.scope()}", span_location(span))


def _non_unit(region):
    dims = [e for e in (_ints(region.extents) or []) if e != 1]
    return dims or [1]


def _as_exprs(values):
    return [tirx.const(v, "int32") if isinstance(v, int) else v for v in values]


def _cast(e, dtype):
    return e if str(e.ty) == dtype else tirx.Cast(dtype, e)


def _seq(stmts):
    stmts = list(stmts)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _with_span(stmt, span):
    if isinstance(stmt, tirx.Evaluate):
        return tirx.Evaluate(stmt.value, span=span)
    return stmt


def _pad_tiles(func):
    remap = {}

    def alloc(stmt):
        buf = stmt.buffer
        if str(buf.scope()) != UB:
            return stmt
        shape = padded_shape(buf.shape, str(buf.dtype))
        if shape is None:
            return stmt
        new = tirx.decl_buffer(shape, buf.dtype, buf.name, scope=UB)
        remap[buf] = new
        return tirx.AllocBuffer(new, span=stmt.span)

    body = tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, alloc))
    if not remap:
        return func
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
    return func.with_body(body)


def _both_vector_cores(func):
    """A kernel whose every statement is vector work (no cube scope, no atomics) runs two
    blocks per AI core group: vector core ``vid`` of group ``cid`` runs block
    ``2 * cid + vid`` (each with its own UB), and the grid shrinks to ceil(blocks / 2). None
    for any other kernel."""
    cid_loop = func.body
    vid_loop = cid_loop.body if isinstance(cid_loop, tirx.For) else None
    if not (isinstance(vid_loop, tirx.For) and vid_loop.thread_binding is not None and
            str(vid_loop.thread_binding.thread_tag) == VID_TAG):
        return None
    scopes, atomics = [], []
    tvm_ffi.structural_walk(func.body, (tirx.AttrStmt, lambda a: scopes.append(
        str(a.value.value)) if a.attr_key == SCOPE_KEY else None))
    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, lambda c: atomics.append(c) if isinstance(
        c.op, tvm.ir.Op) and "atomic" in str(c.op.name) else None))
    if scopes != ["V"] or atomics:
        return None
    cid, vid, blocks = cid_loop.loop_var, vid_loop.loop_var, cid_loop.extent
    block = cid * 2 + vid

    def scope(stmt):
        if stmt.attr_key != SCOPE_KEY:
            return stmt
        body = tvm_ffi.structural_map(stmt.body, (tirx.Var, lambda v: block
                                                  if v.same_as(cid) else v))
        guarded = tirx.IfThenElse(tirx.LT(block, blocks), body, None)
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, guarded, span=stmt.span)

    inner = tvm_ffi.structural_map(vid_loop, (tirx.AttrStmt, scope))
    groups = tirx.floordiv(blocks + 1, 2)
    if isinstance(blocks, tirx.IntImm):
        groups = tirx.IntImm("int32", (int(blocks.value) + 1) // 2)
    loop = tirx.For(cid, 0, groups, cid_loop.kind, inner,
                    thread_binding=tirx.IterVar(tvm.ir.Range(0, groups), cid,
                                                tirx.IterVar.ThreadIndex,
                                                str(cid_loop.thread_binding.thread_tag)),
                    annotations=cid_loop.annotations, span=cid_loop.span)
    return func.with_body(loop)


def _one_vector_core(func):
    """Portable vector code runs on vector sub-core 0 only (both would write the same GM),
    unless it can take two blocks per group (:func:`_both_vector_cores`)."""
    if WORKSPACES_KEY in func.attrs:  # split kernels guard their own work (split.py)
        return func
    vid_loop = func.body.body if isinstance(func.body, tirx.For) else None
    if not (isinstance(vid_loop, tirx.For) and vid_loop.thread_binding is not None and
            str(vid_loop.thread_binding.thread_tag) == VID_TAG):
        return func
    paired = _both_vector_cores(func)
    if paired is not None:
        return paired
    vid = vid_loop.loop_var

    def scope(stmt):
        if stmt.attr_key != SCOPE_KEY or str(stmt.value.value) != "V":
            return stmt
        guarded = tirx.IfThenElse(tirx.EQ(vid, tirx.const(0, "int32")), stmt.body, None)
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, guarded, span=stmt.span)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AttrStmt, scope)))


def lower_vector_func(func, arch=None):
    """The pass on one function; ``arch`` (:class:`..facts.arch.Arch`, None: A2) says whether
    tile selects run on the vector unit (A2's Compare and Select)."""
    if func.attrs is None or PORTABLE_KEY not in func.attrs:
        return func
    func = _pad_tiles(func)
    func = _one_vector_core(func)
    lowering = _Lowering(selects=arch is None or arch.name == ARCH)
    return func.with_body(lowering.visit(func.body))


def lower_vector(arch=None):
    return prim_func_pass("AscendVector", lambda func: lower_vector_func(func, arch))
