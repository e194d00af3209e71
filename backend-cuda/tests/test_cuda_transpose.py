"""``T.transpose`` on CUDA: a parallel nest spread over the block's threads between barriers,
its fragment kept in shared memory; the conformance rows run in the host emulation against
their float64 references."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_sdk.conformance.catalogue import cases

TARGET = "cuda -arch=sm_90a"


def square(M, block, dtype="float16", frag=False):
    """TileLang's square transpose test: tile -> transposed tile -> B = A^T."""

    @T.prim_func
    def main(A: T.Tensor((M, M), dtype), B: T.Tensor((M, M), dtype)):
        with T.Kernel(T.ceildiv(M, block), T.ceildiv(M, block), threads=128) as (bx, by):
            tile = T.alloc_shared((block, block), dtype)
            tile_t = T.alloc_fragment((block, block), dtype) if frag else \
                T.alloc_shared((block, block), dtype)
            T.copy(A[by * block:(by + 1) * block, bx * block:(bx + 1) * block], tile)
            T.transpose(tile, tile_t)
            T.copy(tile_t, B[bx * block:(bx + 1) * block, by * block:(by + 1) * block])

    return main


def test_transpose_is_a_nest_of_the_threads_between_barriers():
    text = tilewright.lower(square(64, 32), TARGET).source.text
    body = text[text.index('extern "C"'):]
    # the copy in, the transposed stores, the copy out: a barrier between each
    assert body.count("__syncthreads()") >= 2
    assert "threadIdx.x" in body and "tw_smem_ptr" in body


@pytest.mark.emulator
@pytest.mark.parametrize("frag", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_square_transpose_in_host_emulation(frag, dtype, tmp_path):
    lowered = tilewright.lower(square(96, 32, dtype, frag), TARGET)
    a = torch.randn(96, 96).to(getattr(torch, dtype))
    b = torch.full((96, 96), float("nan")).to(a.dtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    assert torch.equal(b, a.T.contiguous())


CASES = [c for c in cases(["transpose"]) if c.variant != "dynamic"]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_transpose_rows_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, TARGET, tmp_path)
