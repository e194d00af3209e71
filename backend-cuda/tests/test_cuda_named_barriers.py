"""Named barriers of part of a block (``T.sync_threads(id, count)``, ``bar.sync``) and a
run-time ``break`` of a ``T.serial`` loop, in the generated CUDA and in the host emulation
(hostemu.py: threads arriving at a named barrier wait for ``count`` threads), against torch;
the refusals at the user's line."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor

THREADS, PART = 128, 64


def suffix_sums_until(n_rows=2):
    # the first PART threads do a Hillis-Steele suffix scan of their row in shared memory,
    # synchronised by named barrier 3 of PART threads; the scan stops (a run-time break) once
    # the offset reaches the row's limit
    @T.prim_func
    def main(X: T.Tensor((n_rows, PART), "int32"), L: T.Tensor((n_rows,), "int32"),
             Y: T.Tensor((n_rows, PART), "int32")):
        with T.Kernel(n_rows, threads=THREADS) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((PART + 1,), "int32")
            v = T.alloc_var("int32")
            limit = T.alloc_var("int32")
            limit = L[bx]
            if tx < PART:
                s[tx] = X[bx, tx]
                if tx == 0:
                    s[PART] = 0
                for i in T.serial(6):
                    if (1 << i) >= limit:
                        break
                    T.sync_threads(3, PART)
                    v = s[tx]
                    if tx + (1 << i) < PART:
                        v = v + s[tx + (1 << i)]
                    T.sync_threads(3, PART)
                    s[tx] = v
                T.sync_threads(3, PART)
                Y[bx, tx] = s[tx]

    return main


def reference(x, limits):
    out = x.clone()
    for r, limit in enumerate(limits.tolist()):
        row = out[r]
        offset = 1
        while offset < 64 and offset < limit:
            shifted = torch.zeros_like(row)
            shifted[:-offset] = row[offset:]
            row = row + shifted
            offset *= 2
        out[r] = row
    return out


def test_named_barrier_source():
    text = tilewright.lower(suffix_sums_until(), "cuda -arch=sm_90a").source.text
    assert text.count("tw_bar_sync(3, 64)") == 3
    # no block barrier inside `if tx < 64` (half the block never reaches it: a deadlock)
    assert "__syncthreads()" not in text.split("__global__")[-1]


@pytest.mark.nvrtc
def test_named_barrier_builds_before_hopper():
    # bar.sync with a thread count is older than sm_90: the kernel builds for sm_80
    text = tilewright.lower(suffix_sums_until(), "cuda -arch=sm_80").source.text
    cubin, _ = executor.nvrtc_compile(text, arch.get("sm_80"), ".")
    assert cubin


@pytest.mark.emulator
def test_named_barrier_and_break_run_in_the_host_emulation(tmp_path):
    lowered = tilewright.lower(suffix_sums_until(), "cuda -arch=sm_90a")
    x = torch.randint(0, 9, (2, PART), dtype=torch.int32)
    limits = torch.tensor([64, 5], dtype=torch.int32)  # all six steps; stop after three
    y = torch.full_like(x, -1)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, limits, y)
    assert torch.equal(y, reference(x, limits))


def bad_barrier(barrier_id, count):
    @T.prim_func
    def main(X: T.Tensor((THREADS,), "int32")):
        with T.Kernel(1, threads=THREADS):
            T.sync_threads(barrier_id, count)

    return main


@pytest.mark.parametrize("barrier_id, count, message", [
    (0, 64, "barrier_id must be an integer constant in 1..15"),
    (16, 64, "barrier_id must be an integer constant in 1..15"),
    (3, 48, "arrive_count must be a positive multiple of 32"),
    (3, 256, "up to the block's 128 threads"),
])
def test_bad_named_barriers_are_refused_at_their_line(barrier_id, count, message):
    with pytest.raises(KernelError, match=message) as info:
        tilewright.lower(bad_barrier(barrier_id, count), "cuda -arch=sm_90a")
    assert info.value.location.line == bad_barrier.__code__.co_firstlineno + 4
