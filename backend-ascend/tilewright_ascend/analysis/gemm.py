"""GEMM shapes: the K steps of a ``T.gemm_v0``, its padded M and N, and the L1 operands stored
as rows of fractals."""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import tile_ops_in

from ..facts.dtypes import dtype_bytes
from ..facts.layout import c0, round_up


def gemm_calls(node) -> list:
    """The ``T.gemm_v0`` calls of ``node`` in program order."""
    return [c for c in tile_ops_in(node) if c.name == "ascend.gemm_v0"]


def gemm_k(call) -> tuple[int, int]:
    """(K step through L0, K padded to whole steps) of a gemm_v0 call: whole fractals along K,
    16 elements or C0 (32 bytes: 32 for a 1-byte type), whichever is more."""
    a = call.operands["A"].buffer
    shape = [int(s) for s in a.shape]
    k = shape[-2] if call.attrs["transpose_A"] else shape[-1]
    unit = max(16, c0(str(a.dtype)))
    kp = round_up(k, unit)
    kl0 = round_up(min(int(call.attrs["kL0Size"]), kp), unit)
    if kp % kl0:
        raise KernelError(f"T.gemm_v0: K = {k} (padded to {kp}) is not a multiple of "
                          f"kL0Size = {kl0}")
    return kl0, kp


def gemm_dims(call) -> tuple[int, int]:
    """(padded M, padded N) of a gemm_v0 call."""
    ash = [int(s) for s in call.operands["A"].buffer.shape]
    bsh = [int(s) for s in call.operands["B"].buffer.shape]
    m = ash[-1] if call.attrs["transpose_A"] else ash[-2]
    n = bsh[-2] if call.attrs["transpose_B"] else bsh[-1]
    return round_up(m, 16), round_up(n, 16)


def square_operands(node) -> set:
    """The 4-byte L1 GEMM operands whose fractals must be transposed on the way to L0 (B not
    transposed, A transposed). Such a tile is stored in L1 as rows of fractals (fractal (row
    block, column block) at (row block * column blocks + column block) * 512 bytes), so that
    each 16 x 16 square is two consecutive fractals, as LoadDataWithTranspose takes them."""
    squares, plain = set(), set()
    for call in gemm_calls(node):
        for operand, flag in (("A", "transpose_A"), ("B", "transpose_B")):
            b = call.operands[operand].buffer
            if dtype_bytes(b.dtype) == 4:
                (squares if bool(call.attrs[flag]) == (operand == "A") else plain).add(b)
    both = squares & plain
    if both:
        name = sorted(str(b.name) for b in both)[0]
        raise KernelError(f"{name!r} (4-byte) is a GEMM operand both with and without a "
                          "fractal transpose; its L1 layout cannot serve both: use two buffers")
    return squares
