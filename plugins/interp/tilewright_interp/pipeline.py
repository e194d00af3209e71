"""The interpreter's pipeline: one phase checking that every tile op has a rule.

The interpreter runs the tile IR as it is (see :mod:`.codegen`), so its only pass makes sure,
at compile time, that nothing reaches the codegen that the rule table cannot run.
"""

from __future__ import annotations

from tilewright.errors import UnsupportedOpError, span_location
from tilewright.ir import tile_ops_in
from tilewright.plugin import PassPipeline, Phase
from tilewright.transform import prim_func_pass

from .lowering import RULES


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
    Phase("check_tile_ops", lambda ctx: [check_tile_ops()],
          "every tile op has a rule in tilewright_interp.lowering"),
))
