"""Which outputs a kernel provably writes whole (allocated without a zero fill), and which it
may leave partly unwritten or reads (zero-filled): tilewright.jit.coverage."""

import json

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.jit.coverage import covered_outputs
from tilewright.jit.signature import signature_of
from tilewright.runtime.signature import KernelSignature


def elementwise(M, block, grid=None, guard="<", stride=1, offset=0, accumulate=False):
    grid = grid if grid is not None else T.ceildiv(M, block)

    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), C: T.Tensor((M * stride,), "float32")):
        with T.Kernel(grid) as bx:
            for i in T.Parallel(block):
                if guard == "<":
                    if bx * block + i < M:
                        C[(bx * block + i) * stride + offset] = A[bx * block + i]
                elif guard == "<=":
                    if bx * block + i < M - 1:
                        C[bx * block + i] = A[bx * block + i]
                elif guard == "data":
                    if A[bx * block + i] > 0:
                        C[bx * block + i] = A[bx * block + i]
                elif accumulate:
                    C[bx * block + i] = C[bx * block + i] + A[bx * block + i]
    return main


def tiles(M, N, bm, bn, step_m=None, gemm_into_output=False):
    step_m = step_m or bm

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, step_m)) as (bx, by):
            tile = T.alloc_fragment((bm, bn), "float32")
            if gemm_into_output:
                A_s = T.alloc_shared((bm, N), "float32")
                B_s = T.alloc_shared((N, bn), "float32")
                T.copy(A[by * bm, 0], A_s)
                T.copy(B[0, bx * bn], B_s)
                T.gemm(A_s, B_s, C[by * bm:by * bm + bm, bx * bn:bx * bn + bn])
            else:
                T.copy(A[by * step_m, bx * bn], tile)
                T.copy(tile, C[by * step_m, bx * bn])
    return main


def covered(func) -> bool:
    return bool(covered_outputs(func, [len(func.params) - 1]))


@pytest.mark.parametrize("M, block", [(1000, 128), (1024, 128), (7, 8), (1, 1)])
def test_a_guarded_elementwise_grid_covers_its_output(M, block):
    assert covered(elementwise(M, block))


def test_copies_of_tiles_cover_their_output_with_a_partial_last_tile():
    assert covered(tiles(100, 96, 64, 32)) and covered(tiles(128, 128, 64, 64))


@pytest.mark.parametrize("why, func", [
    ("grid too small", lambda: elementwise(1000, 128, grid=1000 // 128)),
    ("guard skips the last element", lambda: elementwise(1000, 128, guard="<=")),
    ("data-dependent condition", lambda: elementwise(1000, 128, guard="data")),
    ("strided writes", lambda: elementwise(512, 128, stride=2)),
    ("shifted writes", lambda: elementwise(512, 128, offset=1)),
    ("reads its output", lambda: elementwise(512, 128, guard="", accumulate=True)),
    ("tiles step past each other", lambda: tiles(256, 64, 32, 64, step_m=64)),
    ("gemm accumulates into it", lambda: tiles(128, 64, 64, 64, gemm_into_output=True)),
])
def test_what_the_proof_does_not_cover(why, func):
    assert not covered(func()), why


def test_the_signature_marks_covered_outputs_and_round_trips():
    sig = signature_of(elementwise(1000, 128), [1])
    assert [p.covered for p in sig.params] == [False, True]
    assert KernelSignature.from_json(json.loads(json.dumps(sig.to_json()))) == sig
    assert [p.covered for p in signature_of(elementwise(1000, 128, guard="data"),
                                            [1]).params] == [False, False]


def test_a_covered_output_holds_the_kernels_values():
    # (outputs left partly unwritten stay zero-filled: test_tilelang_gaps)
    add = tilewright.compile(elementwise(1000, 128), out_idx=[1], target="cpu")
    assert add.signature.params[1].covered
    a = torch.randn(1000)
    for _ in range(3):
        torch.testing.assert_close(add(a), a)
