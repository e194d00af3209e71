"""Asynchronous copies into shared memory. cp.async waits (transforms/cp_async_wait.py): the
copies of consecutive ``T.copy`` calls from global into shared memory are in flight together,
one ``wait_group 0`` after the last where each had its own; a statement that reads a
destination keeps the wait before it. The host emulation lands a cp.async copy only when a
wait retires its group (tests/hostemu.py) and a TMA load only when a wait sees its mbarrier's
phase complete (include/tw_hopper.h), so a missing wait gives the shared pool's poison
instead of the data."""

import re

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from dialect_cases import wide_tma_copy

TARGET = "cuda -arch=sm_90a"
WAIT = "tw_cp_async_wait<0>();"


def staged_add(M, N, block, dtype="float16"):
    """TileLang's elementwise example: both operands copied into shared tiles, added into a
    fragment, stored through a shared tile."""
    @T.prim_func
    def kernel(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
               C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            A_s = T.alloc_shared((block, block), dtype)
            B_s = T.alloc_shared((block, block), dtype)
            C_l = T.alloc_fragment((block, block), dtype)
            C_s = T.alloc_shared((block, block), dtype)
            T.copy(A[by * block, bx * block], A_s)
            T.copy(B[by * block, bx * block], B_s)
            for i, j in T.Parallel(block, block):
                C_l[i, j] = A_s[i, j] + B_s[i, j]
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * block, bx * block])

    return kernel


def _operands(M, N):
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(M, N, generator=gen).half() for _ in range(2))
    return a, b, torch.full((M, N), float("nan")).half()


@pytest.mark.emulator
def test_two_copies_are_in_flight_together(tmp_path):
    text = tilewright.lower(staged_add(64, 64, 32), TARGET).source.text
    body = text[text.index("tw_cp_async16"):]
    # before: copy A, commit, wait; copy B, commit, wait
    assert body.count(WAIT) == 1
    assert body.index(WAIT) > body.rindex("tw_cp_async16") and \
        body.index(WAIT) < body.index("__syncthreads();")
    a, b, c = _operands(64, 64)
    lowered = tilewright.lower(staged_add(64, 64, 32), TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a + b)


@pytest.mark.emulator
def test_the_emulation_lands_copies_only_at_their_wait(tmp_path):
    """The same kernel without its wait reads the poisoned pool: the emulation does not let a
    missing wait pass."""
    lowered = tilewright.lower(staged_add(64, 64, 32), TARGET)
    a, b, c = _operands(64, 64)
    hostemu.run(lowered.source.text.replace(WAIT, ""), lowered.source.payload, tmp_path,
                a, b, c)
    assert c.isnan().all()


@pytest.mark.emulator
def test_a_read_of_a_destination_keeps_the_wait_before_it(tmp_path):
    M = N = 64

    @T.prim_func
    def kernel(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"),
               C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 32, M // 32, threads=128) as (bx, by):
            A_s = T.alloc_shared((32, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            C_l = T.alloc_fragment((32, 32), "float16")
            T.copy(A[by * 32, bx * 32], A_s)
            for i, j in T.Parallel(32, 32):
                C_l[i, j] = A_s[i, j] * 2
            T.copy(B[by * 32, bx * 32], B_s)
            for i, j in T.Parallel(32, 32):
                C_l[i, j] = C_l[i, j] + B_s[i, j]
            T.copy(C_l, C[by * 32, bx * 32])

    lowered = tilewright.lower(kernel, TARGET)
    body = lowered.source.text[lowered.source.text.index("tw_cp_async16"):]
    assert body.count(WAIT) == 2
    a, b, c = _operands(M, N)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, a * 2 + b)


@pytest.mark.emulator
@pytest.mark.parametrize("wait", [True, False], ids=["waited", "unwaited"])
def test_a_tma_load_lands_at_the_wait_for_its_barrier(tmp_path, wait):
    """dialect_cases' T.tma_copy of a 64 x 576 tile (three boxes on one mbarrier), read after
    T.mbarrier_wait_parity; without the wait the block reads the poisoned pool."""
    lowered = tilewright.lower(wide_tma_copy(), TARGET)
    text = lowered.source.text
    if not wait:  # the kernel's one wait, not the header's definition
        head, kernel = text.split('extern "C" __global__', 1)
        assert len(re.findall(r"tw_mbar_wait\([^;]*\);", kernel)) == 1
        text = head + 'extern "C" __global__' + re.sub(r"tw_mbar_wait\([^;]*\);", "", kernel)
    q = torch.randn(64, 576).bfloat16()
    o = torch.zeros(64, 576).bfloat16()
    hostemu.run(text, lowered.source.payload, tmp_path, q, o)
    assert torch.equal(o, q) if wait else o.isnan().all()


def overwritten_store(wait_first):
    """A shared tile stored with T.tma_copy, then overwritten: after T.tma_store_wait (the
    store has read it) or before."""
    @T.prim_func
    def main(A: T.Tensor((32, 64), "float16"), O: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 64), "float16")
            T.copy(A, S)
            T.tma_copy(S, O[0:32, :])
            if wait_first:
                T.tma_store_wait(0)
            T.fill(S, 0.0)
            T.tma_store_wait(0)

    return main


@pytest.mark.emulator
@pytest.mark.parametrize("wait_first", [True, False], ids=["waited", "overwritten"])
def test_a_tma_store_reads_its_tile_when_its_group_retires(tmp_path, wait_first):
    """A TMA store reads shared memory until cp.async.bulk.wait_group.read retires it: a tile
    overwritten before that wait is stored as far as it is overwritten when the issuing
    thread waits (the threads that ran before it have zeroed their elements; on the GPU, any
    mix), so a missing wait shows."""
    lowered = tilewright.lower(overwritten_store(wait_first), TARGET)
    a = torch.randn(32, 64).half()
    o = torch.full((32, 64), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, o)
    assert torch.equal(o, a) if wait_first else \
        not torch.equal(o, a) and ((o == a) | (o == 0)).all()
