"""T.gemm_sp: the 2:4 metadata layout of tilewright.sparse and the compressor of
tilewright.utils.sparse, the sparse-GEMM example on the interpreter against torch (with
transposed operands and metadata), and bad operands refused at the user's line. The
catalogue's gemm_sp row runs the kernel on every backend that declares it."""

import sys
from pathlib import Path

import pytest
import tilewright
import tilewright.language as T
import torch
from source_lines import Markers
from tilewright import sparse
from tilewright.utils.sparse import compress, decompress, randn_semi_sparse

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import gemm_sp  # noqa: E402 - after the sys.path setup

_M = Markers(__file__)


def test_metadata_fields_by_hand():
    # row 0: groups keep (0, 1), (1, 3), (0, 2), (2, 3); one int16 holds the four fields
    dense = torch.zeros(1, 16, dtype=torch.float16)
    for k in (0, 1, 5, 7, 8, 10, 14, 15):
        dense[0, k] = k + 1
    values, meta = compress(dense)
    assert values.tolist() == [[1, 2, 6, 8, 9, 11, 15, 16]]
    fields = [0b0100, 0b1101, 0b1000, 0b1110]
    word = sum(f << (4 * i) for i, f in enumerate(fields))
    assert meta.dtype == torch.int16 and meta.tolist() == [[word - (1 << 16)]]
    assert fields == [sparse.field_of(p, "float16") for p in ((0, 1), (1, 3), (0, 2), (2, 3))]


def test_float32_keeps_one_of_two_as_halves():
    dense = torch.tensor([[0.0, 3.0, 5.0, 0.0]])
    values, meta = compress(dense, torch.int8)
    assert values.tolist() == [[3.0, 5.0]]
    assert meta.tolist() == [[0b1110 | 0b0100 << 4]]


def test_a_group_with_fewer_nonzeros_keeps_the_first_zeros():
    dense = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0] + [0.0] * 8],
                         dtype=torch.bfloat16)
    values, meta = compress(dense)
    assert values[0, :4].tolist() == [0, 0, 0, 2]
    assert int(meta[0, 0]) & 0xFF == 0b0100 | 0b1100 << 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8,
                                   torch.float8_e4m3fn])
@pytest.mark.parametrize("meta_dtype", [None, torch.int8, torch.int16, torch.int32])
def test_compress_round_trips(dtype, meta_dtype):
    gen = torch.Generator().manual_seed(0)
    a = randn_semi_sparse(8, 64, torch.float32 if dtype == torch.float32 else torch.float16,
                          generator=gen)
    a = (a * 20).to(dtype)
    values, meta = compress(a, meta_dtype)
    factor = sparse.e_factor(str(dtype)[6:], str(meta.dtype)[6:])
    assert values.shape == (8, 32) and meta.shape == (8, 64 // factor)
    assert torch.equal(decompress(values, meta).view(torch.uint8 if dtype.itemsize == 1 else
                                                       dtype), a.view(torch.uint8) if
                       dtype.itemsize == 1 else a)
    t_values, t_meta = compress(a.t().contiguous(), meta_dtype, transposed=True)
    assert torch.equal(t_values, values.t()) and torch.equal(t_meta, meta.t())


def test_compress_refuses_a_dense_group():
    a = torch.ones(2, 16)
    with pytest.raises(ValueError, match=r"row 0, columns 0..1: 2 nonzeros where at most 1 of 2"):
        compress(a)


@tilewright.jit(out_idx=[-1], target="interp")
def _transposed(M, N, K, dtype, meta, bk=32):
    ef = sparse.e_factor(dtype, meta)

    @T.prim_func
    def main(A: T.Tensor((K // 2, M), dtype), E: T.Tensor((K // ef, M), meta),
             B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((bk // 2, M), dtype)
            E_s = T.alloc_shared((bk // ef, M), meta)
            B_s = T.alloc_shared((N, bk), dtype)
            C_f = T.alloc_fragment((M, N), "float32")
            for k in T.serial(K // bk):
                T.copy(A[k * bk // 2, 0], A_s)
                T.copy(E[k * bk // ef, 0], E_s)
                T.copy(B[0, k * bk], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_f, transpose_A=True, transpose_E=True,
                          transpose_B=True, clear_accum=k == 0)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize(("dtype", "meta"), [("float16", "int16"), ("float32", "int8")])
def test_transposed_operands_on_the_interpreter(dtype, meta):
    gen = torch.Generator().manual_seed(2)
    m, n, k = 16, 24, 64
    a = randn_semi_sparse(m, k, getattr(torch, dtype), generator=gen)
    b = torch.randn(n, k, generator=gen).to(getattr(torch, dtype))
    values, e = compress(a.t().contiguous(), getattr(torch, meta), transposed=True)
    got = _transposed(m, n, k, dtype, meta)(values, e, b)
    torch.testing.assert_close(got.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("block_K", [64, 16])  # 16: one metadata column a k-tile
def test_example_on_the_interpreter(block_K):  # noqa: N803
    gen = torch.Generator().manual_seed(1)
    a = randn_semi_sparse(40, 128, torch.float16, generator=gen)
    b = torch.randn(128, 72, generator=gen).to(torch.float16)
    values, e = compress(a)
    func = gemm_sp.gemm_sp_kernel.fn(40, 72, 128, block_M=32, block_N=64, block_K=block_K)
    got = tilewright.compile(func, out_idx=[-1], target="interp")(values, e, b)
    torch.testing.assert_close(got.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)


def test_example_refuses_metadata_of_the_wrong_shape_before_launch():
    values = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"E \[M, K / 16\] = \[64, 8\] \(got \[64, 64\] and "
                                         r"\[64, 4\]\)"):
        gemm_sp.gemm_sp_mm(values, torch.zeros(64, 4, dtype=torch.int16),
                           torch.zeros(128, 32, dtype=torch.float16))


def _kernel(meta_cols, meta="int16", b_dtype="float16", a_cols=32, dtype="float16"):
    @T.prim_func
    def main(C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((16, a_cols), dtype)
            e = T.alloc_shared((16, meta_cols), meta)
            b = T.alloc_shared((64, 16), b_dtype)
            c = T.alloc_fragment((16, 16), "float32")
            T.gemm_sp(a, e, b, c)  # gemm-sp
            T.copy(c, C)

    return main


@pytest.mark.parametrize(("args", "words"), [
    ((8,), ("metadata E 'e' has 8 columns along K", "int16 metadata of float16 needs K / 16 = 4")),
    ((4, "float16"), ("metadata E 'e' is float16", "int8, int16, int32")),
    ((4, "int16", "bfloat16"), ("B 'b' is bfloat16 but A_sparse 'a' is float16",)),
    ((4, "int16", "float16", 16), ("K mismatch", "so K = 32", "B 'b' gives K = 64")),
    ((4, "int16", "float64", 32, "float64"), ("A_sparse 'a' is float64", "float16, bfloat16")),
])
def test_bad_operands_are_refused_at_the_users_line(args, words):
    with pytest.raises(tilewright.KernelError) as info:
        _kernel(*args)
    _M.assert_at(info.value, "gemm-sp", "T.gemm_sp", *words)
