"""Constructs the differential fuzzer (seed 1000) found refused with internal messages: an
element ``T.atomic_*`` inside ``T.Parallel`` (now one tile atomic per loop, checked on the
emulator against torch), and the refusals that remain, which must name the construct and the
user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def atomic_in_parallel(dtype="float32", M=16, N=8, BN=4):
    """Each block adds its columns of ``X`` element by element into ``Z``, through a UB tile."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Z: T.Tensor((M, N), dtype)):
        with T.Kernel(N // BN, threads=128) as bx:
            t = T.alloc_fragment((M, BN), dtype)
            T.copy(X[0, bx * BN], t)
            for i, j in T.Parallel(M, BN):
                T.atomic_add(Z[i, bx * BN + j], t[i, j] * 2)

    return main


def atomic_from_every_block(M=8, N=4):
    """Every block adds the same tile into ``Z`` (an atomic across cores), read from GM."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "int16"), Z: T.Tensor((M, N), "int16")):
        with T.Kernel(3, threads=128) as _:
            for i, j in T.Parallel(M, N):
                T.atomic_add(Z[i, j], X[i, j])

    return main


def atomic_onto_one_element(M=8, N=4):
    """Every element of the loop adds into ``Z[0, j]``: not one tile copy."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_fragment((M, N), "float32")
            T.copy(X[0, 0], t)
            for i, j in T.Parallel(M, N):
                T.atomic_add(Z[0, j], t[i, j])

    return main


def column_read(dtype="bfloat16", M=4):
    """A (M, 1) tile read as ``a[i, 0]`` in ``T.Parallel(M, 1)``: converted (bfloat16 computes
    in float32) into a temporary that must keep the column's layout, one element a row."""

    @T.prim_func
    def main(X: T.Tensor((M, 1), dtype), Y: T.Tensor((M, 1), dtype),
             W: T.Tensor((M, 1), "float32")):
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_fragment((M, 1), dtype)
            b = T.alloc_fragment((M, 1), dtype)
            w = T.alloc_fragment((M, 1), "float32")
            T.copy(X[0, 0], a)
            T.copy(X[0, 0], b)
            for i, j in T.Parallel(M, 1):
                b[i, j] = b[i, j] + a[i, j] * a[i, (j + 1) % 1]
                w[i, j] = T.cast(a[i, 0], "float32") * 2
            T.copy(b, Y[0, 0])
            T.copy(w, W[0, 0])

    return main


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_column_read_at_a_fixed_index_converts_in_its_own_layout(dtype):
    kernel = tilewright.compile(column_read(dtype), out_idx=[1, 2], target="ascend")
    x = torch.randn(4, 1, generator=torch.Generator().manual_seed(5)).to(getattr(torch, dtype))
    y, w = kernel(x)
    xf = x.float()
    torch.testing.assert_close(y.float(), (xf + xf * xf).to(x.dtype).float(), atol=2e-2,
                               rtol=2e-2)
    torch.testing.assert_close(w, xf * 2)


def gemm_onto_filled(M=4, N=4, K=4):
    """A gemm into an accumulator filled with 1 first, smaller than the cube's fractal: the
    vector core adds the cube's product into the tile, whose rows the vector phase padded."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((N, K), "float32"),
             G: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_shared((M, K), "float32")
            b = T.alloc_shared((N, K), "float32")
            c = T.alloc_fragment((M, N), "float32")
            T.fill(c, 1)
            for k in T.Pipelined(1, num_stages=2):
                T.copy(A[k * M, 0], a)
                T.copy(B[k * N, 0], b)
                T.gemm(a, b, c, transpose_B=True)
            T.copy(c, G[0, 0])

    return main


def test_a_gemm_onto_a_filled_accumulator_adds_row_by_row():
    kernel = tilewright.compile(gemm_onto_filled(), out_idx=[-1], target="ascend")
    gen = torch.Generator().manual_seed(6)
    a, b = torch.randn(4, 4, generator=gen), torch.randn(4, 4, generator=gen)
    torch.testing.assert_close(kernel(a, b), a @ b.T + 1, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int16"])
def test_an_element_atomic_in_a_parallel_loop_adds_a_tile(dtype):
    kernel = tilewright.compile(atomic_in_parallel(dtype), target="ascend")
    text = kernel.get_kernel_source()
    assert "SetAtomicAdd" in text and "Evaluate" not in text
    if dtype != "int16":  # integer arithmetic stays on the scalar unit, the atomic does not
        assert "scalar fallback" not in text
    x = torch.randint(-20, 20, (16, 8), generator=torch.Generator().manual_seed(3)).to(
        getattr(torch, dtype))
    z = torch.full((16, 8), 5, dtype=x.dtype)
    kernel(x, z)
    torch.testing.assert_close(z, x * 2 + 5)


def test_an_element_atomic_from_every_block_sums_them():
    kernel = tilewright.compile(atomic_from_every_block(), target="ascend")
    x = torch.randint(-20, 20, (8, 4), generator=torch.Generator().manual_seed(4)).to(
        torch.int16)
    z = torch.ones(8, 4, dtype=torch.int16)
    kernel(x, z)
    torch.testing.assert_close(z, x * 3 + 1)


def test_an_element_atomic_onto_a_repeated_element_names_it_at_the_line():
    with pytest.raises(KernelError, match=r"test_ascend_fuzz_refusals.py:\d+: T.atomic_add "
                       r"inside T.Parallel: .* own dimension of 'Z'") as info:
        tilewright.compile(atomic_onto_one_element(), target="ascend")
    assert "Evaluate" not in str(info.value)


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    kernels = {"atomic32": atomic_in_parallel(), "atomic16": atomic_in_parallel("int16"),
               "blocks": atomic_from_every_block(), "column": column_read(),
               "gemm": gemm_onto_filled()}
    sources = {name: tilewright.lower(f, target="ascend").source.text
               for name, f in kernels.items()}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
