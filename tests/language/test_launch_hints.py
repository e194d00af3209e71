"""TileLang's launch hints on the backends that run kernels one after another (cpu, interp):
``T.pdl_trigger`` / ``T.pdl_sync`` order nothing there and change no result,
``T.annotate_min_blocks_per_sm`` is ignored; misuse is refused at the user's line."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

TARGETS = ["cpu", "interp"]


def pipeline(N, block=64, blocks_per_sm=2):
    """TileLang's PDL pipeline: B = A + 1 in the first kernel, C = B * 2 in the second."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx,):
            T.annotate_min_blocks_per_sm(blocks_per_sm)
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < N:
                    B[idx] = A[idx] + 1.0
            T.pdl_trigger()
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx2,):
            T.pdl_sync()
            for i in T.Parallel(block):
                idx = bx2 * block + i
                if idx < N:
                    C[idx] = B[idx] * 2.0

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_pdl_pipeline_computes_in_order(target):
    a = torch.randn(200)
    b, c = torch.empty(200), torch.empty(200)
    tilewright.compile(pipeline(200), target=target)(a, b, c)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, (a + 1) * 2)


@pytest.mark.parametrize("call", [T.pdl_trigger, T.pdl_sync])
def test_pdl_calls_stand_between_statements(call):
    with pytest.raises(KernelError, match=r"inside a T.Parallel loop: it orders the whole "
                                          r"kernel") as err:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as _bx:
                for i in T.Parallel(64):
                    A[i] = 1.0
                    call()

    assert "test_launch_hints.py" in str(err.value)
    with pytest.raises(KernelError, match=r"inside 'with T.Kernel"):

        @T.prim_func
        def outside(A: T.Tensor((64,), "float32")):
            call()


@pytest.mark.parametrize("n", [0, -1, 33, 2.0, True, None])
def test_min_blocks_per_sm_takes_an_int_from_1_to_32(n):
    with pytest.raises(KernelError, match=r"T.annotate_min_blocks_per_sm takes an int from 1 "
                                          rf"to 32 \(blocks resident on one multiprocessor\), "
                                          rf"got {n!r}") as err:
        pipeline(64, blocks_per_sm=n)
    assert "test_launch_hints.py" in str(err.value)
