"""TVM script's thread loops as a kernel (TileLang's language tests write kernels this way):
``for bx in T.thread_binding(n, thread="blockIdx.x")`` outside ``T.Kernel`` opens a kernel whose
grid and threads are the extents of the thread loops inside it; the body runs per thread with
each ``threadIdx`` loop variable the calling thread's index."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

TARGETS = ["cpu", "interp"]


def scaled_plus_row():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((64, 32), "float32")):
        for by in T.thread_binding(4, thread="blockIdx.y"):
            for bx in T.thread_binding(0, 2, thread="blockIdx.x"):
                for ty in T.thread_binding(16, thread="threadIdx.y"):
                    for tx in T.thread_binding(16, thread="threadIdx.x"):
                        B[by * 16 + ty, bx * 16 + tx] = A[by * 16 + ty, bx * 16 + tx] * 2.0 + ty

    return main


def unrolled_with_step():
    """TileLang's ``test_unroll_with_step``: a ``T.handle`` made a tensor by
    ``T.match_buffer``, one block of 128 threads, an unrolled loop of step 4."""
    @T.prim_func
    def main(A_ptr: T.handle):
        A = T.match_buffer(A_ptr, (16, 16), dtype=T.float32, align=16)
        for _blockIdx in T.thread_binding(1, thread="blockIdx.x"):
            for _threadIdx in T.thread_binding(128, thread="threadIdx.x"):
                for i in T.unroll(0, 16, step=4):
                    A[0, i] = 1.0

    return main


def two_launches():
    """Two thread-loop kernels one after the other (two launches, in order), the second
    reading what the first wrote; a block-level statement before the thread loop."""
    @T.prim_func
    def main(A: T.Tensor((8, 32), "float32"), B: T.Tensor((8, 32), "float32")):
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                A[bx, tx] = T.cast(bx * 32 + tx, "float32")
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                B[bx, tx] = A[bx, 31 - tx]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_thread_loops_make_a_kernel(target):
    y = tilewright.compile(scaled_plus_row(), out_idx=[1], target=target)(x := torch.randn(64, 32))
    assert torch.equal(y, x * 2 + torch.arange(16).repeat(4).float()[:, None])
    a = torch.zeros(16, 16)
    tilewright.compile(unrolled_with_step(), target=target)(a)
    want = torch.zeros(16, 16)
    want[0, ::4] = 1.0
    assert torch.equal(a, want)


@pytest.mark.parametrize("target", TARGETS)
def test_thread_loop_kernels_in_sequence(target):
    a, b = tilewright.compile(two_launches(), out_idx=[0, 1], target=target)()
    assert torch.equal(a, torch.arange(256.0).reshape(8, 32))
    assert torch.equal(b, a.flip(1))


def test_the_loops_extents_must_agree_and_be_launchable():
    with pytest.raises(KernelError, match=r"this kernel's threadIdx.x loops have extent 32"):
        @T.prim_func
        def twice(A: T.Tensor((64,), "float32")):
            for bx in T.thread_binding(2, thread="blockIdx.x"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    A[bx * 32 + tx] = 1.0
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    A[bx * 32 + tx] = 2.0

    with pytest.raises(KernelError, match=r"a thread loop starts at 0"):
        @T.prim_func
        def offset(A: T.Tensor((64,), "float32")):
            for bx in T.thread_binding(1, 3, thread="blockIdx.x"):
                A[bx] = 1.0

    with pytest.raises(KernelError, match=r"bind blockIdx.x/y/z or threadIdx.x/y/z, got "
                                          r"thread='vthread'"):
        @T.prim_func
        def other(A: T.Tensor((64,), "float32")):
            for v in T.thread_binding(2, thread="vthread"):
                A[v] = 1.0



def leaving_thread_loops(how: str):
    """A thread-loop kernel whose body leaves a thread loop early (``how``), or, with
    ``continue``, ends the iteration's body: every block and thread writes its element, and
    those past the ``continue`` nothing more."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                A[bx * 32 + tx] = 1.0
                if how == "inner break":
                    break
                if how == "inner return":
                    return
                if how == "continue":
                    continue
                B[bx * 32 + tx] = 1.0
            if how == "outer break":
                break
            if how == "outer return":
                return

    return main


@pytest.mark.parametrize("how, loop", [("inner break", "threadIdx.x"),
                                       ("outer break", "blockIdx.x")])
def test_a_break_out_of_a_thread_loop_is_refused_at_its_line(how, loop):
    """A ``break`` left the loop that opens the kernel with the kernel unfinished (the kernel
    had no statement: silently nothing ran); out of a thread loop inside it, every thread ran
    the statements before it. Thread loops' iterations run at once: none ends the others."""
    line = leaving_thread_loops.__code__.co_firstlineno + (10 if how == "inner break" else 17)
    with pytest.raises(KernelError, match=rf"'break' out of a T.thread_binding loop \({loop}\): "
                                          r"its iterations are the kernel's blocks or threads"
                       ) as info:
        leaving_thread_loops(how)
    assert info.value.location.line == line
    assert str(info.value.location.filename) == __file__


@pytest.mark.parametrize("how", ["inner return", "outer return"])
def test_a_return_inside_a_thread_loop_kernel_is_refused_at_its_line(how):
    line = leaving_thread_loops.__code__.co_firstlineno + (12 if how == "inner return" else 19)
    with pytest.raises(KernelError, match=r"'return' inside a T.thread_binding loop that opens "
                                          r"a kernel: .*end the function after the loop"
                       ) as info:
        leaving_thread_loops(how)
    assert info.value.location.line == line


@pytest.mark.parametrize("target", TARGETS)
def test_a_continue_in_a_thread_loop_ends_its_body(target):
    a, b = torch.zeros(64), torch.zeros(64)
    tilewright.compile(leaving_thread_loops("continue"), target=target)(a, b)
    assert torch.equal(a, torch.ones(64)) and torch.equal(b, torch.zeros(64))
    tilewright.compile(leaving_thread_loops("none"), target=target)(a, b)
    assert torch.equal(b, torch.ones(64))
