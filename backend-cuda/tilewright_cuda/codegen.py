"""CUDA codegen: TVM's CUDA code generator on the lowered kernel, plus our device header, and
the launch description (kernel name, parameters, grid, block, dynamic shared memory) that the
executors and exported bundles use."""

from __future__ import annotations

import re
from pathlib import Path

import tvm
from tilewright.errors import KernelError
from tilewright.plugin import DeviceCodegen, GeneratedSource
from tvm import tirx
from tvm.tirx.build import split_host_device_mods

from . import arch as arch_mod
from . import hopper, passes, swizzle
from .passes import find_thread

HEADER = (Path(__file__).parent / "include" / "tw_cuda.h").read_text()
MMA_HEADER = (Path(__file__).parent / "include" / "tw_mma.h").read_text()
COPY_HEADER = (Path(__file__).parent / "include" / "tw_copy.h").read_text()
_MARK = 'extern "C" __global__'


def tvm_target(arch) -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch.name},
                             host=tvm.target.Target("llvm"))


def py_expr(e) -> str:
    """A Python expression for an integer TIR expression over shape symbols."""
    try:
        return passes.py_expr(e)
    except passes.NotPython:
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
    smem = int(func.attrs["tw.dyn_smem_bytes"]) if "tw.dyn_smem_bytes" in func.attrs else 0
    return {"grid": [grid["blockIdx.x"], grid["blockIdx.y"], grid["blockIdx.z"]],
            "block": [threads, 1, 1], "dynamic_smem_bytes": smem}


def _param_kinds(func: tirx.PrimFunc, device_func) -> list[dict]:
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
    """Where each shape symbol is read at launch: ``{name: [kernel parameter, dimension]}``."""
    found = {}
    for index, p in enumerate(func.params):
        if tirx.buffer.is_buffer_var(p):
            for dim, extent in enumerate(p.shape):
                if isinstance(extent, tirx.Var):
                    found.setdefault(str(extent.name), [index, dim])
    return found


def tvm_passes() -> list:
    """TVM's passes from flat loops to a device kernel and its host launcher. Unlike TVM's
    default CUDA pipeline, no automatic barriers or shared-buffer merging: the insert_sync and
    place_memory phases own those."""
    t, s = tirx.transform, tvm.s_tir.transform
    return [s.UnifyThreadBinding(), s.LowerOpaqueBlock(), t.StmtSimplify(), t.FlattenBuffer(),
            t.BF16ComputeLegalize(), t.NarrowDataType(32),
            t.VectorizeLoop(True), t.UnrollLoop(), t.StmtSimplify(), t.RemoveNoOp(),
            t.CommonSubexprElim(), t.FP8ComputeLegalize(), t.VerifyMemory(),
            t.AnnotateEntryFunc(), t.SplitHostDevice(), t.MakePackedAPI(),
            t.FP8StorageLegalize(), t.BF16StorageLegalize()]


_TRAITS = re.compile(r"\n\s*#include <cuda/std/type_traits>\n\s*namespace std \{\n"
                     r"((?:\s*using cuda::std::\w+;\n)+)\s*\}\n")


def _drop_unused_type_traits(text: str) -> str:
    """TVM's NVRTC prelude includes ``<cuda/std/type_traits>`` (most of NVRTC's ~2 s front-end
    time for a kernel) to alias a few traits into ``std``; drop it when nothing uses them."""
    match = _TRAITS.search(text)
    if match is None:
        return text
    names = re.findall(r"using cuda::std::(\w+);", match.group(1))
    rest = text[:match.start()] + text[match.end():]
    if any(re.search(rf"\b{name}\b", rest) for name in names):
        return text
    return text[:match.start()] + "\n" + text[match.end():]


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    arch = arch_mod.resolve(ctx.target.option("arch"))
    target = tvm_target(arch)
    (gvar, func), = list(mod.functions.items())
    launch = launch_info(func)
    mod = tvm.IRModule({gvar: hopper.strip_attrs(func.without_attr("tw.dyn_smem_bytes")
                                                 if "tw.dyn_smem_bytes" in func.attrs else func)})
    mod = tirx.transform.BindTarget(target)(mod)
    mod = tvm.ir.transform.Sequential(tvm_passes())(mod)
    _, device = split_host_device_mods(mod)
    (dev_target, dev_mod), = list(device.items())
    dev_mod = tvm.ir.transform.Sequential([tirx.transform.LowerWarpMemory(),
                                           tirx.transform.StmtSimplify(),
                                           tirx.transform.LowerIntrin()])(dev_mod)
    kernels = list(dev_mod.functions.items())
    if len(kernels) != 1:
        raise KernelError(f"CUDA codegen expected one device kernel, got {len(kernels)}")
    kernel_gvar, device_func = kernels[0]
    text = tvm.get_global_func("target.build.cuda")(dev_mod, dev_target).inspect_source()
    at = text.find(_MARK)
    header = HEADER + (COPY_HEADER if "tw_cp_async" in text or "tw_copy16" in text else "") + \
        (MMA_HEADER if "tw_gemm_mma" in text or "tw::" in text else "")
    blocks = hopper.blocks_per_sm(func)
    if "tw_gemm_" in text or blocks > 1:  # a warp tile's accumulators: let ptxas use up to
        text = hopper.launch_bounds(text, blocks)  # 255 registers (its share of the SM's)
    # swizzled tiles sit at multiples of swizzle.ALIGN from the pool's base
    text = text.replace("extern __shared__ __align__(64) uchar tw_smem_ptr[]",
                        f"extern __shared__ __align__({swizzle.ALIGN}) uchar tw_smem_ptr[]")
    text = _drop_unused_type_traits(text[:at] + header + "\n" + text[at:])
    meta = {
        "entry": str(kernel_gvar.name_hint), "arch": arch.name,
        "params": _param_kinds(func, device_func), "symbols": symbol_sources(func), **launch,
    }
    text, meta = hopper.finish_source(func, text, meta)  # the CUDA dialect's descriptors
    return GeneratedSource(text=text, language="cuda", file_ext="cu", payload=meta,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="cuda", file_ext="cu", generate=generate)
