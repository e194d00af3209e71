"""The kernel of a ``T.CUDASourceCodeKernel``: the user's CUDA source as the file (its prelude
first, nothing of ours), and the launch description of its entry, in the form the executors
and exported bundles read for generated kernels. The entry receives the function's parameters
in order (a tensor as a pointer to its first element, a scalar as its value), then the shape
symbols that are not parameters, in the order they first appear in the tensor parameters'
shapes and strides (``tilewright.language.source_kernel``)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError, span_location
from tilewright.ir import SOURCE_KERNEL, value_dtype
from tilewright.plugin import GeneratedSource
from tvm import tirx

from . import source
from .launch import check_grid_known, check_params_known, launch_info, symbol_sources

CLUSTER_SM = 90  # thread-block clusters: sm_90 and newer
_OP = tvm.ir.Op.get(SOURCE_KERNEL)


def marker(func: tirx.PrimFunc) -> tirx.Evaluate | None:
    """The statement of ``func`` calling :data:`tilewright.ir.SOURCE_KERNEL`, if any."""
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.Evaluate, lambda s: found.append(s) if isinstance(
        s.value, tvm.ir.Call) and s.value.op.same_as(_OP) else None))
    return found[0] if found else None


def params(func: tirx.PrimFunc) -> list[dict]:
    """The entry's parameters in the launch description's form: each of ``func``'s, then the
    shape symbols that are not parameters."""
    out, names = [], {str(p.name) for p in func.params}
    for index, p in enumerate(func.params):
        if tirx.buffer.is_buffer_var(p):
            out.append({"kind": "tensor", "param": index, "name": str(p.name)})
        else:
            out.append({"kind": "scalar", "param": index, "name": str(p.name),
                        "dtype": value_dtype(p)})
    symbols: dict[str, str] = {}

    def visit(var):
        if str(var.name) not in names:
            symbols.setdefault(str(var.name), str(var.ty))

    for p in func.params:
        if tirx.buffer.is_buffer_var(p):
            for extent in [*p.shape, *(p.strides or ())]:
                tvm_ffi.structural_walk(extent, (tirx.Var, visit), order="pre")
    return out + [{"kind": "symbol", "name": name, "dtype": dtype}
                  for name, dtype in symbols.items()]


def generate(func: tirx.PrimFunc, stmt: tirx.Evaluate, chosen, func_name: str) -> GeneratedSource:
    """The source and launch description of the ``T.CUDASourceCodeKernel`` of ``func`` (its
    marker statement ``stmt``); an entry the source does not define, or a launch the
    architecture ``chosen.arch`` cannot make, is a KernelError at the user's line."""
    location = span_location(stmt.span)
    text, entry, *dims = stmt.value.args
    text, entry = str(text.value), str(entry.value)
    block, cluster = [int(d) for d in dims[:3]], [int(d) for d in dims[3:]]
    available = source.entries(text)
    if entry not in available:
        raise KernelError(
            f"T.CUDASourceCodeKernel: the source has no __global__ function {entry!r} "
            f"(entry_name). Available entries: {', '.join(available) or 'none'}", location)
    if not source.is_extern_c(text, entry):
        raise KernelError(
            f"T.CUDASourceCodeKernel: the entry {entry!r} must be declared extern \"C\" (the "
            "launcher finds it by its unmangled name): extern \"C\" __global__ void "
            f"{entry}(...)", location)
    if cluster != [1, 1, 1]:
        if chosen.arch.sm < CLUSTER_SM:
            raise KernelError(f"T.CUDASourceCodeKernel: cluster_dims={cluster} needs "
                              f"thread-block clusters (sm_90 or newer); the target is "
                              f"{chosen.arch.name}", location)
        if source.declares_cluster_dims(text, entry):
            raise KernelError(f"T.CUDASourceCodeKernel: the entry {entry!r} declares "
                              "__cluster_dims__ itself; give the clusters once, there or as "
                              "cluster_dims=", location)
        text = source.entry_cluster_dims(text, entry, cluster)
    check_grid_known(func)
    kinds = params(func)
    check_params_known(func, kinds)
    payload = {"entry": entry, "arch": chosen.arch.name, "params": kinds,
               "symbols": symbol_sources(func), **launch_info(func), "block": block,
               **({"cluster_dims": cluster} if cluster != [1, 1, 1] else {})}
    if chosen.compile_flags:
        payload["compile_flags"] = list(chosen.compile_flags)
    return GeneratedSource(text=text if text.endswith("\n") else text + "\n", language="cuda",
                           file_ext="cu", payload=payload, entry=func_name)
