"""The wgmma device code a kernel needs: ``include/tw_wgmma.h`` (the GEMM loops, descriptors)
and one specialisation of ``tw_wgmma_m64k16<NC, BF16, B_MN>`` (or the register-A
``tw_wgmma_m64k16_rs``) per instruction shape the kernel's gemms use: the ``wgmma.mma_async``
inline assembly, whose operand list depends on N."""

from __future__ import annotations

import re
from pathlib import Path

HEADER = (Path(__file__).resolve().parents[1] / "include" / "tw_wgmma.h").read_text()
_GEMM = re.compile(r"tw_gemm_wgmma(_rs)?<\d+, \d+, (\d+), (true|false), (true|false),")


def instruction(nc: int, bf16: bool, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_m64k16<NC, BF16, B_MN>``: one wgmma."""
    regs = nc // 2
    kind = "bf16" if bf16 else "f16"
    outs = ", ".join(f"%{i}" for i in range(regs))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (f"template <> __device__ inline void tw_wgmma_m64k16<{nc}, {str(bf16).lower()}, "
            f"{str(b_mn).lower()}>(float* d, unsigned long long da, unsigned long long db) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k16.f32.{kind}.{kind} {{{outs}}}, '
            f'%{regs}, %{regs + 1}, p, 1, 1, 0, {int(b_mn)};\\n}}\\n"\n'
            f'    : {operands}\n    : "l"(da), "l"(db), "r"(1));\n}}\n')


def instruction_rs(nc: int, bf16: bool, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_m64k16_rs<NC, BF16, B_MN>``: one wgmma with A
    from four 32-bit registers (``{a0, a1, a2, a3}``; the register form has no A transpose)."""
    regs = nc // 2
    kind = "bf16" if bf16 else "f16"
    outs = ", ".join(f"%{i}" for i in range(regs))
    a_regs = ", ".join(f"%{regs + i}" for i in range(4))
    operands = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (f"template <> __device__ inline void tw_wgmma_m64k16_rs<{nc}, "
            f"{str(bf16).lower()}, {str(b_mn).lower()}>(float* d, const unsigned* a, "
            f"unsigned long long db) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k16.f32.{kind}.{kind} {{{outs}}}, '
            f'{{{a_regs}}}, %{regs + 4}, p, 1, 1, {int(b_mn)};\\n}}\\n"\n'
            f'    : {operands}\n    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), '
            f'"r"(1));\n}}\n')


def source(names: list[str]) -> str:
    """``tw_wgmma.h`` plus the instruction specialisations the gemm calls ``names`` (the
    ``tw_gemm_wgmma[_rs]<...>`` names in the kernel, in order) use."""
    parts = [HEADER, "#ifndef TW_HOST_EMULATION"]
    seen = set()
    for name in names:
        match = _GEMM.match(name)
        key = (int(match.group(2)), match.group(3) == "true", match.group(4) == "true")
        make = instruction_rs if match.group(1) else instruction
        if (make, key) not in seen:
            seen.add((make, key))
            parts.append(make(*key))
    parts.append("#endif")
    return "\n".join(parts) + "\n"
