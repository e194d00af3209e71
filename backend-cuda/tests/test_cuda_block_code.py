"""Block code (statements of the ``T.Kernel`` body outside ``T.Parallel``) runs once per block,
as on the CPU and interpreter backends, and each ``T.Parallel`` element's atomic is its own
(transforms/block_code.py); a reinterpret of a constant prints as the constant, the int32
minimum as an int (codegen.printable_constants). The generated CUDA is run by the host
emulation and compared with torch. Found by differential fuzzing (tilewright_sdk.fuzz on
cuda_emu and cuda)."""

import re

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_cuda.codegen import reinterpreted_constant
from tvm import tirx

M, N, BM, BN = 8, 8, 4, 4


def _run(func, tmp_path, *args) -> str:
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    return lowered.source.text


def shared_update():
    @T.prim_func
    def shared_update(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(N // BN, M // BM, threads=128) as (bx, by):
            S = T.alloc_shared((2,), "float32")
            S[0] = X[by * BM, bx * BN]
            S[0] = S[0] + 1.0
            S[1] = S[0] * 2.0
            S[1] = S[1] + S[0]
            for i, j in T.Parallel(BM, BN):
                Y[by * BM + i, bx * BN + j] = X[by * BM + i, bx * BN + j] + S[1]

    return shared_update


@pytest.mark.emulator
def test_shared_read_modify_write_runs_once_per_block(tmp_path):
    """``S[0] = S[0] + 1`` in block code was made by each of the 128 threads."""
    x = torch.randn(M, N)
    y = torch.zeros(M, N)
    _run(shared_update(), tmp_path, x, y)
    first = x[::BM, ::BN].repeat_interleave(BM, 0).repeat_interleave(BN, 1)
    torch.testing.assert_close(y, x + 3 * (first + 1))


def global_update():
    @T.prim_func
    def global_update(X: T.Tensor((M, N), "int32"), Y: T.Tensor((M, N), "int32"),
                      Z: T.Tensor((M, N), "int32"), Count: T.Tensor((1,), "int32")):
        with T.Kernel(N // BN, M // BM, threads=128) as (bx, by):
            for i, j in T.Parallel(BM, BN):
                Y[by * BM + i, bx * BN + j] = X[by * BM + i, bx * BN + j]
            Y[by * BM + 1, bx * BN + 2] = Y[by * BM + 1, bx * BN + 2] + 100
            for i, j in T.Parallel(BM, BN):
                Z[by * BM + i, bx * BN + j] = Y[by * BM + i, bx * BN + j] + \
                    Y[by * BM + 1, bx * BN + 2]
            Count[0] = Count[0] + 0  # the same value: no atomic needed, nor a race

    return global_update


@pytest.mark.emulator
def test_global_element_update_runs_once_per_block(tmp_path):
    """An update of a global element in block code, read by every thread after it and
    written by another thread before it."""
    x = torch.randint(-50, 50, (M, N), dtype=torch.int32)
    y, z = torch.zeros(M, N, dtype=torch.int32), torch.zeros(M, N, dtype=torch.int32)
    count = torch.tensor([5], dtype=torch.int32)
    _run(global_update(), tmp_path, x, y, z, count)
    want = x.clone()
    want[1::BM, 2::BN] += 100
    corner = want[1::BM, 2::BN].repeat_interleave(BM, 0).repeat_interleave(BN, 1)
    assert torch.equal(y, want)
    assert torch.equal(z, want + corner)
    assert int(count) == 5


def fragment_update():
    @T.prim_func
    def fragment_update(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(N // BN, M // BM, threads=128) as (bx, by):
            x = T.alloc_fragment((BM, BN), "float32")
            T.copy(X[by * BM, bx * BN], x)
            x[1, 2] = x[1, 2] + 5.0
            x[3, 0] = x[1, 2] * 2.0
            T.copy(x, Y[by * BM, bx * BN])

    return fragment_update


@pytest.mark.emulator
def test_fragment_element_update_runs_once_per_block(tmp_path):
    x = torch.randn(M, N)
    y = torch.zeros(M, N)
    _run(fragment_update(), tmp_path, x, y)
    want = x.clone()
    want[1::BM, 2::BN] += 5
    want[3::BM, 0::BN] = want[1::BM, 2::BN] * 2
    torch.testing.assert_close(y, want)


def local_update():
    @T.prim_func
    def local_update(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(N // BN, M // BM, threads=128) as (bx, by):
            s = T.alloc_local((1,), "float32")
            S = T.alloc_shared((1,), "float32")
            s[0] = X[by * BM, bx * BN]
            s[0] = s[0] * 2.0 + 1.0
            S[0] = s[0]
            for i, j in T.Parallel(BM, BN):
                Y[by * BM + i, bx * BN + j] = X[by * BM + i, bx * BN + j] + S[0]

    return local_update


@pytest.mark.emulator
def test_per_thread_and_uniform_block_code_is_left_to_every_thread(tmp_path):
    """A per-thread scalar's update is each thread's (its own copy), and a store of a value
    every thread computes alike is not gated: no condition on the thread index, no barrier
    beyond the one between the shared store and its readers."""
    x = torch.randn(M, N)
    y = torch.zeros(M, N)
    source = _run(local_update(), tmp_path, x, y)
    first = x[::BM, ::BN].repeat_interleave(BM, 0).repeat_interleave(BN, 1)
    torch.testing.assert_close(y, x + first * 2 + 1)
    assert "threadIdx.x) == 0" not in source
    assert source.count("__syncthreads()") == 1


def bound_ticket(blocks=6):
    @T.prim_func
    def bound_ticket(Counter: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks,), "int32")):
        with T.Kernel(blocks, threads=64) as bx:
            p = T.atomic_add(Counter[0], 1, return_prev=True)
            Ticket[bx] = p * 2

    return bound_ticket


@pytest.mark.emulator
def test_atomic_bound_to_a_name_in_block_code_runs_once_per_block(tmp_path):
    """``p = T.atomic_add(..., return_prev=True)`` in block code: every thread made one."""
    counter, ticket = torch.tensor([3], dtype=torch.int32), torch.zeros(6, dtype=torch.int32)
    _run(bound_ticket(), tmp_path, counter, ticket)
    assert int(counter) == 3 + 6
    assert sorted(ticket.tolist()) == [2 * t for t in range(3, 9)]


def parallel_prev(kind: str, M=8, bm=4):
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def parallel_prev(X: T.Tensor((M,), "int32"), C: T.Tensor((1,), "int32"),
                      P: T.Tensor((M,), "int32"), Q: T.Tensor((1,), "int32")):
        with T.Kernel(M // bm, threads=32) as bx:
            for i in T.Parallel(bm):
                P[bx * bm + i] = op(C[0], X[bx * bm + i], return_prev=True)
            Q[0] = T.atomic_add(C[0], 0, return_prev=True) * 0 + Q[0] + 1

    return parallel_prev


@pytest.mark.emulator
@pytest.mark.parametrize("kind", ["add", "max"])
def test_return_prev_inside_parallel_is_each_elements(kind, tmp_path):
    """Each element of a T.Parallel loop makes its own atomic and gets its own previous value
    (only thread 0's was made); a block-level one beside it still runs once per block."""
    x = torch.randperm(8, dtype=torch.int32) + 1
    c, p = torch.zeros(1, dtype=torch.int32), torch.full((8,), -1, dtype=torch.int32)
    q = torch.zeros(1, dtype=torch.int32)
    _run(parallel_prev(kind), tmp_path, x, c, p, q)
    assert int(q) == 2
    if kind == "add":
        assert int(c) == int(x.sum())
        # the previous values are the partial sums of some order of the elements
        assert sorted((p + x).tolist()) == sorted(set((p + x).tolist()))
        assert int((p + x).max()) == int(c)
    else:
        assert int(c) == int(x.max())
        assert set(p.tolist()) <= {0, *x.tolist()}  # every element got a previous value


def folded_unpack():
    @T.prim_func
    def folded_unpack(X: T.Tensor((4,), "int32"), Y: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                # i // 8 is 0 for every i: the simplifier folds the packed value to 0x1234
                Y[i] = X[i] + T.cast(T.unpack(T.cast(i // 8 + 0x1234, "int32"), 2), "int32") + \
                    T.cast(T.unpack(T.cast(bx - 0x1234, "int16"), 1, signed=True), "int32")

    return folded_unpack


@pytest.mark.emulator
def test_unpack_of_a_folded_constant_compiles(tmp_path):
    """``T.unpack`` of a value the simplifier folds: TVM printed the reinterpret of the
    constant as ``*(uint *)(&(4660))``, which does not compile."""
    x = torch.arange(4, dtype=torch.int32)
    y = torch.zeros(4, dtype=torch.int32)
    source = _run(folded_unpack(), tmp_path, x, y)
    assert not re.search(r"&\(-?\d+\)", source)
    # field 2 of 0x1234 is 2; field 1 of int16(-0x1234) = 0xedcc is 0xc, -4 sign-extended
    assert torch.equal(y, x + 2 - 4)


@pytest.mark.parametrize("src, value, dst, want", [
    ("int32", -1, "uint32", 2**32 - 1), ("uint32", 2**32 - 1, "int32", -1),
    ("uint16", 0x8001, "int16", -0x7fff), ("int64", -2, "uint64", 2**64 - 2),
    ("float32", 1.0, "uint32", 0x3F800000), ("int32", 0x3F800000, "float32", 1.0),
    ("float16", -2.0, "int16", -0x4000)])
def test_reinterpreted_constants(src, value, dst, want):
    const = tirx.const(value, src)
    folded = reinterpreted_constant(tirx.reinterpret(dst, const))
    assert str(folded.ty) == dst and folded.value == want


def saturated_max(n=8):
    """``T.max`` of a saturating float -> int32 conversion and an int32 value: the
    conversion's lower bound is the int32 constant -2^31 (transform.float_to_int)."""

    @T.prim_func
    def saturated_max(X: T.Tensor((n,), "float32"), Z: T.Tensor((n,), "int32"),
                      Y: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(n):
                Y[i] = T.max(T.cast(X[i], "int32"), Z[i])

    return saturated_max


@pytest.mark.emulator
def test_int32_minimum_prints_as_an_int(tmp_path):
    """TVM printed the int32 constant -2^31 as ``-2147483648``, in C++ a ``long``, and
    ``max(x ? -2147483648 : y, z)`` matched two overloads: NVRTC refused the kernel (found by
    fuzzing the cuda backend, seed 31). Saturation as on the GPU: NaN 0, beyond the range its
    bounds."""
    x = torch.tensor([-3e9, 3e9, float("nan"), 5.7, -5.7, -2.0 ** 31, 0.0, 1e10])
    z = torch.full((8,), -2 ** 31, dtype=torch.int32)
    y = torch.zeros(8, dtype=torch.int32)
    source = _run(saturated_max(), tmp_path, x, z, y)
    assert "? -2147483648 :" not in source
    assert y.tolist() == [-2 ** 31, 2 ** 31 - 1, 0, 5, -5, -2 ** 31, 0, 2 ** 31 - 1]


def pipelined_count(M=128, N=128, K=128, bm=64, bn=64, bk=32):
    @T.prim_func
    def pipelined_count(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
                        C: T.Tensor((M, N), "float32"), Sum: T.Tensor((N // bn, M // bm), "int32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            a = T.alloc_shared((bm, bk), "float16")
            b = T.alloc_shared((bk, bn), "float16")
            c = T.alloc_fragment((bm, bn), "float32")
            S = T.alloc_shared((1,), "int32")
            S[0] = 0
            T.clear(c)
            for ko in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, ko * bk], a)
                T.copy(B[ko * bk, bx * bn], b)
                T.gemm(a, b, c)
                S[0] = S[0] + ko
            T.copy(c, C[by * bm, bx * bn])
            Sum[bx, by] = S[0]

    return pipelined_count


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_block_code_in_a_pipelined_gemm_loop_runs_once_per_block(arch, tmp_path):
    """A block-code update in a T.Pipelined loop (on sm_90a the loop of a warp-specialised
    consumer role, whose first thread makes it) beside the gemm it must not disturb."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(128, 128, generator=g).half()
    b = torch.randn(128, 128, generator=g).half()
    c, total = torch.zeros(128, 128), torch.zeros(2, 2, dtype=torch.int32)
    lowered = tilewright.lower(pipelined_count(), f"cuda -arch={arch}")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c, total)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    assert total.flatten().tolist() == [0 + 1 + 2 + 3] * 4
