"""Register and cache blocking of a GEMM tile for the host CPU.

:func:`choose_blocking` picks the micro-kernel's register block ``mr x nr`` for an accumulator
tile: ``nr`` is a multiple of the host's vector width (8 float32 lanes with AVX2, 16 with
AVX-512), and the pair must leave its ``mr * nr / lanes`` accumulators, ``nr / lanes`` vectors of
B and one broadcast element of A in the host's vector registers. Among those, the cost model
(:func:`tile_cycles`) of a core that issues two vector FMAs and two loads per cycle and waits
five cycles for an FMA's result chooses, counting the shorter and narrower blocks at the
tile's edges; of the blockings within 3% of the cheapest, the one with most accumulators wins.
``kc``, the K depth of one pass over the tile, is the depth whose ``kc x nr`` panel of B fills
half of L1.

:func:`k_unroll` says how many iterations of a kernel's K loop to merge into one deeper GEMM:
enough to reach ``kc`` while the staged tiles still fit half of L2.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hostcpu import HostCPU, host_cpu

# The core the cost model assumes: vector FMAs and loads issued per cycle, FMA latency.
FMA_PER_CYCLE = 2
LOADS_PER_CYCLE = 2
FMA_LATENCY = 5
MAX_VECTORS_PER_ROW = 4
# blockings within this fraction of the cheapest count as equally cheap
COST_SLACK = 0.03


@dataclass(frozen=True)
class Blocking:
    """Register block ``mr x nr`` (``nr`` a multiple of ``lanes``), the host's ``registers``
    and K depth ``kc``."""

    mr: int
    nr: int
    lanes: int
    registers: int
    kc: int

    def rows_for(self, vectors: int) -> int:
        """Rows of a block ``vectors`` registers wide (a scalar column takes a register too)
        whose accumulators, B vectors and broadcast A element fit the registers: ``mr`` for
        the full width, possibly fewer for a wider column remainder."""
        return max(1, min(self.mr, (self.registers - vectors - 1) // vectors))


def _block_cycles(rows: int, vectors: int) -> float:
    """Cycles per k step of a block of ``rows`` x ``vectors`` accumulator vectors."""
    return max(rows * vectors / FMA_PER_CYCLE, FMA_LATENCY, (rows + vectors) / LOADS_PER_CYCLE)


def column_vectors(cols: int, lanes: int) -> int:
    """Registers per row of a ``cols``-wide block: vectors, or one per column when ``cols``
    is not a multiple of the vector width (such a block runs column by column)."""
    return cols // lanes if cols % lanes == 0 else cols


def tile_cycles(m: int, n: int, blk: Blocking) -> float:
    """Modelled cycles per k step of an ``m x n`` tile cut into ``blk``'s blocks."""
    cycles = 0.0
    full_cols, rest = divmod(n, blk.nr)
    for cols, count in ((blk.nr, full_cols), (rest, 1 if rest else 0)):
        if not count:
            continue
        vectors = column_vectors(cols, blk.lanes)
        rows = blk.rows_for(vectors)
        cycles += count * (m // rows) * _block_cycles(rows, vectors)
        if m % rows:
            cycles += count * _block_cycles(m % rows, vectors)
    return cycles


def choose_blocking(m: int, n: int, acc_bits: int, host: HostCPU | None = None) -> Blocking:
    """The register block and K depth of an ``m x n`` accumulator tile of ``acc_bits``-bit
    elements on ``host`` (default: this machine)."""
    host = host or host_cpu()
    lanes, registers = host.lanes(acc_bits), host.vector_registers
    candidates = [Blocking(mr, vectors * lanes, lanes, registers, 0)
                  for vectors in range(1, MAX_VECTORS_PER_ROW + 1)
                  for mr in range(1, min(m, (registers - vectors - 1) // vectors) + 1)]
    costs = {blk: tile_cycles(m, n, blk) for blk in candidates}
    cheapest = min(costs.values())
    # near the cheapest, more accumulators hide more latency and load less per FMA
    best = max((b for b, c in costs.items() if c <= cheapest * (1 + COST_SLACK)),
               key=lambda b: (b.mr * b.nr, -costs[b]))
    panel_row = best.nr * acc_bits // 8
    kc = max(16, host.l1_bytes // 2 // panel_row // 16 * 16)
    return Blocking(best.mr, best.nr, lanes, registers, kc)


def k_unroll(trips: int | None, depth: int, m: int, n: int, acc_bits: int,
             host: HostCPU | None = None) -> int:
    """How many iterations of a K loop (``trips`` of them, None when symbolic) whose GEMM
    multiplies ``m x depth`` by ``depth x n`` tiles to merge into one GEMM: at most enough to
    reach the depth ``kc``, with both merged tiles (in the accumulator type) within half of L2.
    A count that divides ``trips`` is preferred unless it is less than half the most.
    1 means: leave the loop alone."""
    host = host or host_cpu()
    kc = choose_blocking(m, n, acc_bits, host).kc
    bytes_per_step = (m + n) * depth * acc_bits // 8
    most = min(kc // max(depth, 1), host.l2_bytes // 2 // max(bytes_per_step, 1))
    if trips is not None:
        most = min(most, trips)
    if most < 2:
        return 1
    if trips is None:
        return most
    divisor = max(u for u in range(1, most + 1) if trips % u == 0)
    return divisor if 2 * divisor > most else most
