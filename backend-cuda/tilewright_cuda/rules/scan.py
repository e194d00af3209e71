"""``T.cumsum`` / ``T.cummax``: each row is scanned by one thread; rows are spread over the
threads."""

from __future__ import annotations

from tilewright.ir import SCAN_OPS, TileOpCall
from tilewright.transform import RuleContext
from tilewright.transform.lowering_utils import loop_nest, scan_rows
from tvm import tirx

from .common import thread_var
from .table import register


def lower_scan(call: TileOpCall, ctx: RuleContext):
    """Each row is scanned by one thread; rows are spread over the threads."""
    rows, body = scan_rows(call)
    if not rows:  # one row: one thread scans it
        tx, _ = thread_var(ctx)
        return tirx.IfThenElse(tx == 0, body([]), None)
    return loop_nest(rows, body, ctx=ctx)


for _scan in SCAN_OPS:
    register(_scan)(lower_scan)
