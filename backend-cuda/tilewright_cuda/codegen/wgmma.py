"""The wgmma device code a kernel needs: ``include/tw_wgmma.h`` (the GEMM loops, descriptors)
and one specialisation of ``tw_wgmma_step<NC, TY, B_MN>`` (or the register-A
``tw_wgmma_step_rs``, or the 2:4 sparse ``tw_wgmma_step_sp``) per instruction shape and
operand type the kernel's gemms use: the ``wgmma.mma_async`` inline assembly, whose operand
list depends on N and whose K and transpose operands on the type (``TYPES``); each takes the
scale-d predicate as a run-time operand (0: the instruction's D is A B alone)."""

from __future__ import annotations

from pathlib import Path

from .. import intrinsics

HEADER = (Path(__file__).resolve().parents[1] / "include" / "tw_wgmma.h").read_text()
# tw_wgmma_type (the header's enum) -> (PTX operand type, K of one instruction, PTX
# accumulator type); the 8-bit forms have no transpose operands (their operands are K-major),
# the integer one (int32 accumulators) no scale operands either
TYPES = {"TW_WGMMA_F16": ("f16", 16, "f32"), "TW_WGMMA_BF16": ("bf16", 16, "f32"),
         "TW_WGMMA_S8": ("s8", 32, "s32"), "TW_WGMMA_E4M3": ("e4m3", 32, "f32"),
         "TW_WGMMA_E5M2": ("e5m2", 32, "f32")}
# PTX accumulator type -> (C++ type, inline-assembly constraint)
_ACCUMULATORS = {"f32": ("float", "f"), "s32": ("int", "r")}


def _signature(name: str, nc: int, ty: str, b_mn: bool, a_param: str, more: str = "") -> str:
    acc = _ACCUMULATORS[TYPES[ty][2]][0]
    return (f"template <> __device__ inline void {name}<{nc}, {ty}, {str(b_mn).lower()}>("
            f"{acc}* d, {a_param}, unsigned long long db{more}, int scale_d) {{\n")


def _operands(ty: str, regs: int) -> str:
    """The accumulators as inline-assembly operands."""
    constraint = _ACCUMULATORS[TYPES[ty][2]][1]
    return ", ".join(f'"+{constraint}"(d[{i}])' for i in range(regs))


def instruction(nc: int, ty: str, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_step<NC, TY, B_MN>``: one wgmma, D = A B + D,
    or D = A B where ``scale_d`` is 0 (the scale-d predicate)."""
    regs = nc // 2
    kind, k, dtype = TYPES[ty]
    outs = ", ".join(f"%{i}" for i in range(regs))
    operands = _operands(ty, regs)
    # scale-a/b (float forms only), then transpose-a/b (16-bit forms only)
    extra = "" if dtype == "s32" else ", 1, 1" + (f", 0, {int(b_mn)}" if k == 16 else "")
    return (_signature("tw_wgmma_step", nc, ty, b_mn, "unsigned long long da") +
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k{k}.{dtype}.{kind}.{kind} {{{outs}}}, '
            f'%{regs}, %{regs + 1}, p{extra};\\n}}\\n"\n'
            f'    : {operands}\n    : "l"(da), "l"(db), "r"(scale_d));\n}}\n')


def instruction_rs(nc: int, ty: str, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_step_rs<NC, TY, B_MN>``: one wgmma with A
    from four 32-bit registers (``{a0, a1, a2, a3}``; the register form has no A transpose)."""
    regs = nc // 2
    kind, k, dtype = TYPES[ty]
    outs = ", ".join(f"%{i}" for i in range(regs))
    a_regs = ", ".join(f"%{regs + i}" for i in range(4))
    operands = _operands(ty, regs)
    return (_signature("tw_wgmma_step_rs", nc, ty, b_mn, "const unsigned* a") +
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.m64n{nc}k{k}.{dtype}.{kind}.{kind} {{{outs}}}, '
            f'{{{a_regs}}}, %{regs + 4}, p, 1, 1, {int(b_mn)};\\n}}\\n"\n'
            f'    : {operands}\n    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), '
            f'"r"(scale_d));\n}}\n')


def instruction_sp(nc: int, ty: str, b_mn: bool) -> str:
    """The device specialisation of ``tw_wgmma_step_sp<NC, TY, B_MN>``: one 2:4 sparse wgmma
    (``wgmma.mma_async.sp``, K 32 dense columns of 16-bit operands) with the warp's metadata
    register ``e`` and sparsity selector 0."""
    regs = nc // 2
    kind, _, dtype = TYPES[ty]
    outs = ", ".join(f"%{i}" for i in range(regs))
    return (_signature("tw_wgmma_step_sp", nc, ty, b_mn, "unsigned long long da",
                       ", unsigned e") +
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 3}, 0;\\n"\n'
            f'    "wgmma.mma_async.sp.sync.aligned.m64n{nc}k32.{dtype}.{kind}.{kind} {{{outs}}}, '
            f'%{regs}, %{regs + 1}, %{regs + 2}, 0, p, 1, 1, 0, {int(b_mn)};\\n}}\\n"\n'
            f'    : {_operands(ty, regs)}\n    : "l"(da), "l"(db), "r"(e), "r"(scale_d));\n}}\n')


# the gemm loop -> its instruction specialisation
_MAKERS = {"tw_gemm_wgmma": instruction, "tw_gemm_wgmma_rs": instruction_rs,
           "tw_gemm_wgmma_sp": instruction_sp, "tw_gemm_wgmma_sp_kept": instruction_sp}


def source(names: list[str]) -> str:
    """``tw_wgmma.h`` plus the instruction specialisations the gemm calls ``names`` (the
    ``tw_gemm_wgmma[_rs|_sp|_sp_kept]<...>`` names in the kernel, in order) use."""
    parts = [HEADER, "#ifndef TW_HOST_EMULATION"]
    seen = set()
    for name in names:
        gemm = intrinsics.WgmmaGemm.parse(name)
        key = (gemm.nc, gemm.ty, gemm.b_mn)
        make = _MAKERS[gemm.form]
        if (make, key) not in seen:
            seen.add((make, key))
            parts.append(make(*key))
    parts.append("#endif")
    return "\n".join(parts) + "\n"
