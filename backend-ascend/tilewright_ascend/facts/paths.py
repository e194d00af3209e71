"""The data paths of A2/A3: which pipe of which core moves data from one memory to another, and
with which Ascend C instruction. Every pass that needs to know what a copy does (codegen, the
synchronisation pass, the core assignment) reads this one table; ``DUAL_COPY_PATHS`` is the
950's ``T.dual_copy``: its memories, and how and why each pair is moved."""

from __future__ import annotations

from dataclasses import dataclass

UB, L1, L0A, L0B, L0C, GM = "ascend.ub", "ascend.l1", "ascend.l0a", "ascend.l0b", "ascend.l0c", \
    "global"


@dataclass(frozen=True)
class DataPath:
    src: str
    dst: str
    pipe: str
    core: str
    instruction: str


PATHS = {(p.src, p.dst): p for p in (
    DataPath(GM, UB, "mte2", "AIV", "DataCopy / DataCopyPad"),
    DataPath(UB, GM, "mte3", "AIV", "DataCopy / DataCopyPad"),
    DataPath(UB, UB, "v", "AIV", "DataCopy"),
    DataPath(GM, L1, "mte2", "AIC", "DataCopy with Nd2NzParams"),
    DataPath(L1, L0A, "mte1", "AIC", "LoadData"),
    DataPath(L1, L0B, "mte1", "AIC", "LoadData"),
    DataPath(L0C, GM, "fix", "AIC", "Fixpipe"),
)}


@dataclass(frozen=True)
class DualPath:
    """How ``T.dual_copy`` (target ``ascend-950``) moves one pair of memories, and why:
    ``route`` ``subcore`` (each vector sub-core copies its half), ``fixpipe`` (the cube's
    dual-destination Fixpipe into both sub-cores' UB) or ``workspace`` (through a GM tile);
    ``full_source``: whether the full tile is the source (else the destination)."""

    full_source: bool
    route: str
    why: str


DUAL_COPY_PATHS = {
    (L0C, UB): DualPath(True, "fixpipe", "one Fixpipe of FixpipeParamsArch3510 with dualDstCtl "
                        "(include/basic_api/kernel_struct_fixpipe.h), in loops too; a GM "
                        "workspace only for an N split whose N is not a multiple of 32, which "
                        "FixpipeL0cToUB of dav_3510 does not take"),
    (GM, UB): DualPath(True, "subcore", "each sub-core's DataCopy of its half (MTE2)"),
    (UB, GM): DualPath(False, "subcore", "each sub-core's DataCopy of its half (MTE3)"),
    (UB, L1): DualPath(False, "workspace", "each sub-core writes its half to GM, the cube loads "
                       "the whole tile into L1 with Nd2Nz (ND -> NZ): PATHS has no copy from a "
                       "vector core's UB into the cube's L1"),
}


def path(src_scope, dst_scope) -> DataPath | None:
    return PATHS.get((str(src_scope), str(dst_scope)))
