"""TileLang's TVM names that TVM 0.27 spells differently.

TileLang ships its own TVM: ``tvm.tirx.PrimExpr`` is the base class of TIR expressions and an
expression's ``dtype`` is its type's name. In TVM 0.27 that class is ``tvm.ir.Expr`` and the
type is ``expr.ty``. TileLang's examples annotate their bit-twiddling helpers with
``tirx.PrimExpr`` (``from tvm import tirx``) and check ``val.dtype == T.uint8``, so a kernel
ported by renaming TileLang's imports stops there, before anything of ours runs; its tests
check that an intrinsic is a ``tirx.Call`` (TVM 0.27's ``tvm.ir.Call``). Importing
``tilewright.language`` therefore gives ``tvm.tirx`` the names ``PrimExpr`` and ``Call``
(TVM's own classes) and scalar expressions a read-only ``dtype`` (``str(expr.ty)``; an
expression whose type is not a scalar's has none), when TVM lacks them; nothing else of TVM
changes.
"""

import tvm
from tvm import tirx
from tvm.ir.expr import ExprWithOp


def _dtype(expr) -> str:
    ty = expr.ty
    if not isinstance(ty, tvm.ir.PrimType):
        raise AttributeError(f"{type(expr).__name__} of type {ty} has no scalar dtype")
    return str(ty)


if not hasattr(tirx, "PrimExpr"):
    tirx.PrimExpr = tvm.ir.Expr
if not hasattr(tirx, "Call"):
    tirx.Call = tvm.ir.Call
if not hasattr(ExprWithOp, "dtype"):
    ExprWithOp.dtype = property(_dtype, doc="The scalar type's name (TileLang's TVM).")
