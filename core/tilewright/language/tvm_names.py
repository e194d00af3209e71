"""TileLang's TVM names that TVM 0.27 spells differently.

TileLang ships its own TVM, whose ``tvm.tirx.PrimExpr`` is the base class of TIR expressions;
in TVM 0.27 that class is ``tvm.ir.Expr`` and ``tvm.tirx`` has no ``PrimExpr``. TileLang's
examples annotate their bit-twiddling helpers with ``tirx.PrimExpr`` (``from tvm import
tirx``), so a kernel ported by renaming TileLang's imports stops at the annotation, before
anything of ours runs. Importing ``tilewright.language`` therefore gives ``tvm.tirx`` the name,
bound to TVM's own class, when TVM lacks it (nothing else of TVM changes).
"""

import tvm
from tvm import tirx

TILELANG_TIRX_NAMES = {"PrimExpr": tvm.ir.Expr}

for _name, _value in TILELANG_TIRX_NAMES.items():
    if not hasattr(tirx, _name):
        setattr(tirx, _name, _value)
