"""The interpreter's pipeline: a phase checking that every tile op has a rule, one making
float -> integer conversions saturate (:mod:`tilewright.transform.float_to_int`), and one
making arithmetic on the types it emulates round once per operation.

The interpreter runs the tile IR as it is (see :mod:`.codegen`): its first pass makes sure,
at compile time, that nothing reaches the codegen that the rule table cannot run. It holds
bfloat16 and float8 values in float32 (:data:`.runtime.EMULATED`); each arithmetic operation
on them becomes a float32 operation converted back to its type
(:func:`tilewright.transform.narrow_float_arithmetic`), which the runtime rounds. float16 is
NumPy's own, which rounds each operation already.
"""

from __future__ import annotations

from tilewright.errors import UnsupportedOpError, span_location
from tilewright.ir import tile_ops_in
from tilewright.plugin import PassPipeline, Phase
from tilewright.transform import (
    min_max_ignoring_nan,
    narrow_float_arithmetic,
    prim_func_pass,
    saturating_float_to_int,
)
from tilewright.transform.sequential import sequential_phases

from .lowering import RULES
from .runtime import EMULATED


def check_tile_ops():
    def run(func):
        for call in tile_ops_in(func):
            if call.name not in RULES:
                raise UnsupportedOpError(
                    f"T.{call.name} is not supported by backend 'interp': its rule table has "
                    f"no entry for it; add one to tilewright_interp.lowering",
                    span_location(call.span))
        return func

    return prim_func_pass("InterpCheckTileOps", run)


PIPELINE = PassPipeline((
    *sequential_phases("Interp"),
    Phase("float_min_max", lambda ctx: [min_max_ignoring_nan("InterpFloatMinMax")],
          "T.max / T.min of floats ignore a NaN operand (IEEE maxNum)"),
    Phase("check_tile_ops", lambda ctx: [check_tile_ops()],
          "every tile op has a rule in tilewright_interp.lowering"),
    Phase("saturating_float_to_int",
          lambda ctx: [saturating_float_to_int("InterpSaturatingFloatToInt")],
          "a float -> integer conversion saturates at the integer's bounds, NaN gives 0"),
    Phase("narrow_float_arithmetic",
          lambda ctx: [narrow_float_arithmetic(EMULATED, "InterpNarrowFloatArithmetic")],
          "arithmetic on bfloat16 and float8 rounds to its type after each operation"),
))
