"""Block code and the conformance suite's scalar cases in the host emulation: an atomic's old
value assigned to a per-thread variable happens once per block (thread 0 into a shared slot,
every thread reads it: it was made by every thread), the bitwise reducers combine their
partials with their own operator (they were summed), a reducer's starting value counts once
per output however many threads hold partials (in epochs reopened by a pipelined loop too),
and run-time break/continue."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import tilewright_cuda.language as TC
import torch
from tilewright.testing import assert_close
from tilewright_sdk.conformance.catalogue import cases


def tickets(blocks=4, rounds=3):
    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks, rounds), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            v = T.alloc_var("int32")
            for r in T.serial(rounds):
                v = T.atomic_add(C[0], 1, return_prev=True)
                Ticket[bx, r] = v

    return main


@pytest.mark.emulator
def test_an_old_value_into_a_variable_is_one_atomic_per_block(tmp_path):
    lowered = tilewright.lower(tickets(), "cuda -arch=sm_80")
    counter, got = torch.zeros(1, dtype=torch.int32), torch.full((4, 3), -1, dtype=torch.int32)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, counter, got)
    assert counter.item() == 12
    assert sorted(got.flatten().tolist()) == list(range(12))
    assert all(row == sorted(row) for row in got.tolist())  # a block's rounds in order


def hand_over(blocks=3, width=128):
    """Each block writes its row of W, then the last block to take a ticket sums the rows."""
    @T.prim_func
    def main(A: T.Tensor((blocks, width), "float32"), Count: T.Tensor((1,), "int32"),
             W: T.Tensor((blocks, width), "float32"), Out: T.Tensor((width,), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            ticket = T.alloc_var("int32")
            for i in T.Parallel(width):
                W[bx, i] = A[bx, i] * 2
            TC.fence_gpu()
            ticket = T.atomic_add(Count[0], 1, return_prev=True)
            if ticket == blocks - 1:
                TC.fence_gpu()
                for i in T.Parallel(width):
                    Out[i] = 0.0
                    for b in T.serial(blocks):
                        Out[i] += W[b, i]

    return main


@pytest.mark.emulator
def test_fence_gpu_hands_a_blocks_stores_to_the_last_ticket(tmp_path):
    # T.fence_gpu: every thread's __threadfence, then the block's barrier, so the ticket one
    # thread takes after it comes after every thread's stores (tw_fence.h, pasted only where
    # a kernel fences)
    lowered = tilewright.lower(hand_over(), "cuda -arch=sm_80")
    text = lowered.source.text
    assert text.count("tw_fence_gpu();\n  __syncthreads();") == 1
    assert text.count("void tw_fence_gpu()") == 2  # the device and the emulation's
    assert "cooperative_groups" not in text
    plain = tilewright.lower(tickets(), "cuda -arch=sm_80").source.text
    assert "tw_fence_gpu" not in plain
    a = torch.randn(3, 128)
    count, w, out = torch.zeros(1, dtype=torch.int32), torch.zeros(3, 128), torch.zeros(128)
    hostemu.run(text, lowered.source.payload, tmp_path, a, count, w, out)
    assert count.item() == 3
    torch.testing.assert_close(out, (a * 2).sum(0))


CASES = [c for c in cases(["reducers", "reducer_seeds", "atomic_prev", "loop_jumps"])
         if c.id in ("reducers-int32-partial", "reducer_seeds-int32-partial",
                     "reducer_seeds-float32-full", "atomic_prev-int32-partial",
                     "loop_jumps-float32-partial")]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scalar_conformance_case_in_host_emulation(case, tmp_path):
    func = case.kernel.make(case.dtype, **case.dims)
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    inputs = case.kernel.inputs(torch, torch.Generator().manual_seed(0), case.dtype,
                                **case.dims)
    expected = case.reference(inputs, **case.dims)
    outputs = {i % len(func.params) for i in case.kernel.out_idx}
    given, args, results = iter(t.clone() for t in inputs), [], []
    for i, param in enumerate(func.params):
        if i in outputs:
            results.append(torch.full([int(s) for s in param.shape], -77,
                                      dtype=getattr(torch, str(param.dtype))))
            args.append(results[-1])
        else:
            args.append(next(given))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    results += [args[i] for i in case.kernel.inplace]
    for n, (got, want) in enumerate(zip(results, expected, strict=True)):
        assert_close(got, want, dtype=str(got.dtype), name=f"{case.id} output {n}",
                     reduction_length=case.kernel.reduction(**case.dims))


def pipelined_logsumexp(K=512, BK=128):
    """TileLang's epoch inside a T.Pipelined loop: each tile's max reducer seeded with the
    running maximum, its sum reducer with the rescaled running sum."""
    @T.prim_func
    def main(A: T.Tensor((K,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            staged = T.alloc_shared((BK,), "float32")
            tile = T.alloc_fragment((BK,), "float32")
            run_max = T.alloc_fragment((1,), "float32")
            run_sum = T.alloc_fragment((1,), "float32")
            run_max[0] = -T.infinity("float32")
            run_sum[0] = 0.0
            for k in T.Pipelined(K // BK, num_stages=2):
                T.copy(A[k * BK], staged)
                T.copy(staged, tile)
                new_max = T.alloc_reducer((1,), "float32", op="max")
                T.reducer_init(new_max, run_max[0])
                for i in T.Parallel(BK):
                    T.reducer_update(new_max[0], tile[i])
                m = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(new_max, m)
                new_sum = T.alloc_reducer((1,), "float32")
                T.reducer_init(new_sum, T.exp(run_max[0] - m[0]) * run_sum[0])
                for i in T.Parallel(BK):
                    T.reducer_update(new_sum[0], T.exp(tile[i] - m[0]))
                T.finalize_reducer(new_sum, run_sum)
                run_max[0] = m[0]
            B[0] = T.log(run_sum[0]) + run_max[0]

    return main


@pytest.mark.emulator
def test_reducer_epochs_seeded_in_a_pipelined_loop(tmp_path):
    lowered = tilewright.lower(pipelined_logsumexp(), "cuda -arch=sm_80")
    a, b = torch.randn(512, generator=torch.Generator().manual_seed(0)), torch.zeros(1)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, torch.logsumexp(a, 0).reshape(1), rtol=1e-5, atol=1e-5)
