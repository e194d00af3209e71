"""CPU codegen: TVM's LLVM code generator for the host CPU; the source is the LLVM IR."""

from __future__ import annotations

import functools
import re

import tvm
from tilewright.plugin import DeviceCodegen, GeneratedSource


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


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(
            opt_level=outer.opt_level, required_pass=list(outer.required_pass),
            disabled_pass=[*outer.disabled_pass, *SKIPPED_TVM_PASSES],
            instruments=list(outer.instruments), config=dict(outer.config)):
        executable = tvm.compile(mod, target=host_target())
    text = stable_text(executable.mod.inspect_source("ll"))
    return GeneratedSource(text=text, language="llvm", file_ext="ll", payload=executable,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="llvm", file_ext="ll", generate=generate)
