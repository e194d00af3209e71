"""The Ascend machines this backend targets: SoC versions, core counts and on-chip memories.

One AI core group is 1 AIC (cube) + 2 AIV (vector). Sizes are bytes; UB and L1 keep the
256 bytes the runtime reserves.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.errors import TargetError

ARCH = "dav-2201"
ALIGN = 32  # bytes: DataCopy lengths and on-chip start addresses

# memory scope -> (Ascend C TPosition used to allocate it, capacity in bytes)
MEMORIES = {
    "ascend.ub": ("VECCALC", 196352),
    "ascend.l1": ("A1", 524032),
    "ascend.l0a": ("A2", 65536),
    "ascend.l0b": ("B2", 65536),
    "ascend.l0c": ("CO1", 131072),
}
SHORT = {"ascend.ub": "UB", "ascend.l1": "L1", "ascend.l0a": "L0A", "ascend.l0b": "L0B",
         "ascend.l0c": "L0C", "global": "GM"}
CUBE_SCOPES = frozenset({"ascend.l1", "ascend.l0a", "ascend.l0b", "ascend.l0c"})


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


def soc_of(target) -> Soc:
    """The SoC a target names with ``-soc=...`` (default 910B2); unknown names list the rest."""
    name = target.option("soc", DEFAULT_SOC) if target is not None else DEFAULT_SOC
    name = name.removeprefix("Ascend")
    if name not in SOCS:
        raise TargetError(f"target option -soc={name} is not an Ascend A2/A3 SoC this backend "
                          f"knows; choose one of {', '.join(SOCS)}")
    return SOCS[name]
