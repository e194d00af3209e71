"""Shape symbols that are no tensor's whole dimension: ``A: T.Tensor((n * 4,), ...)``.

A kernel's caller gives a symbol's value through a dimension: ``n`` of ``A: T.Tensor((n,))``
is ``A.shape[0]``. TileLang also reads it from a dimension linear in it (``n * 4``, ``n + 1``,
``3 * n + 1``): the runtime solves it (``tilewright.runtime.call``, which checks the
dimension is such a value), and :func:`bind_solved_symbols` makes the kernel do the same:
the parameter's dimension becomes a variable of its own, which the compiled function reads
from the tensor as it reads any dimension, and the symbol is bound to ``(dim - b) // a`` at
the top of the kernel, before any use. A backend whose host runs only launches (CUDA) uses
:func:`substitute_solved_symbols`: the symbol is replaced by that value wherever it appears.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .walk import prim_func_pass, replace_buffers


def _symbols(expr) -> set:
    found = set()
    tvm_ffi.structural_walk(expr, (tirx.Var, found.add))
    return found


def _linear(extent, var) -> tuple | None:
    """``(a, b)`` with ``extent == a * var + b`` (``a`` a non-zero constant), or None."""
    analyzer = tvm.sym.Analyzer()
    at = [analyzer.simplify(tvm_ffi.structural_map(extent, (tirx.Var, lambda v, x=x: tirx.const(
        x, v.ty.dtype) if v.same_as(var) else v))) for x in (0, 1, 2)]
    a, b = analyzer.simplify(at[1] - at[0]), at[0]
    if not isinstance(a, tirx.IntImm) or int(a.value) == 0 or \
            not analyzer.can_prove_equal(at[2] - at[1], a):
        return None
    rebuilt = analyzer.simplify(a * var + b - extent)
    if not (isinstance(rebuilt, tirx.IntImm) and int(rebuilt.value) == 0):
        return None
    return a, b


def bind_solved_symbols(name: str = "BindSolvedSymbols"):
    """The pass (for a backend whose compiled function reads its tensors' shapes itself: the
    CPU's and the interpreter's packed functions)."""
    return prim_func_pass(name, solve_symbols)


def substitute_solved_symbols(name: str = "SubstituteSolvedSymbols"):
    """The pass for a backend that runs nothing on the host but its launches (CUDA): each
    symbol given only by a linear dimension is replaced by its value ``(dim - b) // a``
    wherever it is used, the grid included, so that the launcher reads the dimension as it
    reads any whole dimension and the kernel computes the symbol."""

    def run(func):
        solved = _solved(func)
        if solved is None:
            return func
        params, binds, body = solved
        values = {}
        for var, value in binds:  # in order: a value may read a symbol solved before
            values[var] = tvm_ffi.structural_map(value, (tirx.Var, lambda v: values.get(v, v)))
        body = tvm_ffi.structural_map(body, (tirx.Var, lambda v: values.get(v, v)))
        return tirx.PrimFunc(params, body, ret_type=func.ret_type, attrs=func.attrs)

    return prim_func_pass(name, run)


def solve_symbols(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each symbol given only by a linear dimension bound from that dimension
    (see the module's doc); unchanged when there is none."""
    solved = _solved(func)
    if solved is None:
        return func
    params, binds, body = solved
    return tirx.PrimFunc(params, tirx.SeqStmt([*(tirx.Bind(v, e) for v, e in binds), body]),
                         ret_type=func.ret_type, attrs=func.attrs)


def _solved(func: tirx.PrimFunc):
    """``(params, [(symbol, value)], body)``: ``func``'s parameters with each linear dimension
    that alone gives a symbol (or reads one so solved) made a variable of its own, each such
    symbol's value over that variable, and the body reading the new buffers; None when there
    is no such symbol."""
    params = list(func.params)
    known = {p for p in params if not tirx.buffer.is_buffer_var(p)}
    for p in params:
        if tirx.buffer.is_buffer_var(p):
            known.update(d for d in (*p.shape, *p.strides) if isinstance(d, tirx.Var))
    binds, replaced, solved = [], {}, set()
    changed = True
    while changed:
        changed = False
        for k, p in enumerate(params):
            if not tirx.buffer.is_buffer_var(p):
                continue
            for d, extent in enumerate(p.shape):
                if isinstance(extent, (tirx.Var, tirx.IntImm)):
                    continue
                used = _symbols(extent)
                unknown = [v for v in used if v not in known]
                if not unknown and used & solved:
                    # another tensor's dimension over a symbol solved here: read as it is (the
                    # caller's runtime checks it), since the symbol is bound only in the body
                    form = None
                elif len(unknown) == 1:
                    form = _linear(extent, unknown[0])
                    if form is None:
                        continue
                else:
                    continue
                dim = tirx.Var(f"{p.name}_dim{d}", extent.ty.dtype)
                shape = list(p.shape)
                shape[d] = dim
                new = tirx.decl_buffer(shape, p.dtype, p.name, scope=p.scope(),
                                       strides=list(p.strides),
                                       data_alignment=int(p.data_alignment),
                                       elem_offset=p.elem_offset,
                                       offset_factor=int(p.offset_factor))
                replaced[p] = new
                params[k] = p = new
                known.add(dim)
                changed = True
                if form is not None:
                    a, b = form
                    binds.append((unknown[0], tirx.floordiv(dim - b, a)))
                    known.add(unknown[0])
                    solved.add(unknown[0])
    if not binds:
        return None
    final = {old: params[i] for i, old in enumerate(func.params) if old in replaced}
    chain = {}
    for old in replaced:  # a buffer replaced twice maps to its last replacement
        new = replaced[old]
        while new in replaced:
            new = replaced[new]
        chain[old] = new
    final.update(chain)
    return params, binds, replace_buffers(func.body, final)
