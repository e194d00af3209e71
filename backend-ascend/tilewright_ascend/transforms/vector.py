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
  functions) are first written as float32 expressions of those with one (:data:`.vecmath.MATH`).
  An operand indexed by the row only (``row_max[i]``) is a row broadcast (one scalar per
  row, read with GetValue on the S pipe); one indexed by the column only (``W[j]``) a column
  broadcast (one vector per row); one tile element indexed by no loop variable (``total[0]``)
  one scalar for the whole nest, read with GetValue.
- A select ``c ? x : y`` whose condition is comparisons of tile values (or of a tile value
  with a scalar, or ``T.isnan``, or of loop indices on float32 index tiles from CreateVecIndex
  where float32 is exact: :mod:`.indices`) joined by and/or/not becomes Compare/Compares
  into uint8 bit masks, And/Or/Not of the masks and Select on A2
  (:meth:`.selects.SelectLowering.select`; what the instructions take is
  :data:`..facts.instructions.COMPARE_MODES`), and so does a nest guarded by such a
  condition, each store ``x = v`` written ``x = c ? v : x``. Compare reads whole 256-byte
  repeats: a source whose tile does not hold them is copied into one that does.
- An elementwise op or a select over whole tiles whose rows this pass padded, all of one
  shape, runs once over the padded range (:meth:`_Lowering.widen`), not once per row.
- What the vector unit cannot do (other conditions and selects, integer division, index
  arithmetic as data, index conditions float32 does not hold exactly) stays a loop of
  GetValue/SetValue on the scalar unit, marked :data:`SCALAR_KEY` with the reason; the
  codegen writes the reason as a comment. Math functions in it run on the vector unit: over
  the tile before the loop where they can, else inside the loop on one-element tiles
  (:meth:`_Lowering.split`).
- ``T.reduce_*`` become ``VREDUCE`` (one reduction per row, vector adds down columns)
  with a UB work tile (integer ones, which WholeReduce does not take, a scalar loop);
  ``T.cumsum`` and ``T.transpose`` a scalar loop; ``T.fill`` of UB Duplicate; a ``T.copy``
  that converts dtypes goes through a UB staging tile and Cast (float -> integer saturating,
  :func:`..facts.instructions.float_to_int_steps`; an integer conversion that may overflow
  wraps in a scalar loop, since A2's Cast saturates); a scalar ``T.atomic_*`` writes
  its value into a one-element UB tile that the atomic copy adds to global memory.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.errors import KernelError, UnsupportedOpError, span_location
from tilewright.ir import (
    ATOMIC_OPS,
    INTEGER_REDUCE_KINDS,
    REDUCE_OPS,
    SCAN_OPS,
    TRANSPOSE,
    Region,
    decode,
    make_call,
    transpose_dims,
)
from tilewright.transform.lowering_utils import SCAN_COMBINE
from tilewright.transform.walk import prim_func_pass
from tvm import tirx

from ..analysis.buffers import flat_index, loads_and_stores
from ..facts.arch import ALIGN, ARCH
from ..facts.dtypes import dtype_bytes
from ..facts.instructions import (
    ROUNDING_CASTS,
    VECTOR_DTYPES,
    cast_route,
    computes,
    converts,
    float_to_int_steps,
)
from ..facts.keys import (
    PORTABLE_KEY,
    SCALAR_KEY,
    SCOPE_KEY,
    SIMT_KEY,
    TEMPS_KEY,
    VID_TAG,
    WORKSPACES_KEY,
)
from ..facts.ops import VBIN, VBRC, VDUP, VREDUCE, VSCA, VUN
from .scalar_nest import (
    any_scalar,
    bounds_only,
    check_scalar_buffers,
    fold_branches,
    holds,
    merge_scalar,
    scalar_conversion,
    scalar_reduction,
)
from .selects import SelectLowering, guard_as_selects
from .simt import lower_simt
from .tile_exprs import (
    FLOATS,
    INTEGERS,
    UB,
    Unvectorizable,
    as_exprs,
    cast_to,
    inside,
    ints,
    is_if_then_else,
    loads,
    non_unit,
    padded_shape,
    seq,
    simplify,
    subst,
    tile_element,
    tile_operand,
    uses_any,
    with_span,
)
from .vecmath import (
    UNARY_CALLS,
    expand_math,
    fold_constant_math,
    lacking_math,
    math_name,
    scalar_lacks,
)

# portable tile ops this pass rewrites (their rules are the vector-path ops)
PORTABLE_REDUCTIONS = tuple(sorted(REDUCE_OPS))
PORTABLE_VECTOR_OPS = (*PORTABLE_REDUCTIONS, *sorted(SCAN_OPS), TRANSPOSE.name)
# the dtypes a portable reduction takes: those the WholeReduce family computes on, bfloat16
# through a float32 copy, and the integers A2's WholeReduce lacks on the scalar unit (the
# capabilities declare them, so other dtypes are refused before lowering and reported
# unsupported by the conformance suite)
_SCALAR_REDUCTION_DTYPES = ("int8", "int16", "int32")
REDUCTION_DTYPES = frozenset({*VECTOR_DTYPES["WholeReduceSum"], "bfloat16",
                              *_SCALAR_REDUCTION_DTYPES})
# the bitwise kinds (no WholeReduce instruction) are always the scalar unit's, on every
# integer dtype the backend holds
BITWISE_REDUCTION_DTYPES = frozenset({*_SCALAR_REDUCTION_DTYPES, "int64", "uint8", "uint16",
                                      "uint32"})

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
_COMMUTES = {"add", "mul", "max", "min"}
# a vector op -> the A2 instruction family that computes it (its dtypes: VECTOR_DTYPES)
_INSTRUCTION = {"add": "Add", "sub": "Sub", "rsub": "Sub", "mul": "Mul", "div": "Div",
                "rdiv": "Div", "max": "Max", "min": "Min"}
_REVERSED = {"sub": "rsub", "div": "rdiv"}
# the vector-path ops computed element by element, every tile operand of one shape
_ELEMENTWISE = (VBIN.name, VSCA.name, VUN.name, VDUP.name)


class _Lowering(SelectLowering):
    """Rewrites one converted kernel body."""

    def __init__(self, selects: bool = False, padded=()):
        self.selects = selects  # tile selects on the vector unit (Compare + Select: A2)
        self.padded = set(padded)  # the UB tiles this pass padded: nothing reads their padding
        self.count = 0
        self.loops: list = []  # the loops around the statement being rewritten
        self.launch: list = []  # (block index, 0, extent) of the kernel's launch
        self.computed = []  # see eval
        self.conditions: list = []  # the conditions bound by fold_branches
        self.holds: dict = {}  # temporary -> what it holds, in the user's terms (TEMPS_KEY)

    # -- temporaries ---------------------------------------------------------------------
    def temp(self, extents, dtype, out: list, reach: int = 0,
             holds: str = "an intermediate value of a T.Parallel loop or tile op") -> Region:
        """A fresh UB tile; ``reach`` elements from its start readable at least (the
        allocation grows by whole rows: Compare reads whole repeats); ``holds`` says what it
        holds in the user's terms, for error messages (:data:`TEMPS_KEY`)."""
        shape = [int(e) for e in extents] or [1]
        self.count += 1
        alloc_shape = padded_shape(shape, dtype) or shape
        row = math.prod(alloc_shape[1:])
        if reach > math.prod(alloc_shape):
            alloc_shape = [-(-reach // row), *alloc_shape[1:]]
        buf = tirx.decl_buffer(alloc_shape, dtype, f"tw_t{self.count}", scope=UB)
        if list(alloc_shape) != shape:
            self.padded.add(buf)
        self.holds[buf] = f"the UB tile of {holds}"
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
                return seq(self.parallel(stmt))
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
            bound = stmt.attr_key == "thread_extent" and hasattr(stmt.node, "var")
            if bound:
                self.launch.append((stmt.node.var, 0, stmt.value))
            body = self.visit(stmt.body)
            if bound:
                self.launch.pop()
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body, span=stmt.span)
        if isinstance(stmt, tirx.BufferStore):  # one element: a T.Parallel of extent 1
            one = tirx.For(tirx.Var("e0", "int32"), 0, 1, tirx.ForKind.SERIAL, stmt,
                           annotations={"tw.loop": "parallel"}, span=stmt.span)
            return seq(self.parallel(one))
        call = decode(stmt)
        if call is not None:
            family = "reduce" if call.name in REDUCE_OPS else \
                "atomic" if call.name in ATOMIC_OPS else \
                "scan" if call.name in SCAN_OPS else call.name
            handler = getattr(self, "op_" + family, None)
            if handler is not None:
                return seq(handler(call, stmt))
        return stmt

    @property
    def ranges(self) -> list:
        """(variable, min, extent) of each serial loop around the statement being rewritten
        and each block index of the launch."""
        return [*self.launch, *((lp.loop_var, lp.min, lp.extent) for lp in self.loops)]

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
            if sd == dd and _unaligned(src, dst):
                return [_element_copy(src, dst, stmt.span)]
            if sd == dd:
                return [make_call(VUN.name, {"dst": dst, "src": src}, {"op": "copy"},
                                  span=stmt.span)]
            out = []
            self.convert(dst, src, out, stmt.span)
            return out
        # T.copy reads 0 past the end of a tensor: zero a tile the copy may not fill
        zero = [make_call(VDUP.name, {"dst": dst, "value": tirx.const(0, dd)}, span=stmt.span)] \
            if ss == "global" and ds == UB and not inside(src, self.loops) else []
        if sd == dd or (ss, ds) not in (("global", UB), (UB, "global")):
            return [*zero, stmt]
        out = []
        if ss == "global":  # GM -> UB staging tile in the source dtype -> Cast
            stage = self.temp(non_unit(dst), sd, out,
                              holds=f"{src.buffer.name!r} before its conversion to {dd}")
            if zero:
                out.append(make_call(VDUP.name, {"dst": stage, "value": tirx.const(0, sd)},
                                     span=stmt.span))
            out.append(make_call("copy", {"src": src, "dst": stage}, span=stmt.span))
            self.convert(dst, stage, out, stmt.span)
        else:
            stage = self.temp(non_unit(src), dd, out,
                              holds=f"{src.buffer.name!r} converted to {dd}")
            self.convert(stage, src, out, stmt.span)
            out.append(make_call("copy", {"src": stage, "dst": dst}, span=stmt.span))
        return out

    def op_reduce(self, call, stmt):
        src, dst = call.operands["src"], call.operands["dst"]
        kind = call.name.removeprefix("reduce_")
        if call.attrs.get("nan_propagate"):
            raise UnsupportedOpError(f"T.{call.name}(..., nan_propagate=True): backend 'ascend' "
                                     "reduces with its vector instructions, whose handling of "
                                     "a NaN element it does not choose; filter NaNs first",
                                     span_location(stmt.span))
        if str(src.buffer.scope()) != UB or str(dst.buffer.scope()) != UB:
            raise KernelError(f"T.{call.name}: backend 'ascend' reduces UB tiles (fragments); "
                              f"{src.buffer.name!r} -> {dst.buffer.name!r} are not both tiles",
                              span_location(stmt.span))
        dims = non_unit(src)
        dim = call.attrs["dim"]
        rank = len(src.extents)
        dim = dim + rank if dim < 0 else dim
        out = []
        extents = ints(src.extents)
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
        if kind in INTEGER_REDUCE_KINDS or (dtype in _SCALAR_REDUCTION_DTYPES and
                                            not computes("WholeReduceSum", dtype)):
            return [scalar_reduction(src, dst, kind, dim, call.attrs["clear"], stmt.span)]
        if not computes("WholeReduceSum", dtype):
            if not dtype.startswith("bfloat"):
                raise KernelError(f"T.{call.name}: A2's vector unit reduces float16 and float32, "
                                  f"not {dtype}", span_location(stmt.span))
            # bfloat16: reduce a float32 copy (A2 converts bfloat16 but does not compute in it)
            wide_src = self.temp(ints(src.extents), "float32", out)
            wide_dst = self.temp(ints(dst.extents), "float32", out)
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
        work = self.temp([-(-math.prod(ints(src.buffer.shape)) // per) * per +
                          -(-rows // per) * per],
                         str(src.buffer.dtype), out)
        out.append(make_call(VREDUCE.name, {"dst": dst, "src": src, "work": work},
                             {"kind": kind, "dim": 1 if dim == rank - 1 else 0,
                              "clear": clear}, span=span))

    def op_scan(self, call, stmt):
        """``T.cumsum`` / ``T.cummax``: a loop on the scalar unit, each element combined with
        the result before it."""
        src, dst = call.operands["src"], call.operands["dst"]
        extents = ints(src.extents)
        if extents is None or str(src.buffer.scope()) != UB or str(dst.buffer.scope()) != UB:
            raise KernelError(f"T.{call.name}: backend 'ascend' scans UB tiles of static shape",
                              span_location(stmt.span))
        dim = call.attrs["dim"] % len(extents)
        loops = [tirx.Var(f"c{n}", "int32") for n in range(len(extents))]
        axis = loops[dim]
        n = extents[dim]
        pos = (n - 1 - axis) if call.attrs["reverse"] else axis
        prev = (pos + 1) if call.attrs["reverse"] else (pos - 1)

        def at(region, p):
            idx = [tirx.const(0, "int32") + s + (p if d == dim else loops[d])
                   for d, s in enumerate(as_exprs(region.starts))]
            return idx

        x = tirx.BufferLoad(src.buffer, at(src, pos))
        if str(src.buffer.dtype) != str(dst.buffer.dtype):
            x = tirx.Cast(str(dst.buffer.dtype), x)
        acc = tirx.BufferLoad(dst.buffer, at(dst, prev))
        body = tirx.IfThenElse(tirx.EQ(axis, 0), tirx.BufferStore(dst.buffer, x, at(dst, pos)),
                               tirx.BufferStore(dst.buffer, SCAN_COMBINE[call.name](acc, x),
                                                at(dst, pos)))
        for d in reversed(range(len(extents))):
            body = tirx.For(loops[d], 0, extents[d], tirx.ForKind.SERIAL, body,
                            annotations={SCALAR_KEY: f"T.{call.name}: each element combines "
                                         "with the one before it"} if d == 0 else {})
        return [with_span(body, stmt.span)]

    def op_transpose(self, call, stmt):
        """``T.transpose``: a loop on the scalar unit, each element read and written at its
        transposed place (converted to the destination's dtype)."""
        src, dst = call.operands["src"], call.operands["dst"]
        sdims, ddims = transpose_dims(src.extents), transpose_dims(dst.extents)
        extents = ints([src.extents[d] for d in sdims])
        if extents is None or str(src.buffer.scope()) != UB or str(dst.buffer.scope()) != UB:
            raise KernelError("T.transpose: backend 'ascend' transposes UB tiles of static "
                              f"shape ({src.buffer.name!r} and {dst.buffer.name!r} are not "
                              "both)", span_location(stmt.span))
        loops = [tirx.Var(f"t{n}", "int32") for n in range(len(extents))]
        swapped = [*loops[:-2], loops[-1], loops[-2]]

        def at(region, dims, index):
            return [tirx.const(0, "int32") + s + (index[dims.index(d)] if d in dims else 0)
                    for d, s in enumerate(as_exprs(region.starts))]

        x = tirx.BufferLoad(src.buffer, at(src, sdims, loops))
        if str(src.buffer.dtype) != str(dst.buffer.dtype):
            x = tirx.Cast(str(dst.buffer.dtype), x)
        body = tirx.BufferStore(dst.buffer, x, at(dst, ddims, swapped))
        for d in reversed(range(len(extents))):
            body = tirx.For(loops[d], 0, extents[d], tirx.ForKind.SERIAL, body,
                            annotations={SCALAR_KEY: "T.transpose: each element moves to its "
                                         "transposed place"} if d == 0 else {})
        return [with_span(body, stmt.span)]

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
        extents = ints([lp.extent for lp in loops])
        if extents is None:
            raise KernelError("T.Parallel on backend 'ascend' needs constant extents",
                              span_location(loop.span))
        call = decode(body) if isinstance(body, tirx.Evaluate) else None
        if call is not None and call.name in ATOMIC_OPS and \
                not isinstance(call.operands["src"], Region):
            return self.parallel_atomic(loop, loops, variables, extents, call, body)
        pre, post = [], []
        guard = written = None  # written: the guard as written, kept on the scalar unit
        if isinstance(body, tirx.IfThenElse) and body.else_case is None:
            guard = written = body.condition
            body = body.then_case
        if guard is not None and bounds_only(guard, body, variables):
            guard = None
        if guard is not None and fold_guard and self.selects:
            folded = guard_as_selects(guard, body)
            if folded is not None:  # each store x = v as x = guard ? v : x, on the vector unit
                for lp in reversed(loops):
                    folded = tirx.For(lp.loop_var, lp.min, lp.extent, lp.kind, folded,
                                      annotations=lp.annotations, span=lp.span)
                attempt = self.parallel(folded, fold_guard=False)
                if not any_scalar(attempt):
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
            nest = fold_branches(body, self.conditions)
            for lp, v in reversed(list(zip(loops, variables))):
                nest = tirx.For(v, lp.min, lp.extent, tirx.ForKind.SERIAL, nest,
                                annotations={SCALAR_KEY: reason} if lp is loops[0] else {},
                                span=lp.span)
            check_scalar_buffers(nest, loop.span)
            if lacking_math(nest):  # on a value only the nest knows
                nest = seq(self.split(nest, reason, math))
            ops = [*[with_span(s, loop.span) for s in math], nest]
        else:
            ops = [with_span(self.widen(s), loop.span) for s in ops]
        return [*pre, *ops, *post]

    def parallel_atomic(self, loop, loops, variables, extents, call, stmt):
        """An element ``T.atomic_*`` in a T.Parallel, ``Z[i, base + j]`` with each loop
        variable alone (plus what the loop does not change) in its own dimension, in loop
        order: the values go into a UB tile of the region (element stores, a T.Parallel
        lowered like any other), then one tile atomic adds it into the region. Distinct
        iterations reach distinct elements, so one atomic copy of the tile is the same sum."""
        dst, src = call.operands["dst"], call.operands["src"]
        span = stmt.span if stmt.span is not None else loop.span
        dtype = str(dst.buffer.dtype)
        starts, shape, tile_index = [], [], []
        rest = [(v, e) for v, e in zip(variables, extents) if e != 1]
        for index in as_exprs(dst.starts):
            used = [v for v in variables if uses_any(index, [v])]
            if not used:
                starts.append(index)
                shape.append(1)
                tile_index.append(tirx.const(0, "int32"))
                continue
            base = simplify(index - used[0])
            if len(used) > 1 or uses_any(base, variables):
                break
            at = next((n for n, (v, _) in enumerate(zip(variables, extents))
                       if v.same_as(used[0])), None)
            if rest and rest[0][0].same_as(used[0]):
                rest.pop(0)
            elif extents[at] != 1:
                break
            starts.append(base)
            shape.append(extents[at])
            tile_index.append(used[0])
        else:
            if not rest:
                return self._atomic_tile(loops, variables, call, src, dst, starts, shape,
                                         tile_index, dtype, span)
        raise KernelError(f"T.{call.name} inside T.Parallel: backend 'ascend' adds one tile "
                          f"into global memory per loop, so each loop variable must index its "
                          f"own dimension of {dst.buffer.name!r}, in loop order, plus a value "
                          f"the loop does not change (as in {dst.buffer.name}[i, base + j]); "
                          f"this one writes {dst.buffer.name}{list(as_exprs(dst.starts))}",
                          span_location(span))

    def _atomic_tile(self, loops, variables, call, src, dst, starts, shape, tile_index,
                     dtype, span):
        out = []
        tile = self.temp(shape, dtype, out)
        nest = tirx.BufferStore(tile.buffer, cast_to(src, dtype), tile_index)
        for lp in reversed(loops):
            nest = tirx.For(lp.loop_var, lp.min, lp.extent, lp.kind, nest,
                            annotations=lp.annotations, span=lp.span)
        out.extend(self.parallel(with_span(nest, span)))
        region = Region(dst.buffer, tuple(starts), tuple(tirx.IntImm("int32", e)
                                                         for e in shape))
        out.append(make_call(call.name, {"dst": region, "src": tile}, call.attrs, span=span))
        return out

    def widen(self, op):
        """``op`` over whole padded tiles of one shape (:meth:`padded_alike`) as one range,
        padding and all, when it is elementwise (Add..Min, Adds..Mins, the unary ops,
        Duplicate): one instruction instead of one per row."""
        call = decode(op) if isinstance(op, tirx.Evaluate) else None
        if call is None or call.name not in _ELEMENTWISE:
            return op
        names = ["dst", *(n for n, v in call.operands.items()
                          if isinstance(v, Region) and n != "dst")]  # the written one first
        values = self.padded_alike([("t", call.operands[n], ()) for n in names])
        if values is None:
            return op
        operands = dict(call.operands)
        operands.update((n, v[1]) for n, v in zip(names, values))
        return make_call(call.name, operands, call.attrs, span=op.span)

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
                if not uses_any(call, [v for v, _ in bound]):
                    break
                call = subst(call, bound)
            return call

        def hoistable(call, blocked) -> bool:
            if uses_any(call, inner):
                return False
            for x in loads(call):
                if str(x.source.scope()) != UB:
                    return False
                if x.source not in stores or (once and x.source not in blocked):
                    continue
                operand = tile_operand(x.source, x.indices, variables, extents)
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
                if math_name(call) is None or not scalar_lacks(call):
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
        return seq(out)

    def math_tile(self, call, variables, extents, ops):
        """A load of the UB temporary into which vector instructions compute ``call``."""
        if uses_any(call, variables):
            value = self.eval(expand_math(call), variables, extents, ops, None)
            if value[0] != "t":
                raise Unvectorizable(f"{call} is a scalar expression")
            return tile_element(value[1], value[2], variables, extents)
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
        value = self.eval(expand_math(on_tile), [], [], ops, None)
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
            return merge_scalar([x for s in stmt.seq for x in self.split(s, reason, allocs)])
        if isinstance(stmt, tirx.For) and ints([stmt.extent]) == [1]:  # one trip: its body
            return self.split(subst(stmt.body, [(stmt.loop_var, stmt.min)]), reason, allocs)
        if isinstance(stmt, tirx.For):
            return [tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL,
                             seq(self.split(stmt.body, reason, allocs)),
                             annotations={"tw.loop": "serial"}, span=stmt.span)]
        if isinstance(stmt, tirx.IfThenElse) and not loads(stmt.condition) and \
                lacking_math(stmt):
            other = None if stmt.else_case is None else \
                seq(self.split(stmt.else_case, reason, allocs))
            return [tirx.IfThenElse(stmt.condition, seq(self.split(stmt.then_case, reason,
                                                                    allocs)),
                                    other, span=stmt.span)]
        out = []

        def stage(call):
            if math_name(call) is None or not scalar_lacks(call):
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
        return merge_scalar(out)

    def stage_global(self, body, variables, extents, pre, post, span, keep):
        """Replace global loads and stores in ``body`` by UB tiles copied in and out."""
        staged = {}

        problems = []  # recorded, not raised: the callbacks run inside TVM

        def region_of(buffer, indices):
            starts, exts, used = [], [], []
            for index in indices:
                mine = [v for v in variables if uses_any(index, [v])]
                if not mine:
                    starts.append(index)
                    exts.append(1)
                    continue
                v = mine[0]
                start = simplify(subst(index, [(v, tirx.const(0, "int32"))]))
                rest = simplify(index - start - v)
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
                shape = [extents[variables.index(v)] for v in used] or [1]
                index = list(used) or [tirx.const(0, "int32")]
                if used and exts[-1] == 1 and any(e > 1 for e in exts[:-1]):
                    # a column of the tensor: rows of one element, each on its own 32-byte
                    # row of the tile (DataCopyPad moves whole UB blocks per row)
                    shape, index = [*shape, 1], [*index, tirx.const(0, "int32")]
                tile = self.temp(shape, str(buffer.dtype), pre,
                                 holds=f"the elements of {buffer.name!r} that a T.Parallel "
                                       "loop reads or stores")
                staged[key] = (region, tile, index, {"read": False, "write": False})
            region, tile, index, how = staged[key]
            how["write" if write else "read"] = True
            return tile, index

        def load(x):
            if str(x.source.scope()) != "global":
                return x
            tile, index = tile_for(x.source, list(x.indices), False)
            if tile is None:
                return x
            return tirx.BufferLoad(tile.buffer, index)

        def store(x):
            if str(x.buffer.scope()) != "global":
                return x
            tile, index = tile_for(x.buffer, list(x.indices), True)
            if tile is None:
                return x
            return tirx.BufferStore(tile.buffer, x.value, index, span=x.span)

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
        dst = tile_operand(store.buffer, store.indices, variables, extents)
        if dst is None or len(dst[1]) != len(variables):
            raise Unvectorizable(f"the store to {store.buffer.name!r} does not cover every "
                                 "loop variable")
        self.eval(expand_math(store.value), variables, extents, ops, target=dst)

    def eval(self, e, variables, extents, ops, target=None):
        """Emit ops computing ``e``; returns ("s", expr) or ("t", region, dims)."""
        full = tuple(range(len(variables)))
        self.computed = []  # (expression, value): a subexpression used twice is computed once
        value = self.value_of(e, variables, extents, ops, target)
        if target is None:
            return value
        if value[0] == "s":
            ops.append(make_call(VDUP.name, {"dst": target[0], "value": cast_to(value[1],
                                             str(target[0].buffer.dtype))}))
        elif value[1] is not target[0]:
            if value[2] == full and not _same_rows(value[1], target[0]):
                raise Unvectorizable(f"{target[0].buffer.name!r} and {value[1].buffer.name!r} "
                                     "lay the loop's elements out differently (a column, one "
                                     "element a row, and a row)")
            if value[2] != full:
                zero = tirx.const(0, str(target[0].buffer.dtype))
                ops.append(make_call(VDUP.name, {"dst": target[0], "value": zero}))
                self.broadcast("add", target[0], target[0], value, ops)
            elif str(value[1].buffer.dtype) == str(target[0].buffer.dtype):
                ops.append(make_call(VUN.name, {"dst": target[0], "src": value[1]},
                                     {"op": "copy"}))
            else:
                self.convert(target[0], value[1], ops)
        return value

    def convert(self, dst: Region, src: Region, ops, span=None) -> None:
        """``src`` cast into ``dst`` through the chain of Casts A2 has (``cast_route``), each
        intermediate in a UB temporary of ``dst``'s extents; a float -> integer conversion
        by :func:`float_to_int_steps` (saturating, NaN gives 0); an integer conversion that
        may wrap, and a pair no Cast converts, by :func:`scalar_conversion`."""
        sd, dd = str(src.buffer.dtype), str(dst.buffer.dtype)
        static = ints(dst.extents) is not None and ints(src.extents) is not None
        if sd in INTEGERS and dd in INTEGERS and not holds(dd, sd) and static:
            ops.append(scalar_conversion(dst, src, span, "an integer conversion wraps; A2's "
                                         "Cast saturates"))
            return
        if not converts(sd, dd) and static:
            ops.append(scalar_conversion(dst, src, span, f"A2's Cast does not convert {sd} "
                                         f"to {dd}"))
            return
        if sd in FLOATS and dd in INTEGERS:
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
            out = dst if n == len(steps) - 1 else self.temp(ints(dst.extents), dtype, ops)
            ops.append(make_call(VUN.name, {"dst": out, "src": src}, {"op": "cast"},
                                 span=span))
            src = out

    def result_tile(self, dims, extents, dtype, ops, target, like=None):
        """The target when it fits, else a temporary over ``dims``; in the layout of the operand
        ``like`` where its rows differ from the temporary's (a column read as ``a[i, 0]`` in
        ``T.Parallel(n, 1)`` is ``n`` rows of one element, not one row of ``n``)."""
        if target is not None and tuple(target[1]) == tuple(dims) and \
                str(target[0].buffer.dtype) == dtype and \
                (like is None or _same_rows(like, target[0])):
            return target[0]
        shape = [extents[d] for d in dims]
        if like is not None and ints(like.extents) is not None and \
                _rows(ints(like.extents)) != _rows(shape):
            shape = ints(like.extents)
        return self.temp(shape, dtype, ops)

    def value_of(self, e, variables, extents, ops, target):
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
        if not loads(e):
            if uses_any(e, variables):
                raise Unvectorizable(f"{e} computes with the loop index")
            return ("s", e)
        if kind == "TensorLoad":
            operand = tile_operand(e.source, e.indices, variables, extents)
            if operand is None:
                raise Unvectorizable(f"the load {e} is not a tile element")
            return ("t", operand[0], operand[1])
        if kind == "Select" or is_if_then_else(e):
            return self.select(e, variables, extents, ops, target)
        converts = kind == "Cast" and str(e.value.ty) in FLOATS and dtype in INTEGERS
        if dtype not in FLOATS and not converts:
            raise Unvectorizable(f"{e} computes in {dtype}; the vector path handles floats "
                                 "and converts them to integers")
        if kind == "Cast":
            inner = self.value_of(e.value, variables, extents, ops, None)
            if inner[0] == "s":
                return ("s", e)
            if str(inner[1].buffer.dtype) == dtype:
                return inner
            out = self.result_tile(inner[2], extents, dtype, ops, target, like=inner[1])
            self.convert(out, inner[1], ops)
            return ("t", out, inner[2])
        if kind in _BINARY:
            op = _BINARY[kind]
            a = self.value_of(e.a, variables, extents, ops, None)
            b = self.value_of(e.b, variables, extents, ops, None)
            if a[0] == "s" and b[0] == "s":
                return ("s", e)
            if a[0] == "s" or b[0] == "s":
                tile, scalar = (a, b[1]) if b[0] == "s" else (b, a[1])
                if a[0] == "s":
                    op = op if op in _COMMUTES else _REVERSED[op]
                value = getattr(simplify(scalar), "value", None)
                if target is None and (op, value) in (("mul", 1.0), ("div", 1.0), ("add", 0.0),
                                                      ("sub", 0.0)):
                    return tile  # x * 1, x + 0: nothing to compute
                out = self.result_tile(tile[2], extents, dtype, ops, target, like=tile[1])
                ops.append(make_call(VSCA.name, {"dst": out, "src": tile[1],
                                                 "scalar": cast_to(scalar, dtype)}, {"op": op}))
                return ("t", out, tile[2])
            if () in (a[2], b[2]) and a[2] != b[2]:  # one tile element for every lane
                if a[2] == ():
                    a, b = b, a
                    op = op if op in _COMMUTES else _REVERSED[op]
                out = self.result_tile(a[2], extents, dtype, ops, target)
                self.broadcast(op, out, a[1], b, ops)
                return ("t", out, a[2])
            if a[2] == b[2]:
                if not _same_rows(a[1], b[1]):
                    raise Unvectorizable(f"{a[1].buffer.name!r} and {b[1].buffer.name!r} lay "
                                         "the loop's elements out differently (a column, one "
                                         "element a row, and a row)")
                out = self.result_tile(a[2], extents, dtype, ops, target, like=a[1])
                ops.append(make_call(VBIN.name, {"dst": out, "src0": a[1], "src1": b[1]},
                                     {"op": op}))
                return ("t", out, a[2])
            full = tuple(range(len(variables)))
            if len(variables) != 2:
                raise Unvectorizable(f"{e} broadcasts in a {len(variables)}-D nest")
            if a[2] != full and b[2] != full:  # row op column: materialise the row operand
                tile = self.temp(extents, dtype, ops)
                ops.append(make_call(VDUP.name, {"dst": tile, "value": tirx.const(0, dtype)}))
                self.broadcast("add", tile, tile, a, ops)
                a = ("t", tile, full)
            if a[2] != full:
                a, b = b, a
                op = op if op in _COMMUTES else _REVERSED[op]
            out = self.result_tile(full, extents, dtype, ops, target)
            self.broadcast(op, out, a[1], b, ops)
            return ("t", out, full)
        if kind == "Call" and isinstance(e.op, tvm.ir.Op):
            name = e.op.name
            if name == "tirx.exp2":  # exp(x * ln 2); a constant factor of x absorbs ln 2
                arg, ln2 = e.args[0], tirx.const(math.log(2.0), dtype)
                if isinstance(arg, tirx.Mul) and not loads(arg.b) and \
                        not uses_any(arg.b, variables):
                    arg = tirx.Mul(arg.a, simplify(arg.b * ln2))
                else:
                    arg = arg * ln2
                scaled = self.value_of(arg, variables, extents, ops, None)
                return self._unary("exp", scaled, extents, dtype, ops, target)
            if name in UNARY_CALLS and len(e.args) == 1:
                inner = self.value_of(e.args[0], variables, extents, ops, None)
                return self._unary(UNARY_CALLS[name], inner, extents, dtype, ops, target)
            if math_name(e) in ROUNDING_CASTS and dtype == "float32":
                inner = self.value_of(e.args[0], variables, extents, ops, None)
                return self._unary(math_name(e), inner, extents, dtype, ops, target)
        raise Unvectorizable(f"{kind} {e} has no vector instruction here")

    def _unary(self, op, inner, extents, dtype, ops, target):
        if inner[0] == "s":
            raise Unvectorizable(f"{op} of a scalar expression")
        out = self.result_tile(inner[2], extents, dtype, ops, target, like=inner[1])
        ops.append(make_call(VUN.name, {"dst": out, "src": inner[1]}, {"op": op}))
        return ("t", out, inner[2])

    @staticmethod
    def broadcast(op, out, tile, vec, ops):
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




def _rows(extents) -> tuple[int, int] | None:
    """The (rows, columns) a vector instruction sees in a region of these extents."""
    if extents is None:
        return None
    return (math.prod(extents[:-1]), extents[-1]) if extents else (1, 1)


def _start(region: Region):
    """The element offset at which ``region`` starts in its tile: an int, or None."""
    offset = simplify(flat_index(region.buffer, as_exprs(region.starts)))
    return int(offset.value) if isinstance(offset, tirx.IntImm) else None


def _unaligned(*regions) -> bool:
    """Whether a region of static shape starts off a 32-byte boundary of its UB tile, where no
    vector instruction starts."""
    for r in regions:
        at = _start(r)
        if ints(r.extents) is not None and at is not None and \
                at * dtype_bytes(str(r.buffer.dtype)) % ALIGN:
            return True
    return False


def _element_copy(src: Region, dst: Region, span):
    """A UB -> UB copy element by element on the scalar unit (GetValue/SetValue)."""
    shape = [e for e in ints(src.extents) if e != 1]
    if shape != [e for e in ints(dst.extents) if e != 1]:
        raise KernelError(f"T.copy {src.buffer.name!r} -> {dst.buffer.name!r}: the regions "
                          f"have different shapes ({ints(src.extents)} vs {ints(dst.extents)})",
                          span_location(span))
    shape = shape or [1]  # one element: a loop of one
    loops = [tirx.Var(f"c{n}", "int32") for n in range(len(shape))]

    def at(region):
        free = iter(loops)
        return [tirx.const(0, "int32") + s + (next(free) if e != 1 else 0)
                for s, e in zip(as_exprs(region.starts), ints(region.extents))]

    body = tirx.BufferStore(dst.buffer, tirx.BufferLoad(src.buffer, at(src)), at(dst))
    where = f"element {_start(src)} of {src.buffer.name!r} -> element {_start(dst)} of " \
        f"{dst.buffer.name!r}"
    reason = f"T.copy {where}: a vector instruction starts on a 32-byte boundary of the " \
        "Unified Buffer"
    for n in reversed(range(len(shape))):
        body = tirx.For(loops[n], 0, shape[n], tirx.ForKind.SERIAL, body,
                        annotations={SCALAR_KEY: reason} if n == 0 else {})
    return with_span(body, span)


def _same_rows(a: Region, b: Region) -> bool:
    """Whether a vector instruction sees regions ``a`` and ``b`` as rows of one length."""
    return _rows(ints(a.extents)) == _rows(ints(b.extents))


def _pad_tiles(func):
    """``func`` with each 2-D-and-up UB tile's rows padded to 32 bytes, and the padded tiles."""
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
        return func, ()
    body = tvm_ffi.structural_map(body, (tirx.Buffer, lambda b: remap.get(b, b)))
    return func.with_body(body), tuple(remap.values())


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
    func, padded = _pad_tiles(func)
    func = _one_vector_core(func)
    lowering = _Lowering(selects=arch is None or arch.name == ARCH, padded=padded)
    func = func.with_body(lowering.visit(fold_constant_math(func.body)))
    return func.with_attr(TEMPS_KEY, lowering.holds) if lowering.holds else func


def lower_vector(arch=None):
    return prim_func_pass("AscendVector", lambda func: lower_vector_func(func, arch))
