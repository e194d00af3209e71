"""T.gemm with a one-wide tile (a decode GEMV: one row of A, M = 1; one column of B, N = 1; or
both, a dot product) in every transpose form, on the interpreter and the CPU backend against
torch. A one-wide tile keeps its unit dimension (``tilewright.ir.matrix_dims``); T.gemm used to
squeeze it away and refuse the tile as not 2-D."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright.ir import matrix_dims
from tvm import tirx


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "tw-cache"))


def gemm(M, N, K, bm, bn, bk, trans_a=False, trans_b=False, dtype="float32"):
    a_shape, a_tile = ((K, M), (bk, bm)) if trans_a else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


# (M, N, K, block M, block N, block K)
SHAPES = {
    "row_of_A": (1, 40, 48, 1, 32, 16),      # M = 1: the decode GEMV, a partial N tile
    "rows_per_block": (3, 64, 32, 1, 32, 16),  # one row of A per block, three blocks
    "column_of_B": (40, 1, 48, 32, 1, 16),   # N = 1: matrix-vector product
    "dot": (1, 1, 48, 1, 1, 16),             # both: a dot product
}


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True),
                                             (True, True)], ids=["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_one_wide_gemm_matches_torch(backend, shape, trans_a, trans_b):
    M, N, K, bm, bn, bk = shape
    kernel = tilewright.compile(gemm(M, N, K, bm, bn, bk, trans_a, trans_b), out_idx=[-1],
                                target=backend)
    g = torch.Generator().manual_seed(M * 1000 + N)
    a = torch.randn((K, M) if trans_a else (M, K), generator=g)
    b = torch.randn((N, K) if trans_b else (K, N), generator=g)
    ref = (a.T if trans_a else a) @ (b.T if trans_b else b)
    torch.testing.assert_close(kernel(a, b), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["interp", "cpu"])
def test_one_wide_gemm_of_half_operands(backend):
    """float16 operands into a float32 accumulator: the CPU backend widens the tiles once."""
    kernel = tilewright.compile(gemm(1, 64, 64, 1, 32, 32, trans_b=True, dtype="float16"),
                                out_idx=[-1], target=backend)
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(1, 64, generator=g).half(), torch.randn(64, 64, generator=g).half()
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def staged(M, N, K, bm, bn, bk, trans_a):
    """A's tiles in the stages of a [2, bm, bk] buffer ([2, bk, bm] transposed), the gemm
    reading one stage: a 3-D region whose matrix is its last two dimensions."""
    a_shape, a_tile = ((K, M), (2, bk, bm)) if trans_a else ((M, K), (2, bm, bk))

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float32"), B: T.Tensor((K, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared(a_tile, "float32")
            B_s = T.alloc_shared((bk, bn), "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.serial(T.ceildiv(K, bk)):
                if trans_a:
                    T.copy(A[k * bk:(k + 1) * bk, by * bm:(by + 1) * bm], A_s[k % 2, :, :])
                else:
                    T.copy(A[by * bm:(by + 1) * bm, k * bk:(k + 1) * bk], A_s[k % 2, :, :])
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s[k % 2, :, :], B_s, C_l, transpose_A=trans_a)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["n", "t"])
@pytest.mark.parametrize("M,bm", [(1, 1), (32, 16)], ids=["row", "tile"])
def test_a_stage_of_a_3d_buffer_as_operand(backend, M, bm, trans_a):
    """The interpreter multiplied the 3-D region as it was read ((1, bk, bm) transposed is
    (bm, bk, 1), a shape error); it reads it as its matrix now, as the CPU backend does."""
    kernel = tilewright.compile(staged(M, 32, 48, bm, 32, 16, trans_a), out_idx=[-1],
                                target=backend)
    g = torch.Generator().manual_seed(M)
    a = torch.randn((48, M) if trans_a else (M, 48), generator=g)
    b = torch.randn(48, 32, generator=g)
    torch.testing.assert_close(kernel(a, b), (a.T if trans_a else a) @ b, rtol=1e-4,
                               atol=1e-4)


def test_matrix_dims_keeps_a_one_wide_tile_and_a_stage_of_a_pipelined_buffer():
    one = tirx.IntImm("int32", 1)
    assert matrix_dims((1, 64)) == [0, 1]
    assert matrix_dims((64, one)) == [0, 1]
    assert matrix_dims((1, 1)) == [0, 1]
    assert matrix_dims((1, 32, 16)) == [1, 2]   # one stage of [stages, M, K]
    assert matrix_dims((1, 1, 16)) == [1, 2]    # one stage of a one-row tile
    assert matrix_dims((2, 8, 8)) is None
    assert matrix_dims((64,)) is None


def test_a_one_dimensional_tile_is_still_refused_at_the_users_line():
    with pytest.raises(KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((1, 32), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64,), "float32")
                b = T.alloc_shared((64, 32), "float32")
                c = T.alloc_fragment((1, 32), "float32")
                T.copy(A, a)
                T.gemm(a, b, c)  # the-1d-operand
                T.copy(c, C)

    text = str(info.value)
    assert "T.gemm operand A ('a') must be a 2-D tile, got shape (64,)" in text
    assert "the-1d-operand" in text
