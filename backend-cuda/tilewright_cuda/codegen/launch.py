"""The launch description of a kernel (kernel name, parameters, grid, block, dynamic shared
memory), which the executors and exported bundles use; for a kernel sequence, one such
description per block and the workspaces the launcher allocates for a call."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import value_dtype
from tvm import tirx

from .. import keys
from ..analysis.ir import (
    NotPython,
    block_loops,
    find_thread,
    launch_symbols,
    substitute,
    unknown_at_launch,
)
from ..analysis.ir import py_expr as ir_py_expr


def py_expr(e) -> str:
    """A Python expression for an integer TIR expression over shape symbols."""
    try:
        return ir_py_expr(e)
    except NotPython:
        raise KernelError(f"the CUDA backend cannot express the launch dimension {e} on the "
                          "host") from None


def _in_launch(node) -> bool:
    return (isinstance(node, tirx.AttrStmt) and str(node.attr_key) == "thread_extent") or \
        (isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING)


def host_binds_inlined(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each binding made outside the kernel launch replaced by its value where it
    is used. TVM's CommonSubexprElim names a subexpression that the host and the kernel share
    (``cse_v1 = seq_len * 2``, the flattened extent of a ``(seq_len, 2)`` tensor that a grid
    of ``seq_len * 2`` blocks also reads), and SplitHostDevice then passes ``cse_v1`` to the
    kernel as a parameter, which a launch description cannot name: it reads only tensors,
    scalar arguments and shape symbols. A kernel then computes the value itself."""
    launches, binds = [], []
    tvm_ffi.structural_walk(func.body, (tirx.Stmt, lambda s: launches.append(s)
                                        if _in_launch(s) else None))
    tvm_ffi.structural_walk(func.body, (tirx.Bind, binds.append), order="pre")
    inside = []
    for launch in launches:
        tvm_ffi.structural_walk(launch, (tirx.Bind, inside.append))
    host = [b for b in binds if not any(b.same_as(x) for x in inside)]
    if not host:
        return func
    values = {}
    for bind in host:  # in program order: a value may read an earlier binding
        values[bind.var] = substitute(bind.value, values)

    def drop(stmt):
        kept = [s for s in stmt.seq if not any(s.same_as(b) for b in host)]
        return stmt if len(kept) == len(stmt.seq) else \
            (kept[0] if len(kept) == 1 else tirx.SeqStmt(kept))

    body = tvm_ffi.structural_map(func.body, (tirx.SeqStmt, drop))
    return func.with_body(substitute(body, values))


def launch_info(func: tirx.PrimFunc) -> dict:
    """Grid (expressions over shape symbols), block size and dynamic shared memory."""
    grid = {"blockIdx.x": "1", "blockIdx.y": "1", "blockIdx.z": "1"}
    stmt = func.body
    while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
        tag = str(stmt.thread_binding.thread_tag)
        if tag in grid:
            grid[tag] = py_expr(stmt.extent)
        stmt = stmt.body
    threads = int(find_thread(func).extent.value)
    smem = int(func.attrs[keys.DYN_SMEM]) if keys.DYN_SMEM in func.attrs else 0
    return {"grid": [grid["blockIdx.x"], grid["blockIdx.y"], grid["blockIdx.z"]],
            "block": [threads, 1, 1], "dynamic_smem_bytes": smem}


def param_kinds(func: tirx.PrimFunc, device_func, count: int | None = None) -> list[dict]:
    """Each device-kernel parameter as a tensor pointer (by kernel parameter index), a scalar
    parameter, or a shape symbol; the parameters after the first ``count`` (a block of a
    kernel sequence) are workspaces, by workspace index."""
    by_name = {}
    count = len(func.params) if count is None else count
    for index, p in enumerate(func.params):
        if index >= count:
            by_name[f"{p.name}_ptr"] = {"kind": "workspace", "workspace": index - count,
                                        "name": str(p.name)}
            by_name[str(p.name)] = by_name[f"{p.name}_ptr"]
        elif tirx.buffer.is_buffer_var(p):
            by_name[f"{p.name}_ptr"] = {"kind": "tensor", "param": index, "name": str(p.name)}
            by_name[str(p.name)] = by_name[f"{p.name}_ptr"]
        else:  # a T.ptr address: dtype "handle"
            by_name[str(p.name)] = {"kind": "scalar", "param": index, "name": str(p.name),
                                    "dtype": value_dtype(p)}
    out = []
    for p in device_func.params:
        name = str(p.name)
        if name in by_name:
            out.append(by_name[name])
        elif "handle" in str(p.ty) or "*" in str(p.ty):
            raise KernelError(f"CUDA codegen: device parameter {name} matches no kernel tensor")
        else:
            dtype = str(p.ty)
            out.append({"kind": "symbol", "name": name, "dtype": dtype})
    return out


def symbol_sources(func: tirx.PrimFunc, count: int | None = None) -> dict:
    """Where each symbol a launch dimension may read is found at launch
    (``analysis.ir.launch_symbols``) of the first ``count`` parameters (all by default)."""
    return launch_symbols(func.params[:count])


def check_grid_known(func: tirx.PrimFunc, count: int | None = None) -> None:
    """Refuses, at the kernel's line, a grid that reads a symbol the launcher cannot find
    (``analysis.ir.launch_symbols`` of the first ``count`` parameters)."""
    _refuse_unknown(func, unknown_at_launch([loop.extent for loop in block_loops(func)[0]],
                                            func.params[:count]))


def check_params_known(func: tirx.PrimFunc, params: list[dict], count: int | None = None):
    """Refuses, at the kernel's line, a symbol parameter of the device kernel (``params``,
    from :func:`param_kinds`) that the launcher cannot find."""
    known = launch_symbols(func.params[:count])
    _refuse_unknown(func, [p["name"] for p in params
                           if p["kind"] == "symbol" and p["name"] not in known])


def _refuse_unknown(func: tirx.PrimFunc, missing: list[str]) -> None:
    if missing:
        raise KernelError(
            f"the CUDA backend launches the kernel with the symbol "
            f"{', '.join(dict.fromkeys(missing))}, which is neither the whole extent of a "
            "tensor argument nor an integer scalar argument, so it is unknown when the kernel "
            "is called: give a tensor argument that extent or pass the symbol as a scalar "
            "argument", span_location(func.span))


def workspaces(func: tirx.PrimFunc, count: int) -> list[dict]:
    """The ``T.alloc_global`` workspaces of a kernel sequence (the parameters of a block's
    function after its first ``count``): name, dtype and bytes (a Python expression over the
    shape symbols, like a grid)."""
    out = []
    for buf in func.params[count:]:
        elems = tirx.const(1, "int64")
        for extent in buf.shape:
            elems = elems * tirx.Cast("int64", extent)
        bits = tvm.DataType(str(buf.dtype)).bits * tvm.DataType(str(buf.dtype)).lanes
        size = tvm.sym.Analyzer().simplify(tirx.floordiv(elems * bits + 7, 8))
        out.append({"name": str(buf.name), "dtype": str(buf.dtype), "bytes": py_expr(size)})
    return out
