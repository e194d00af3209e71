"""The launch description of a kernel (kernel name, parameters, grid, block, dynamic shared
memory), which the executors and exported bundles use."""

from __future__ import annotations

from tilewright.errors import KernelError
from tvm import tirx

from .. import keys
from ..analysis.ir import NotPython, find_thread
from ..analysis.ir import py_expr as ir_py_expr


def py_expr(e) -> str:
    """A Python expression for an integer TIR expression over shape symbols."""
    try:
        return ir_py_expr(e)
    except NotPython:
        raise KernelError(f"the CUDA backend cannot express the launch dimension {e} on the "
                          "host") from None


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


def param_kinds(func: tirx.PrimFunc, device_func) -> list[dict]:
    """Each device-kernel parameter as a tensor pointer (by kernel parameter index), a scalar
    parameter, or a shape symbol."""
    by_name = {}
    for index, p in enumerate(func.params):
        if tirx.buffer.is_buffer_var(p):
            by_name[f"{p.name}_ptr"] = {"kind": "tensor", "param": index, "name": str(p.name)}
            by_name[str(p.name)] = by_name[f"{p.name}_ptr"]
        else:
            by_name[str(p.name)] = {"kind": "scalar", "param": index, "name": str(p.name),
                                    "dtype": str(p.ty)}
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


def symbol_sources(func: tirx.PrimFunc) -> dict:
    """Where each symbol a launch dimension may read is found at launch: a shape symbol as
    ``{name: [kernel parameter, dimension]}``, an integer scalar parameter (a grid of
    ``T.ceildiv(max_seqlen, 128)`` blocks) as ``{name: [kernel parameter]}``."""
    found = {}
    for index, p in enumerate(func.params):
        if tirx.buffer.is_buffer_var(p):
            for dim, extent in enumerate(p.shape):
                if isinstance(extent, tirx.Var):
                    found.setdefault(str(extent.name), [index, dim])
        elif "int" in str(p.ty):
            found.setdefault(str(p.name), [index])
    return found
