"""The data paths of A2/A3: which pipe of which core moves data from one memory to another, and
with which Ascend C instruction. Every pass that needs to know what a copy does (codegen, the
synchronisation pass, the core assignment) reads this one table."""

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


def path(src_scope, dst_scope) -> DataPath | None:
    return PATHS.get((str(src_scope), str(dst_scope)))
