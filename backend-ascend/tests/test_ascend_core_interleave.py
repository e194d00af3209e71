"""The emulator interleaves the cores of a group: a cube core whose branch reads a GM value
that the vector cores write before their cross-core flag stalls until they have issued their
code, then takes the arm the value picks, as the NPU runs it; deleting the flag or the wait is
still reported."""

import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source


@T.prim_func
def cube_branches_on_vector_result(X: T.Tensor((32,), "float32"),
                                   A: T.Tensor((16, 16), "float16"),
                                   B: T.Tensor((16, 16), "float16"),
                                   W: T.Tensor((32,), "float32"),
                                   C: T.Tensor((16, 16), "float32")):
    with T.Kernel(1, is_npu=True) as (cid, vid):
        x_ub = T.alloc_ub((16,), "float32")
        a_l1 = T.alloc_L1((16, 16), "float16")
        b_l1 = T.alloc_L1((16, 16), "float16")
        acc = T.alloc_L0C((16, 16), "float32")
        with T.Scope("V"):
            T.copy(X[vid * 16], x_ub)
            T.barrier_all()
            T.tile.muls(x_ub, x_ub, 2.0)
            T.barrier_all()
            T.copy(x_ub, W[vid * 16])
            T.set_cross_flag("mte3", 0)
        with T.Scope("C"):
            T.wait_cross_flag(0)
            if W[17] > 0:  # written by the second vector core
                T.copy(A[0, 0], a_l1)
                T.copy(B[0, 0], b_l1)
            else:
                T.copy(B[0, 0], a_l1)
                T.copy(A[0, 0], b_l1)
            T.barrier_all()
            T.gemm_v0(a_l1, b_l1, acc, init=True)
            T.barrier_all()
            T.copy(acc, C[0, 0])


def _inputs(sign):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=gen).half()
    b = torch.randn(16, 16, generator=gen).half()
    return torch.arange(1, 33, dtype=torch.float32) * sign, a, b, torch.zeros(32)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cube_branch_on_a_value_the_vector_cores_flag_runs(sign):
    kernel = tilewright.compile(cube_branches_on_vector_result, out_idx=[-1], target="ascend")
    x, a, b, w = _inputs(sign)
    c = kernel(x, a, b, w)
    torch.testing.assert_close(w, 2 * x)
    left, right = (a, b) if sign > 0 else (b, a)
    torch.testing.assert_close(c, left.float() @ right.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("delete, report", [
    ("CrossCoreSetFlag", r"cannot be decided: that read waits for an instruction that no core "
                         r"of the group issues before it"),
    ("CrossCoreWaitFlag", r"race \(write-after-read\) on GM buffer 'W'"),
])
def test_deleting_the_flag_or_the_wait_is_still_reported(tmp_path, delete, report):
    low = tilewright.lower(cube_branches_on_vector_result, target="ascend")
    lines = low.source.text.splitlines()
    kept = [line for line in lines if delete not in line]
    assert len(kept) == len(lines) - 1
    x, a, b, w = _inputs(1.0)
    with pytest.raises(EmulatorError, match=report):
        compile_and_run_source("\n".join(kept), low.source.payload,
                               (x, a, b, w, torch.zeros(16, 16)), tmp_path)
