"""Block code that branches on shared memory, or loops as many times as it says, after the
threads wrote it (the fuzzer's seed 173): the barrier goes before the branch or the loop, whose
condition or bounds every thread reads, not inside it, where threads that read the old value
skipped it and the others waited forever. Run in the host emulation against torch."""

from __future__ import annotations

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch


def shared_decides(use: str, n=8):
    @T.prim_func
    def main(X: T.Tensor((4, n), "int32"), Y: T.Tensor((4, n), "int32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((n,), "int32")
            y = T.alloc_fragment((n,), "int32")
            for j in T.Parallel(n):  # thread j writes s[j] (a plain store: no barrier after it)
                s[j] = X[bx, j]
            for j in T.Parallel(n):
                y[j] = X[bx, j]
            if use == "branch":
                if s[n - 1] > 0:  # read by every thread: written by another
                    for j in T.Parallel(n):
                        y[j] = y[j] + 100
            else:
                for _ in T.serial(s[n - 1]):
                    for j in T.Parallel(n):
                        y[j] = y[j] + 1
            T.copy(y, Y[bx, 0])

    return main


@pytest.mark.emulator
@pytest.mark.parametrize("use", ["branch", "loop"])
def test_a_barrier_goes_before_a_branch_or_loop_that_reads_shared_memory(use, tmp_path):
    func = shared_decides(use)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    text = lowered.source.text
    head = "if (0 < " if use == "branch" else "for (int "
    body = text[text.index("tw_smem_ptr"):]
    # the barrier comes right before the branch or loop that reads s
    before = body[:body.index(head)]
    assert before.rstrip().endswith("__syncthreads();"), before[-300:]
    x = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 0], [1, 1, 1, 1, 1, 1, 1, 3],
                      [0, 0, 0, 0, 0, 0, 0, 2], [5, 5, 5, 5, 5, 5, 5, 1]], dtype=torch.int32)
    y = torch.zeros_like(x)
    hostemu.run(text, lowered.source.payload, tmp_path, x, y)
    last = x[:, -1:]
    want = x + 100 * (last > 0) if use == "branch" else x + last
    assert torch.equal(y, want)
