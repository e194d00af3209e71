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


def generate(mod: tvm.IRModule, ctx) -> GeneratedSource:
    executable = tvm.compile(mod, target=host_target())
    text = stable_text(executable.mod.inspect_source("ll"))
    return GeneratedSource(text=text, language="llvm", file_ext="ll", payload=executable,
                           entry=ctx.func_name)


CODEGEN = DeviceCodegen(language="llvm", file_ext="ll", generate=generate)
