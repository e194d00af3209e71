"""TileLang's ``T.warp_reduce_*`` in the generated CUDA: XOR shuffles over each warp of
threadIdx.x (``tvm_thread_allreduce`` of width 32), run by the host emulation against the
conformance suite's reference; a block whose warps span threadIdx.y is refused."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright_sdk.conformance.catalogue import cases

CASES = cases(["warp_reduce"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_warp_reduce_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    source = tilewright.lower(func, "cuda -arch=sm_90a").source
    assert "__shfl_xor_sync" in source.text
    (x,) = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype, **case.dims)
    (want,) = case.reference([x.double() if x.is_floating_point() else x])
    y = torch.zeros(want.shape, dtype=x.dtype)
    hostemu.run(source.text, source.payload, tmp_path, x, y)
    torch.testing.assert_close(y.to(want.dtype), want, rtol=1e-5, atol=1e-5)


def test_warps_across_threadidx_y_are_refused():
    with pytest.raises(KernelError, match=r"split warps across threadIdx.y"):
        @T.prim_func
        def main(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=(16, 4)):
                tx = T.get_thread_binding()
                X[tx] = T.warp_reduce_sum(X[tx])
