"""CPU codegen: TVM's LLVM code generator for the host CPU; the source is the LLVM IR."""

from __future__ import annotations

import functools
import re

import tvm
from tilewright.plugin import DeviceCodegen, GeneratedSource
from tvm import tirx

DLPACK_CPU = 1  # DLDeviceType kDLCPU (dlpack.h)


@functools.lru_cache(maxsize=1)
def host_target() -> tvm.target.Target:
    cpu = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")()
    return tvm.target.Target({"kind": "llvm", "mcpu": str(cpu)})


# LLVM names the alias-analysis type of an allocated buffer after the address of its variable
_ADDRESS = re.compile(r'(?<=!")0x[0-9a-f]+(?=[."])')


def stable_text(text: str) -> str:
    """The LLVM IR with buffer addresses in alias-analysis type names replaced by ``buf0``,
    ``buf1`` ... in order of appearance, so one kernel always prints the same source."""
    names: dict = {}
    return _ADDRESS.sub(lambda m: names.setdefault(m.group(0), f"buf{len(names)}"), text)


# TVM passes of its default pipeline that the CPU's build skips, each with why:
# - s_tir.CompactBufferAllocation shrinks a buffer to the region its accesses cover, relaxed
#   over the loops around them. A CPU worker takes its next block index from a counter
#   (passes.lower_blocks), not from a loop, so the region of a T.alloc_global buffer depended
#   on the block index and was placed where that index is not defined ("Buffer block is used
#   before its definition"). The frontend and the CPU's lowering size every buffer already.
SKIPPED_TVM_PASSES = ("s_tir.CompactBufferAllocation",)
# and for a kernel without tensor parameters (see _on_the_host)
TENSORLESS_SKIPPED = ("tirx.StorageRewrite",)


def _tensorless(func) -> bool:
    return isinstance(func, tirx.PrimFunc) and \
        not any(isinstance(param.ty, tirx.BufferType) for param in func.params)


def _on_the_host(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` (without tensor parameters) marked as running on CPU device 0. TVM allocates a
    buffer of 1 KiB or more from the device of its function's first tensor (MakePackedAPI
    names it, LowerTVMBuiltin calls TVMBackendAllocWorkspace with it): without one the build
    stopped ("Unknown device id in current IR": a kernel with no tensor parameters, TileLang's
    test_tilelang_language_parallel). TVM's StorageRewrite, which moves allocations to the
    top of the function, outside these marks, is skipped for such a function."""
    zero = tirx.IntImm("int32", 0)
    return func.with_body(tirx.AttrStmt(zero, "device_type", tirx.IntImm("int32", DLPACK_CPU),
                                        tirx.AttrStmt(zero, "device_id", zero, func.body)))


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    tensorless = [gv for gv, f in mod.functions.items() if _tensorless(f)]
    mod = tvm.IRModule({gv: _on_the_host(f) if gv in tensorless else f
                        for gv, f in mod.functions.items()})
    skipped = (*SKIPPED_TVM_PASSES, *(TENSORLESS_SKIPPED if tensorless else ()))
    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(
            opt_level=outer.opt_level, required_pass=list(outer.required_pass),
            disabled_pass=[*outer.disabled_pass, *skipped],
            instruments=list(outer.instruments), config=dict(outer.config)):
        executable = tvm.compile(mod, target=host_target())
    text = stable_text(executable.mod.inspect_source("ll"))
    return GeneratedSource(text=text, language="llvm", file_ext="ll", payload=executable,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="llvm", file_ext="ll", generate=generate)
