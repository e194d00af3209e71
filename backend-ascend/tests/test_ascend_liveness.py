"""Memory planning with liveness: buffers never live at the same time share bytes (and the
synchronisation treats them as one buffer), so a kernel fits that bump allocation could not
place; capacity errors still name the buffer, its bytes and the limit."""

import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from tilewright.errors import KernelError
from tilewright_ascend.analysis.buffers import allocations
from tilewright_ascend.analysis.liveness import first_fit, live_ranges
from tilewright_ascend.transforms.memory import read_plan

ROWS, COLS = 100, 256  # 100 KiB of float32: two such tiles exceed UB (196608 bytes)
SHAPE = (2 * ROWS, COLS)  # one half per vector core


def two_phases(manual=False):
    """Phase 1: X = 2 * A through tile x; phase 2: Y = B + 1 through tile y."""

    @T.prim_func
    def main(A: T.Tensor(SHAPE, "float32"), B: T.Tensor(SHAPE, "float32"),
             X: T.Tensor(SHAPE, "float32"), Y: T.Tensor(SHAPE, "float32")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            x = T.alloc_ub((ROWS, COLS), "float32")
            y = T.alloc_ub((ROWS, COLS), "float32")
            with T.Scope("V"):
                T.copy(A[vid * ROWS, 0], x)
                if manual:
                    T.barrier_all()
                T.tile.muls(x, x, 2.0)
                T.copy(x, X[vid * ROWS, 0])
                T.copy(B[vid * ROWS, 0], y)
                T.tile.adds(y, y, 1.0)
                T.copy(y, Y[vid * ROWS, 0])

    return main


def _func(lowered):
    (_, func), = list(lowered.module.functions.items())
    return func


def test_dead_buffers_share_space_and_the_kernel_runs_clean():
    low = tilewright.lower(two_phases(), target="ascend")
    plan = {str(b.name): list(v) for b, v in read_plan(_func(low)).items()}
    assert plan["x"][1] == plan["y"][1] == 0, plan
    text = low.source.text
    # y's load waits for x's store: they are one buffer to the synchronisation
    assert "WaitFlag<HardEvent::MTE3_MTE2>(0);" in text
    kernel = tilewright.compile(two_phases(), out_idx=[2, 3], target="ascend")
    a, b = torch.randn(SHAPE), torch.randn(SHAPE)
    x, y = kernel(a, b)
    torch.testing.assert_close(x, 2 * a)
    torch.testing.assert_close(y, b + 1)


def test_hand_synchronised_kernels_keep_one_place_per_buffer():
    with pytest.raises(KernelError, match=r"buffer 'y' needs 102400 bytes of UB at offset "
                                          r"102400, but UB holds 196608 bytes"):
        tilewright.lower(two_phases(manual=True), target="ascend")


def test_live_ranges_cover_whole_loops():
    func = _func(tilewright.lower(two_phases(), target="ascend"))
    tiles = {str(a.buffer.name): a.buffer for a in allocations(func)}
    ranges = live_ranges(func.body, {tiles["x"], tiles["y"]})
    assert ranges[tiles["x"]][1] < ranges[tiles["y"]][0]
    offsets = first_fit([("a", 64, (0, 5), None), ("b", 64, (3, 9), None),
                         ("c", 64, (6, 9), None), ("d", 40, None, 512)], 32)
    assert offsets == {"d": 512, "a": 0, "b": 64, "c": 0}
