"""``break`` and ``continue`` in kernels: run-time jumps of a T.serial loop (a flag, the
statements after each jump guarded by it) against plain Python, compile-time jumps of loops
Python unrolls, and the refusals."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def scan_until_negative(n=8, m=6):
    # per row: skip zeros, stop at the first negative (its column), sum the positives before it
    @T.prim_func
    def main(A: T.Tensor((n, m), "int32"), C: T.Tensor((n,), "int32"),
             S: T.Tensor((n,), "int32")):
        with T.Kernel(n) as bx:
            pos = T.alloc_var("int32", init=-1)
            total = T.alloc_var("int32", init=0)
            for j in T.serial(m):
                if A[bx, j] == 0:
                    continue
                if A[bx, j] < 0:
                    pos = j
                    break
                total = total + A[bx, j]
            else:
                pos = m
            C[bx] = pos
            S[bx] = total

    return main


def scan_reference(a):
    cols, sums = [], []
    for row in a.tolist():
        pos, total = -1, 0
        for j, v in enumerate(row):
            if v == 0:
                continue
            if v < 0:
                pos = j
                break
            total += v
        else:
            pos = len(row)
        cols.append(pos)
        sums.append(total)
    return torch.tensor(cols, dtype=torch.int32), torch.tensor(sums, dtype=torch.int32)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_break_and_continue_under_run_time_conditions(target):
    kernel = tilewright.compile(scan_until_negative(), out_idx=[1, 2], target=target)
    a = torch.randint(-1, 6, (8, 6), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    a[0] = torch.tensor([1, 0, 2, 0, 3, 4])  # no negative: the loop's else runs
    cols, sums = kernel(a)
    want_cols, want_sums = scan_reference(a)
    assert torch.equal(cols, want_cols) and torch.equal(sums, want_sums)


def unrolled_by_python(run_time: bool):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            for k in [0, 1, 2, 3]:
                if (A[k] > 0) if run_time else (k == 2):
                    break
                C[k] = A[k] * 2

    return main


def test_a_loop_python_unrolls_keeps_python_break():
    kernel = tilewright.compile(unrolled_by_python(False), out_idx=[1], target="interp")
    assert kernel(torch.ones(4)).tolist()[:2] == [2.0, 2.0]
    with pytest.raises(KernelError, match="loop with T.serial instead") as info:
        tilewright.compile(unrolled_by_python(True), out_idx=[1], target="interp")
    assert info.value.location.line == unrolled_by_python.__code__.co_firstlineno + 6


def jump_in(loop):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            for k in loop(4):
                if A[k] > 0:
                    break
                C[k] = A[k]

    return main


@pytest.mark.parametrize("loop, shown", [(T.Parallel, "T.Parallel"), (T.unroll, "T.unroll"),
                                         (lambda n: T.Pipelined(n, num_stages=2),
                                          "T.Pipelined")])
def test_jumps_of_other_tile_loops_are_refused_at_the_loop(loop, shown):
    with pytest.raises(KernelError, match=f"'break' or 'continue' in a {shown} loop") as info:
        tilewright.compile(jump_in(loop), out_idx=[1], target="interp")
    assert info.value.location.line == jump_in.__code__.co_firstlineno + 4


@T.macro
def doubled(x):
    return x * 2  # a macro's value: its own body opened no frame


def returning_from(where: str):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            for k in T.serial(4):
                C[k] = doubled(A[k])
                if where == "serial":
                    return
            for _k in T.Parallel(4):
                if where == "parallel":
                    return
            if A[0] > 0:
                if where == "branch":
                    return
                C[0] = 0.0
            if where == "kernel":
                return
            C[1] = 0.0

    return main


@pytest.mark.parametrize("where, message, offset", [
    ("serial", r"'return' inside a T.serial loop: .*its statements dropped", 7),
    ("parallel", r"'return' inside a T.Parallel loop", 10),
    ("branch", r"'return' under a condition known only at run time", 13),
])
def test_a_return_out_of_a_loop_or_a_run_time_branch_is_refused(where, message, offset):
    """The kernel's body is traced once: a ``return`` inside a tile loop left the loop
    unbuilt (the kernel lost it: silently nothing ran), one under a run-time ``if`` dropped
    the statements after the branch for every run."""
    with pytest.raises(KernelError, match=message) as info:
        returning_from(where)
    assert info.value.location.line == returning_from.__code__.co_firstlineno + offset


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_return_in_the_kernel_block_or_a_macro_ends_them(target):
    a = torch.tensor([1.0, -2.0, 3.0, 4.0])
    c = tilewright.compile(returning_from("kernel"), out_idx=[1], target=target)(a)
    assert c.tolist() == [0.0, -4.0, 6.0, 8.0]  # C[1] = 0.0 after the return does not run
