"""The GEMM tile-shape recommender.

Candidates: per dimension, the instruction granularity times powers of two and the divisors
of the problem size that are multiples of it (block_M, block_N up to 256; block_K up to 128).
Two hard limits filter them, per compute unit: on-chip memory for the pipelined A and B
tiles (``stages * (bM*bK + bK*bN) * bytes <= shared_memory_bytes``, and no more than one
block may use, ``block_shared_memory_bytes``, where the model gives it) and the accumulator's
register proxy (``2 * bM*bN * accum_bits / 32 <= register_budget``). The score estimates the
whole kernel's DRAM traffic: the bytes one output tile moves (rows rounded up to the
transaction size) times the number of waves, ``ceil(tiles / (blocks per unit * units))``;
lower is better. Recommendations are a starting point for ``autotune``, which measures.

A hint also answers with TileLang's roller names: ``block``, ``warp`` (the tile each warp of
``threads`` computes), ``rstep`` (the reduction step, ``(block_K,)``), ``pipeline_stage`` and
``rasterization_plan``: as TileLang's roller plans it, column panels of ``sqrt(units)`` tiles
on a GPU of compute capability 8.0 or later whose L2 cache cannot hold the inputs,
:class:`~.roller.rasterization.NoRasterization` otherwise (and on a device without an L2 size
or compute capability, such as the host).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import tvm

from ..errors import ConfigError
from ..plugin import ArchModel
from ..profiler.arch import get_arch
from .programs import matmul_program
from .roller.rasterization import NoRasterization, Rasterization, Rasterization2DColumn

DEFAULT_KEYS = ("block_M", "block_N", "block_K", "num_stages", "threads")


def _bytes(dtype: str) -> int:
    try:
        t = tvm.DataType(str(dtype))
    except Exception:  # noqa: BLE001 - TVM raises its own error type
        raise ConfigError(f"unknown dtype {dtype!r}") from None
    return max(1, t.bits // 8)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _warp_grid(block_m: int, block_n: int) -> tuple[int, int]:
    """How the warps of a block tile it: one per 64 rows and 64 columns, at most 8 (the
    longer side gives way)."""
    rows, cols = block_m // 64 or 1, block_n // 64 or 1
    while rows * cols > 8:
        if cols >= rows:
            cols //= 2
        else:
            rows //= 2
    return rows, cols


@dataclass(frozen=True)
class Hint:
    """One recommended tile shape, with the numbers behind its score."""

    block_M: int
    block_N: int
    block_K: int
    num_stages: int
    threads: int
    score: float
    traffic_bytes: int
    waves: int
    tiles: int
    blocks_per_unit: int
    smem_bytes: int
    reg_usage: int
    explanation: str
    rasterization_plan: Rasterization = NoRasterization()

    @property
    def block(self) -> tuple[int, int]:
        return self.block_M, self.block_N

    @property
    def warp(self) -> tuple[int, int]:
        """The tile one warp computes (``block_M // warp_M * block_N // warp_N * 32 ==
        threads``)."""
        rows, cols = _warp_grid(self.block_M, self.block_N)
        return self.block_M // rows, self.block_N // cols

    @property
    def rstep(self) -> tuple[int]:
        return (self.block_K,)

    @property
    def pipeline_stage(self) -> int:
        return self.num_stages

    def config(self, keys=DEFAULT_KEYS) -> dict:
        """An ``autotune`` config: the fields named by ``keys`` (a sequence of field names,
        or a mapping from field name to the kernel's parameter name)."""
        mapping = keys if isinstance(keys, dict) else {k: k for k in keys}
        unknown = [k for k in mapping if k not in DEFAULT_KEYS]
        if unknown:
            raise ConfigError(f"a hint has no field(s) {', '.join(unknown)}; fields: "
                              f"{', '.join(DEFAULT_KEYS)}")
        return {param: getattr(self, name) for name, param in mapping.items()}


@dataclass(frozen=True)
class MatmulTemplate:
    """C[M, N] = A[M, K] @ B[K, N] (``trans_A``/``trans_B`` for stored transposes)."""

    M: int
    N: int
    K: int
    in_dtype: str = "float16"
    out_dtype: str = "float16"
    accum_dtype: str = "float32"
    trans_A: bool = False
    trans_B: bool = False
    arch: ArchModel | None = None

    def __post_init__(self):
        for name in ("M", "N", "K"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"MatmulTemplate: {name} must be a positive integer, got "
                                  f"{value!r}")
        for name in ("in_dtype", "out_dtype", "accum_dtype"):
            object.__setattr__(self, name, str(getattr(self, name)))
            _bytes(getattr(self, name))

    def with_arch(self, arch) -> MatmulTemplate:
        """This template on ``arch`` (an ArchModel or a registered model's name)."""
        model = get_arch(arch)
        missing = [f for f in ("compute_units", "shared_memory_bytes", "register_budget")
                   if not getattr(model, f)]
        if missing:
            raise ConfigError(f"arch model {model.name!r} lacks {', '.join(missing)}, which "
                              "the tile-shape recommender needs")
        return replace(self, arch=model)

    def equivalent_function(self):
        """The computation this template describes, as a tile program (a PrimFunc of
        ``A``, ``B`` -- stored transposed as ``trans_A``/``trans_B`` say -- and ``C``) that
        compiles and runs with the best recommended tile shape, or 64 x 64 x 32 blocks
        before :meth:`with_arch`."""
        if self.arch is None:
            bm, bn, bk, stages, threads = 64, 64, 32, 2, 128
        else:
            best = self.recommend_hints(topk=1)[0]
            bm, bn, bk, stages, threads = (best.block_M, best.block_N, best.block_K,
                                           best.num_stages, best.threads)
        return matmul_program(self.M, self.N, self.K, self.in_dtype, self.out_dtype,
                              self.accum_dtype, self.trans_A, self.trans_B,
                              (bm, bn, bk, stages, threads))

    # -- search -----------------------------------------------------------------------
    def _candidates(self, size: int, gran: int, cap: int) -> list[int]:
        values = set()
        step = gran
        while step <= cap:
            values.add(step)
            step *= 2
        values.update(d for d in range(gran, min(size, cap) + 1, gran) if size % d == 0)
        small = [v for v in sorted(values) if v < _round_up(size, gran)]
        # a block larger than the whole dimension only wastes work: keep the first one that
        # covers it
        cover = [v for v in sorted(values) if v >= size][:1]
        return small + cover

    def _traffic(self, bm: int, bn: int, bk: int) -> int:
        """DRAM bytes one output tile moves, each contiguous row rounded to transactions."""
        a, o = _bytes(self.in_dtype), _bytes(self.out_dtype)
        tx = self.arch.transaction_bytes
        steps = math.ceil(self.K / bk)
        a_rows = bk * _round_up(bm * a, tx) if self.trans_A else bm * _round_up(bk * a, tx)
        b_rows = bn * _round_up(bk * a, tx) if self.trans_B else bk * _round_up(bn * a, tx)
        return steps * (a_rows + b_rows) + bm * _round_up(bn * o, tx)

    def _hint(self, bm: int, bn: int, bk: int) -> Hint | None:
        arch = self.arch
        a = _bytes(self.in_dtype)
        accum_bits = _bytes(self.accum_dtype) * 8
        reg = 2 * bm * bn * accum_bits // 32
        if reg > arch.register_budget:
            return None
        stage_bytes = (bm * bk + bk * bn) * a
        block_limit = min(arch.block_shared_memory_bytes or arch.shared_memory_bytes,
                          arch.shared_memory_bytes)
        if stage_bytes > block_limit:
            return None
        base_stages = 2 if self.K > bk else 1
        occupancy = min(arch.shared_memory_bytes // (base_stages * stage_bytes) or 1,
                        arch.register_budget // reg, arch.unit_partitions)
        stages = base_stages
        # deepen the pipeline while the same number of blocks still fits on a unit
        while stages < 4 and self.K > stages * bk and \
                (stages + 1) * stage_bytes <= block_limit and \
                arch.shared_memory_bytes // ((stages + 1) * stage_bytes) >= occupancy:
            stages += 1
        smem = stages * stage_bytes
        if smem > block_limit:
            stages, smem = 1, stage_bytes
        tiles = math.ceil(self.M / bm) * math.ceil(self.N / bn)
        waves = math.ceil(tiles / (occupancy * arch.compute_units))
        traffic = self._traffic(bm, bn, bk)
        rows, cols = _warp_grid(bm, bn)
        warps = rows * cols
        score = float((traffic + 1) * waves)
        explanation = (f"({traffic} B per tile + 1) x {waves} wave(s): {tiles} tile(s) over "
                       f"{arch.compute_units} unit(s) x {occupancy} block(s) each; on-chip "
                       f"{smem} of {arch.shared_memory_bytes} B ({stages} stage(s)), "
                       f"registers {reg} of {arch.register_budget}")
        return Hint(bm, bn, bk, stages, 32 * warps, score, traffic, waves, tiles, occupancy,
                    smem, reg, explanation, self._rasterization())

    def _rasterization(self) -> Rasterization:
        """TileLang's roller plan: column panels on a compute capability 8.0+ GPU whose L2
        cache cannot hold A and B, none otherwise."""
        details = self.arch.details
        capability = str(details.get("compute_capability", "")).replace(".", "")
        l2 = int(details.get("l2_bytes", 0) or 0)
        inputs = (self.M * self.K + self.K * self.N) * _bytes(self.in_dtype)
        if not capability.isdigit() or int(capability) < 80 or not l2 or inputs < l2:
            return NoRasterization()
        return Rasterization2DColumn(int(self.arch.compute_units ** 0.5))

    def recommend_hints(self, topk: int = 20) -> list[Hint]:
        """The ``topk`` feasible tile shapes with the lowest score, best first."""
        if self.arch is None:
            raise ConfigError("MatmulTemplate has no architecture: call .with_arch(arch) first")
        if not isinstance(topk, int) or topk < 1:
            raise ConfigError(f"topk must be a positive integer, got {topk!r}")
        gm, gn, gk = self.arch.mma_shape
        k_floor = max(gk, 8)
        hints = []
        for bm in self._candidates(self.M, gm, 256):
            for bn in self._candidates(self.N, gn, 256):
                for bk in self._candidates(self.K, k_floor, 128):
                    hint = self._hint(bm, bn, bk)
                    if hint is not None:
                        hints.append(hint)
        if not hints:
            raise ConfigError(f"no tile shape of {self.M}x{self.N}x{self.K} fits the on-chip "
                              f"memory ({self.arch.shared_memory_bytes} B) and register budget "
                              f"({self.arch.register_budget}) of {self.arch.name}")
        partitions = self.arch.unit_partitions
        hints.sort(key=lambda h: (h.score, abs(h.threads // 32 - partitions), -h.block_K,
                                  h.num_stages))
        return hints[:topk]

    def recommend_configs(self, topk: int = 20, keys=DEFAULT_KEYS) -> list[dict]:
        """``recommend_hints`` as ``autotune`` configs (see :meth:`Hint.config`)."""
        return [h.config(keys) for h in self.recommend_hints(topk)]
