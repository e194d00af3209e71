"""T.tma_copy into a part of a shared tile (rules/tma.py). A swizzled tile is stored as column
blocks of 128 bytes, each with its rows dense, so a column range that starts and ends on those
blocks (TileLang's flashmla KV tiles, ``KV_s[:, j * 64:(j + 1) * 64]``) is one TMA box per
block at the block's start, with the tile's swizzle mode; a range off the blocks is refused."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError


def column_blocks(cols=256):
    """B's column blocks land in B_s one T.tma_copy each, on their own mbarrier; a wgmma reads
    each block as the K slice of the same columns of A_s: C = A @ B^T."""

    @T.prim_func
    def main(A: T.Tensor((64, cols), "float16"), B: T.Tensor((64, cols), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, cols), "float16")
            B_s = T.alloc_shared((64, cols), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            bar = T.alloc_barrier([128] * (cols // 64))
            T.copy(A, A_s)
            for j in T.unroll(cols // 64):
                T.tma_copy(B[:, j * 64:(j + 1) * 64], B_s[:, j * 64:(j + 1) * 64],
                           barrier=bar[j])
                T.mbarrier_arrive(bar[j])
            for j in T.unroll(cols // 64):
                T.mbarrier_wait_parity(bar[j], 0)
                T.wgmma_gemm(A_s[:, j * 64:(j + 1) * 64], B_s[:, j * 64:(j + 1) * 64], C_l,
                             transpose_B=True, clear_accum=(j == 0))
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


def test_each_column_block_is_one_swizzled_box_at_its_block():
    lowered = tilewright.lower(column_blocks(), "cuda -arch=sm_90a")
    maps = [p for p in lowered.source.payload["params"] if p["kind"] == "tensormap"]
    assert [(m["box"], m["swizzle"]) for m in maps] == [([64, 64], 128)]
    text = lowered.source.text
    # block j: global column j * 64, shared 64 rows x 128 bytes = 4096 halves after block j-1
    # (the swizzle's line form: the block's start is an addition, the flip of its line 64 j)
    for j in range(4):
        assert f"[((0 ^ (({j * 64} & 7) << 3)) + {16384 + j * 4096})])), {j * 64}, 0);" in text


@pytest.mark.emulator
def test_column_blocks_feed_the_wgmma(tmp_path):
    lowered = tilewright.lower(column_blocks(128), "cuda -arch=sm_90a")
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, 128, generator=g).half() for _ in range(2))
    c = torch.full((64, 64), float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def columns(lo, width):
    """One T.tma_copy of columns ``lo .. lo + width`` of a swizzled [64, 256] tile."""

    @T.prim_func
    def main(B: T.Tensor((64, 256), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 256), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            bar = T.alloc_barrier(128)
            T.clear(A_s)
            T.tma_copy(B[:, lo:lo + width], B_s[:, lo:lo + width], barrier=bar)
            T.mbarrier_arrive(bar)
            T.mbarrier_wait_parity(bar, 0)
            T.wgmma_gemm(A_s, B_s[:, 0:64], C_l, transpose_B=True, clear_accum=True)
            T.wait_wgmma(0)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("lo, width", [(32, 64), (64, 96)])
def test_a_column_range_off_the_swizzle_atoms_is_refused(lo, width):
    with pytest.raises(KernelError, match=r"test_cuda_tma_parts\.py:\d+: T\.tma_copy: the "
                       rf"columns {lo} \.\. {lo} \+ {width} of 'B_s' do not start and end on "
                       r"its swizzle atoms of 64 columns \(128 bytes\)"):
        tilewright.lower(columns(lo, width), "cuda -arch=sm_90a")
