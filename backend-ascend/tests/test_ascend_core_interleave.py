"""The emulator interleaves the cores of a group: a cube core whose branch reads a GM value
that the vector cores write before their cross-core flag stalls until they have issued their
code, then takes the arm the value picks, as the NPU runs it; the vector cores' branch on the
cube's answer stalls in turn until the cube has issued its flag. Deleting any flag or wait of
the two pairs is still reported."""

import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source


@T.prim_func
def ping_pong(X: T.Tensor((32,), "float32"), A: T.Tensor((16, 16), "float16"),
              B: T.Tensor((16, 16), "float16"), W: T.Tensor((32,), "float32"),
              C: T.Tensor((16, 16), "float32"), D: T.Tensor((32,), "float32")):
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
            T.wait_cross_flag(1)
            if C[0, 0] > 0:  # the cube's result, ready after its flag
                T.tile.muls(x_ub, x_ub, 3.0)
            else:
                T.tile.muls(x_ub, x_ub, -3.0)
            T.barrier_all()
            T.copy(x_ub, D[vid * 16])
        with T.Scope("C"):
            T.wait_cross_flag(0)
            if W[17] > 0:  # written by the second vector core, ready after its flag
                T.copy(A[0, 0], a_l1)
                T.copy(B[0, 0], b_l1)
            else:
                T.copy(B[0, 0], a_l1)
                T.copy(A[0, 0], b_l1)
            T.barrier_all()
            T.gemm_v0(a_l1, b_l1, acc, init=True)
            T.barrier_all()
            T.copy(acc, C[0, 0])
            T.set_cross_flag("fix", 1)


def _inputs(sign):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=gen).half()
    b = torch.randn(16, 16, generator=gen).half()
    x = torch.arange(1, 33, dtype=torch.float32) * sign
    return x, a, b, torch.zeros(32), torch.zeros(16, 16), torch.zeros(32)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_branches_on_values_the_other_core_type_flags_run(sign):
    kernel = tilewright.compile(ping_pong, target="ascend")
    x, a, b, w, c, d = _inputs(sign)
    kernel(x, a, b, w, c, d)
    torch.testing.assert_close(w, 2 * x)
    left, right = (a, b) if sign > 0 else (b, a)
    torch.testing.assert_close(c, left.float() @ right.float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(d, 2 * x * (3.0 if c[0, 0] > 0 else -3.0))


UNDECIDED = r"cannot be decided: that read waits for an instruction that no core of the group"


@pytest.mark.parametrize("delete, report", [
    ("CrossCoreSetFlag<2, PIPE_MTE3>(0);", UNDECIDED),
    ("CrossCoreWaitFlag(0);", r"race \(write-after-read\) on GM buffer 'W'"),
    ("CrossCoreSetFlag<2, PIPE_FIX>(1);", UNDECIDED),
    ("CrossCoreWaitFlag(1);", r"race \(write-after-read\) on GM buffer 'C'"),
])
def test_deleting_a_flag_or_a_wait_is_still_reported(tmp_path, delete, report):
    low = tilewright.lower(ping_pong, target="ascend")
    lines = low.source.text.splitlines()
    kept = [line for line in lines if line.strip() != delete]
    assert len(kept) == len(lines) - 1, delete
    with pytest.raises(EmulatorError, match=report):
        compile_and_run_source("\n".join(kept), low.source.payload, _inputs(1.0), tmp_path)
