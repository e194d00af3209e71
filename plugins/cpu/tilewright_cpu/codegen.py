"""CPU codegen: TVM's LLVM code generator for the host CPU; the source is the LLVM IR."""

from __future__ import annotations

import functools

import tvm
from tilewright.plugin import DeviceCodegen, GeneratedSource


@functools.lru_cache(maxsize=1)
def host_target() -> tvm.target.Target:
    cpu = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")()
    return tvm.target.Target({"kind": "llvm", "mcpu": str(cpu)})


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    executable = tvm.compile(mod, target=host_target())
    text = executable.mod.inspect_source("ll")
    return GeneratedSource(text=text, language="llvm", file_ext="ll", payload=executable,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="llvm", file_ext="ll", generate=generate)
