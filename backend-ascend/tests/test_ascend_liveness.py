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


def branch_on_a_tile(use, M=12, N=16, bm=4, bn=8):
    """Blocks read a UB tile (``counts``) on the scalar unit after bfloat16 work whose float32
    temporaries are allocated before that read: in a branch's condition (``use`` "branch") or
    as a loop's trip count ("loop")."""
    import tilewright.language as TP

    @TP.prim_func
    def main(X: TP.Tensor((M, N), "bfloat16"), Counts: TP.Tensor((M // bm, 2), "int32"),
             Y: TP.Tensor((M, N), "bfloat16")):
        with TP.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            x = TP.alloc_fragment((bm, bn), "bfloat16")
            counts = TP.alloc_shared((2,), "int32")
            TP.copy(X[by * bm, bx * bn], x)
            TP.copy(Counts[by, 0], counts)
            for i, j in TP.Parallel(bm, bn):
                x[i, j] = x[i, j] * 2
            if use == "branch":
                if counts[0] != 0 and counts[1] != 0:
                    for i, j in TP.Parallel(bm, bn):
                        x[i, j] = x[i, j] - 3
            else:
                for _ in TP.serial(counts[1]):
                    for i, j in TP.Parallel(bm, bn):
                        x[i, j] = x[i, j] - 1
            TP.copy(x, Y[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("use", ["branch", "loop"])
def test_a_tile_read_by_a_branch_or_a_loop_bound_stays_live_and_ordered(use):
    """The tile is live up to its read (the temporaries of the bfloat16 work before it took
    its bytes: every block took the branch, the loop ran a garbage trip count) and its read on
    S waits for the copy into it and is waited by the next block's copy (the emulator found the
    write-after-read)."""
    kernel = tilewright.compile(branch_on_a_tile(use), out_idx=[2], target="ascend")
    x = torch.randn(12, 16).bfloat16()
    counts = torch.tensor([[1, 0], [2, 3], [0, 0]], dtype=torch.int32)
    want = (x.float() * 2).bfloat16().float()
    want[4:8] -= 3  # block 1 only: the branch's - 3, or three trips of - 1
    torch.testing.assert_close(kernel(x, counts).float(), want, atol=0.05, rtol=0.01)
