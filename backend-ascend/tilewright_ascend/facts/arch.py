"""The Ascend machines this backend targets: SoC versions, core counts and on-chip memories.

Two target kinds, one per architecture (:data:`ARCHS`): ``ascend`` is A2/A3 (``dav-2201``,
spoken by the adapter-tree dialect ``tilewright_ascend.language``) and ``ascend-950`` is the
Ascend 950 class (``dav-3510``, spoken by the mainline dialect
``tilewright_ascend.language.mainline``). The module-level names (:data:`MEMORIES`,
:data:`SOCS`, ...) are A2's.

One AI core group is 1 AIC (cube) + 2 AIV (vector). Sizes are bytes. The numbers follow the
vendor's Ascend C headers for ``__NPU_ARCH__ == 2201`` (``include/utils/base/sys_constants.h``
and ``impl/basic_api/utils/kernel_utils_constants.h``) and the Mmad documentation
(``docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/Mmad计算/Mmad.md``: L0A/L0B operands start
512-byte aligned, the L0C result 1024-byte aligned).

UB: ``ASC_UB_SIZE`` keeps back the last 256 of UB's 192 KiB. In the kit the only user of that
region is ``KfcCommClient`` (``impl/basic_api/dav_c220/kfc/kfc_comm_client.h``: its message
slot ``ubMsg`` sits at ``TOTAL_UB_SIZE - sizeof(KfcMsg)``), the cube/vector message channel of
the Matmul high-level API; the other vendor scratch area, ``TMP_UB_OFFSET`` (184 KiB,
``kernel_utils_constants.h``), is used on 2201 by ``Select`` in VSEL_TENSOR_SCALAR_MODE and
VSEL_TENSOR_TENSOR_MODE (``impl/basic_api/dav_c220/kernel_operator_vec_cmpsel_impl.h``
duplicates the scalar, 32 elements, or the mask's address, 32 ``uint32_t``, there for
``set_cmpmask``; Select.md asks for 8 KiB to be kept free), by ``AddDeqRelu`` and by the
Compare forms that take a mask register (``Compare（结果存入寄存器）``, GetCmpMask), which the
generated code does not use; the count forms of ``Compare``/``Compares`` take none. A kernel
whose code calls Select (:data:`..facts.ops.SCRATCH_OPS`) gets UB below
:attr:`Arch.select_scratch` only; the others may fill all of UB. L1 keeps the 256 bytes
``ASC_L1_SIZE`` reserves (the kit does not show who uses them).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.errors import TargetError

ARCH = "dav-2201"
NPU_ARCH = 2201
ALIGN = 32  # bytes: DataCopy lengths and on-chip start addresses


@dataclass(frozen=True)
class Memory:
    """One on-chip memory: its scope, short name, the TPosition it is allocated with, its
    capacity, the alignment of a tile's start and the core that owns it."""

    scope: str
    short: str
    position: str
    capacity: int
    align: int
    core: str


MEMORIES = {m.scope: m for m in (
    Memory("ascend.ub", "UB", "VECCALC", 192 * 1024, ALIGN, "AIV"),
    Memory("ascend.l1", "L1", "A1", 512 * 1024 - 256, ALIGN, "AIC"),
    Memory("ascend.l0a", "L0A", "A2", 64 * 1024, 512, "AIC"),
    Memory("ascend.l0b", "L0B", "B2", 64 * 1024, 512, "AIC"),
    Memory("ascend.l0c", "L0C", "CO1", 128 * 1024, 1024, "AIC"),
)}
# the emulator's on-chip spaces in the order of its ``SPACE_NAMES`` after GM (csrc/tw_emu.cpp)
EMULATOR_SPACES = ("ascend.ub", "ascend.l1", "ascend.l0a", "ascend.l0b", "ascend.l0c")
SHORT = {**{m.scope: m.short for m in MEMORIES.values()}, "global": "GM"}
CUBE_SCOPES = frozenset(s for s, m in MEMORIES.items() if m.core == "AIC")


def short(scope) -> str:
    """The short name of a memory scope (UB, L1, ..., GM), or the scope itself."""
    return SHORT.get(str(scope), str(scope))


@dataclass(frozen=True)
class Soc:
    """One SoC version: how many cube cores (AIC) and vector cores (AIV) it has."""

    name: str
    aic: int
    aiv: int


SOCS = {s.name: s for s in (
    Soc("910B1", 24, 48), Soc("910B2", 24, 48), Soc("910B3", 20, 40), Soc("910B4", 20, 40),
    Soc("A3", 24, 48),
)}
DEFAULT_SOC = "910B2"

# For the roofline model: one cube instruction multiplies 16 x 16 x 16 float16 per cycle
# (16 x 16 x 8 for 32-bit inputs), at the AI cores' nominal clock; HBM2e bandwidth. These are
# published nominal figures, not measurements: the model says so.
CUBE_MNK = {"float16": (16, 16, 16), "bfloat16": (16, 16, 16), "float32": (16, 16, 8)}
CLOCK_GHZ = 1.8
HBM_GBPS = 1600.0


# Ascend 950 (``__NPU_ARCH__ == 3510``), from the asc-devkit headers:
# - memories: ``include/utils/base/sys_constants.h`` (``ASC_UB_SIZE`` 248 KiB with the VF stack
#   and the reserved UB kept back, ``ASC_L1_SIZE`` 512 KiB, ``ASC_L0A_SIZE``/``ASC_L0B_SIZE``
#   64 KiB, ``ASC_L0C_SIZE`` 256 KiB); ``impl/basic_api/utils/kernel_utils_constants.h`` agrees
#   (``TOTAL_UB_SIZE`` 248 KiB, ``TOTAL_L1_SIZE`` 512 KiB, ``TOTAL_L0C_SIZE`` 256 KiB);
# - vector registers: ``VECTOR_REG_WIDTH`` 256 bytes (2048 bits: 64 float32, 128 float16) in
#   ``kernel_utils_constants.h``;
# - cores: ``AIV_CORE_NUM`` 72 in ``kernel_utils_constants.h``; the groups are 1 AIC + 2 AIV as
#   on A2 (the kit's 3510 kernels are ``KERNEL_TYPE_MIX_AIC_1_2`` too), so 36 AIC. The kit gives
#   one figure for the architecture, so both SoC versions (Ascend 950PR and 950DT, the names of
#   the API documentation) carry it.
MEMORIES_950 = {m.scope: m for m in (
    Memory("ascend.ub", "UB", "VECCALC", 248 * 1024, ALIGN, "AIV"),
    Memory("ascend.l1", "L1", "A1", 512 * 1024, ALIGN, "AIC"),
    Memory("ascend.l0a", "L0A", "A2", 64 * 1024, 512, "AIC"),
    Memory("ascend.l0b", "L0B", "B2", 64 * 1024, 512, "AIC"),
    Memory("ascend.l0c", "L0C", "CO1", 256 * 1024, 1024, "AIC"),
)}
SOCS_950 = {s.name: s for s in (Soc("950PR", 36, 72), Soc("950DT", 36, 72))}


@dataclass(frozen=True)
class Arch:
    """One Ascend architecture as a target kind: its ``__NPU_ARCH__``, memories, SoC versions,
    vector register width, the dialect module whose kernels it compiles and where in UB the
    vendor's Select keeps its scratch (a kernel that calls Select plans its UB below it)."""

    kind: str
    name: str
    npu_arch: int
    family: str
    memories: dict
    socs: dict
    default_soc: str
    vector_bits: int
    dialect: str
    select_scratch: int | None = None  # UB offset of Select's scratch (None: it takes none)


ARCHS = {a.kind: a for a in (
    Arch("ascend", ARCH, NPU_ARCH, "Ascend A2/A3", MEMORIES, SOCS, DEFAULT_SOC, 2048,
         "tilewright_ascend.language", select_scratch=184 * 1024),
    Arch("ascend-950", "dav-3510", 3510, "Ascend 950", MEMORIES_950, SOCS_950, "950PR", 2048,
         "tilewright_ascend.language.mainline"),
)}


def arch_of(target) -> Arch:
    """The architecture of a target (``ascend`` when there is none)."""
    return ARCHS[target.kind if target is not None and target.kind in ARCHS else "ascend"]


def soc_of(target) -> Soc:
    """The SoC a target names with ``-soc=...`` (default: the architecture's first);
    unknown names list the ones the target's architecture has."""
    arch = arch_of(target)
    name = target.option("soc", arch.default_soc) if target is not None else arch.default_soc
    name = name.removeprefix("Ascend")
    if name not in arch.socs:
        raise TargetError(f"target option -soc={name} is not an {arch.family} SoC this backend "
                          f"knows (target {arch.kind}); choose one of {', '.join(arch.socs)}")
    return arch.socs[name]
