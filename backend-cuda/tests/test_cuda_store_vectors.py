"""``T.copy`` from a shared tile to a global tensor moves 16-byte chunks (``tw_copy16``: one
128-bit shared load and one 128-bit global store per chunk) where both sides allow it, as
copies into shared memory do; TileLang kernels stage their C tile that way
(``T.copy(C_local, C_shared); T.copy(C_shared, C[...])``). A chunk past the tensor's edge is
skipped; rows that are no multiple of 16 bytes keep the element-wise copy."""

import pytest
import tilewright
import tilewright.language as T
from test_cuda_pipeline import _emulate

TARGET = "cuda -arch=sm_90a"


def staged_gemm(M, N, K, bm=64, bn=64, bk=32, dtype="float16", scale=None):
    """A GEMM whose accumulator goes through the shared tile ``C_s``: copied out whole
    (``scale`` None) or read element by element, scaled, by a ``T.Parallel`` loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            C_s = T.alloc_shared((bm, bn), dtype)
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[ko * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C_s)
            if scale is None:
                T.copy(C_s, C[by * bm, bx * bn])
            else:
                for i, j in T.Parallel(bm, bn):
                    C[by * bm + i, bx * bn + j] = C_s[i, j] * scale

    return main


def _epilogue(text: str) -> str:
    kernel = text[text.index('extern "C" __global__'):]
    return kernel[kernel.rindex("tw::store_pair"):]


def test_a_staged_tile_leaves_in_16_byte_chunks():
    text = tilewright.lower(staged_gemm(256, 256, 128), TARGET).source.text
    tail = _epilogue(text)
    # 64 x 64 halves = 512 chunks over 128 threads, 4 each (8 threads per 128-byte row), after
    # a barrier for C_s (a named one: the compute warpgroup beside the TMA producer)
    barrier = "tw_named_barrier_sync(1, 128);"
    assert tail.count("tw_copy16((&(C_ptr[") == 1 and "for (int it = 0; it < 4; ++it)" in tail
    assert "(((int)threadIdx.x) & 7) * 8))])), (&(((half*)tw_smem_ptr)[" in tail
    assert barrier in tail and tail.index(barrier) < tail.index("tw_copy16(")


def test_rows_that_are_no_multiple_of_16_bytes_keep_the_element_copy():
    text = tilewright.lower(staged_gemm(256, 252, 128), TARGET).source.text
    assert "tw_copy16((&(C_ptr[" not in _epilogue(text)


@pytest.mark.emulator
@pytest.mark.parametrize("M, N", [(256, 256), (200, 184), (130, 252)])
def test_staged_epilogue_matches_torch(M, N, tmp_path):
    # partial tiles: chunks past N (a multiple of 8) are skipped; N = 252 stays element-wise
    _emulate(staged_gemm(M, N, 96), "sm_90a", tmp_path, M, N, 96)


@pytest.mark.nvrtc
@pytest.mark.sass
def test_the_chunks_are_128_bit_stores_in_sass():
    import sass
    from tilewright_cuda import arch, executor

    text = tilewright.lower(staged_gemm(256, 256, 128), TARGET).source.text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "STG.E.128" in code and "STG.E.U16" not in code
