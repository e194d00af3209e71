"""``T.max`` / ``T.min`` of floats with the language's NaN rule: a NaN operand is ignored
(IEEE 754's maxNum / minNum: the other operand; NaN only when both are), the rule the
reductions follow (:func:`.lowering_utils.compare_floats`) and CUDA's ``max(float, float)``
(``fmaxf``) implements. TVM's own ``Max`` / ``Min`` leave it to the target: LLVM's compare and
select on the CPU gave ``max(NaN, 1) = 1`` but ``max(1, NaN) = NaN``, the interpreter's Python
``max`` the opposite, and TVM's CUDA prelude defines ``max(half, half)`` as
``__hgt(a, b) ? a : b`` (order-dependent too).

A backend whose ``Max`` / ``Min`` do not follow the rule for some float types applies
:func:`min_max_ignoring_nan` to the kernel before lowering its tile ops (so the combines its
rules build, which follow the rule already, are left alone). An operand that is more than a
name, a constant or a load is bound once (a ``Let``): the rule reads each operand three
times. Narrower operands are compared as float32 values (exactly; the result converts back
exactly). A backend with the rule in one call gives it as ``native`` and nothing is bound:
the CPU's ``llvm.maxnum`` (a bound operand that converts to bfloat16 crashed LLVM's code
generator there: TVM's bfloat16 legalisation does not visit a binding's value).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .lowering_utils import WIDE_FLOATS as WIDE
from .lowering_utils import compare_floats
from .walk import prim_func_pass

FLOAT_TYPES = WIDE | {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"}


def _read_once(expr) -> bool:
    """Whether ``expr`` may be repeated as it is: a name, a constant, a load, a conversion of
    one (anything else is computed once: it may call a generator or an atomic)."""
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return isinstance(expr, (tirx.Var, tirx.IntImm, tirx.FloatImm, tvm.ir.TensorLoad))


def min_max_ignoring_nan(name: str, dtypes=FLOAT_TYPES, native=None):
    """A pass (named ``name``) rewriting each ``Max`` / ``Min`` of one of ``dtypes`` into the
    NaN rule's form; ``native(kind, a, b)``, where the backend has one, makes it one call of
    float32 or float64 operands (LLVM's ``llvm.maxnum``: no binding, which a backend's
    legalisation may not take)."""

    def rule(node):
        dtype = str(node.ty)
        if dtype not in dtypes:
            return node
        kind = "max" if isinstance(node, tirx.Max) else "min"
        if native is not None:
            a, b = ((o if dtype in WIDE else tirx.Cast("float32", o)) for o in (node.a, node.b))
            result = native(kind, a, b)
            return result if dtype in WIDE else tirx.Cast(dtype, result)
        combine = compare_floats(kind)
        bound, operands = [], []
        for n, operand in enumerate((node.a, node.b)):
            if dtype not in WIDE:  # compared in float32, exactly: bound so (see the module)
                operand = tirx.Cast("float32", operand)
            if _read_once(operand):
                operands.append(operand)
                continue
            var = tirx.Var(f"minmax_{'ab'[n]}", operand.ty)
            bound.append((var, operand))
            operands.append(var)
        result = combine(*operands)
        for var, value in reversed(bound):
            result = tirx.Let(var, value, result)
        return result if dtype in WIDE else tirx.Cast(dtype, result)

    return prim_func_pass(name, lambda func: func.with_body(
        tvm_ffi.structural_map(func.body, ((tirx.Max, tirx.Min), rule))))
