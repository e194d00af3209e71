"""The last step of ``place_memory``: what the CUDA dialect left for the kernel's end.
TMA descriptors are deduplicated (same tensor, box, fold and swizzle: one descriptor), numbered
and recorded in the function attribute ``keys.TENSORMAPS`` for the launcher
(``cuTensorMapEncodeTiled``); shared addresses become plain addresses; each T.ws role becomes
``if (lo <= threadIdx.x < hi)`` over ``threadIdx.x - lo``; the user's calls become
``call_extern``; a ``T.ClusterKernel``'s cluster
dims become the function attribute ``keys.CLUSTER``, the sources of ``T.import_source`` the
attribute ``keys.IMPORT_SOURCE``, ``T.annotate_min_blocks_per_sm``'s blocks ``keys.BLOCKS``."""

from __future__ import annotations

import json

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.transform import prim_func_pass
from tvm import tirx

from .. import keys, ops
from ..analysis.ir import find_thread, substitute


def _param_index(func, buffer) -> int:
    for i, p in enumerate(func.params):
        if p.same_as(buffer) or (hasattr(p, "name") and str(p.name) == str(buffer.name)):
            return i
    raise KernelError(f"T.tma_copy: {buffer.name!r} is not a kernel parameter; TMA reads and "
                      "writes the kernel's global tensors")


def finish():
    """After ``place_memory``: descriptors deduplicated and numbered, shared addresses made
    plain, roles turned into thread-range branches, cluster dims recorded."""

    def run(func):
        table, entries = {}, []

        def rewrite(call):
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.name == ops.SHARED_ADDR:
                return tirx.address_of(call.args[0])
            if call.op.name == ops.USER_CALL:
                return tirx.call_extern(call.ty, str(call.args[0].value), *call.args[1:])
            if call.op.name == ops.TENSORMAP:
                buf = call.args[0].source
                box = [int(a.value) for a in call.args[1:-2]]
                fold, mode = int(call.args[-2].value), int(call.args[-1].value)
                key = (str(buf.name), tuple(box), fold, mode)
                if key not in table:
                    table[key] = len(entries)
                    entries.append({"kind": "tensormap", "param": _param_index(func, buf),
                                    "name": f"tw_tmap_{len(entries)}", "tensor": str(buf.name),
                                    "dtype": str(buf.dtype), "rank": len(box), "box": box,
                                    "swizzle": mode, **({"fold": fold} if fold else {})})
                return tirx.call_extern("handle", "TW_TMAP", tirx.const(table[key], "int32"))
            return call

        body = tvm_ffi.structural_map(func.body, (tvm.ir.Call, rewrite))
        tx = find_thread(func).loop_var

        def role_branch(loop):
            if keys.ROLE not in loop.annotations:
                return loop
            lo, n = int(loop.annotations[keys.ROLE]), int(loop.extent.value)
            inner = substitute(loop.body, {loop.loop_var: tx - lo} if lo else
                               {loop.loop_var: tx})
            cond = tx < n if lo == 0 else tirx.And(tx >= lo, tx < lo + n)
            return tirx.IfThenElse(cond, inner, None, span=loop.span)

        body = tvm_ffi.structural_map(body, (tirx.For, role_branch))
        func = func.with_body(body)
        if entries:
            func = func.with_attr(keys.TENSORMAPS, json.dumps(entries))
        block = func.body
        if isinstance(block, tirx.For) and keys.CLUSTER in block.annotations:
            dims = [int(d) for d in block.annotations[keys.CLUSTER]]
            func = func.with_attr(keys.CLUSTER, json.dumps(dims))
        if isinstance(block, tirx.For) and keys.MIN_BLOCKS_PER_SM in block.annotations:
            func = func.with_attr(keys.BLOCKS, int(block.annotations[keys.MIN_BLOCKS_PER_SM]))
        if isinstance(block, tirx.For) and keys.IMPORT_SOURCE in block.annotations:
            func = func.with_attr(keys.IMPORT_SOURCE, json.dumps(
                [str(s) for s in block.annotations[keys.IMPORT_SOURCE]]))
        return func

    return prim_func_pass("CUDAFinishDialect", run)
