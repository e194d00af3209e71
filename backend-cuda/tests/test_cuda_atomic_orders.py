"""Memory orders, bitwise atomics, atomic loads and stores on CUDA (include/tw_atomics.h): a
relaxed atomic is the call it was; any other order is the ``_ordered`` helper's third argument,
whose fences (fence.sc.gpu before a release, after an acquire) the SASS shows around the
ATOM; T.atomic_load / T.atomic_store are strong (volatile) accesses. Run in the host emulation
against Python's reductions, built with NVRTC for sm_80 and sm_90a."""

import functools
import operator
import re
import sys
from pathlib import Path

import cuda_source
import hostemu
import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path[:0] = [str(TESTS / "language"), str(TESTS)]  # the language tests and their helpers
from test_atomic_orders import (  # noqa: E402
    FOLDED_COUNTS,
    FOLDED_D,
    UNUSED_COUNTS,
    folded_previous_values,
    unused_previous_values,
    wide_prev,
)


def orders_kernel(blocks=2, n=32):
    @T.prim_func
    def orders(A: T.Tensor((blocks * n,), T.int32), B: T.Tensor((blocks * n,), T.int32),
               F: T.Tensor((4,), T.int32), Count: T.Tensor((3,), T.int32)):
        with T.Kernel(blocks, threads=n) as bx:
            for i in T.Parallel(n):
                T.atomic_or(F[0], A[bx * n + i])
                T.atomic_and(F[1], A[bx * n + i], memory_order="seq_cst")
                T.atomic_xor(F[2], A[bx * n + i], memory_order="acq_rel")
                B[bx * n + i] = T.atomic_load(A[bx * n + i], memory_order="acquire") + 1
            T.atomic_store(F[3], 7, memory_order="release")
            Count[bx] = T.atomic_add(Count[2], 1, return_prev=True)  # block code: once

    return orders


def _lower(func, arch="sm_90a"):
    return tilewright.lower(func, f"cuda -arch={arch}")


def test_orders_are_the_helpers_third_argument_and_relaxed_stays_cudas_call():
    text = cuda_source.kernel(_lower(orders_kernel()).source.text)
    assert re.search(r"tw_atomic_or\(\(&\(F_ptr\[0\]\)\), A_ptr\[[^;]*\]\);", text)
    assert re.search(r"tw_atomic_and_ordered\(\(&\(F_ptr\[1\]\)\), A_ptr\[[^;]*\], 5\);", text)
    assert re.search(r"tw_atomic_xor_ordered\(\(&\(F_ptr\[2\]\)\), A_ptr\[[^;]*\], 4\);", text)
    assert re.search(r"tw_atomic_load\(\(&\(A_ptr\[[^;]*\]\)\), 2\) \+ 1", text)
    assert "tw_atomic_store((&(F_ptr[3])), 7, 3);" in text


@pytest.mark.emulator
def test_bitwise_atomics_loads_and_stores_in_the_emulation(tmp_path):
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-2 ** 30, 2 ** 30, (64,), generator=g, dtype=torch.int32)
    b = torch.zeros(64, dtype=torch.int32)
    f = torch.tensor([0, -1, 0, 0], dtype=torch.int32)
    count = torch.zeros(3, dtype=torch.int32)
    lowered = _lower(orders_kernel())
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, f, count)
    values = a.tolist()
    assert f.tolist() == [functools.reduce(operator.or_, values),
                          functools.reduce(operator.and_, values, -1),
                          functools.reduce(operator.xor, values), 7]
    assert torch.equal(b, a + 1)
    assert count.tolist() in ([0, 1, 2], [1, 0, 2])  # one ticket per block


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lanes", [2, 4])
def test_wide_atomic_add_returns_each_lane_once(tmp_path, dtype, lanes):
    lowered = _lower(wide_prev(lanes, dtype, ramp=True))
    assert lowered.source.text.count("tw_atomic_add((") == 2 * lanes
    td = getattr(torch, dtype)
    dst = torch.arange(1, 2 * lanes + 1).to(td)
    val = (torch.arange(1, 2 * lanes + 1) * 10).to(td)
    prev = torch.zeros(2 * lanes, dtype=td)
    start = dst.clone()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, dst, val, prev)
    assert torch.equal(prev, start) and torch.equal(dst, start + val)


def typed_kernel():
    """An ordered atomic, load and store of each width the helpers reinterpret."""
    @T.prim_func
    def typed(H: T.Tensor((4,), T.float16), Q: T.Tensor((4,), T.bfloat16),
              E: T.Tensor((4,), T.float8_e4m3fn), C: T.Tensor((4,), T.int8),
              L: T.Tensor((4,), T.int64), D: T.Tensor((4,), T.float64)):
        with T.Kernel(1, threads=32):
            T.atomic_add(H[0], T.float16(1), memory_order="release")
            T.atomic_max(Q[0], T.bfloat16(1), memory_order="acquire")
            T.atomic_xor(C[0], T.int8(5), memory_order="acq_rel")
            T.atomic_and(L[0], T.int64(6), memory_order="seq_cst")
            T.atomic_store(H[3], T.atomic_load(H[1], memory_order="seq_cst"),
                           memory_order="seq_cst")
            T.atomic_store(E[3], T.atomic_load(E[1]))
            T.atomic_store(Q[3], T.atomic_load(Q[1], memory_order="relaxed"),
                           memory_order="relaxed")
            T.atomic_store(C[3], T.atomic_load(C[1], memory_order="consume"))
            T.atomic_store(D[3], T.atomic_load(D[1]))

    return typed


@pytest.mark.emulator
def test_loads_and_stores_of_every_width_in_the_emulation(tmp_path):
    h = torch.tensor([1, 2.5, 0, 0], dtype=torch.float16)
    q = torch.tensor([3, -1.5, 0, 0], dtype=torch.bfloat16)
    e = torch.tensor([0, 0.875, 0, 0]).to(torch.float8_e4m3fn)
    c = torch.tensor([9, -7, 0, 0], dtype=torch.int8)
    lv = torch.tensor([7, 0, 0, 0], dtype=torch.int64)
    d = torch.tensor([0, 1e-300, 0, 0], dtype=torch.float64)
    lowered = _lower(typed_kernel())
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, h, q, e, c, lv, d)
    assert h.tolist() == [2, 2.5, 0, 2.5] and q.tolist() == [3, -1.5, 0, -1.5]
    assert e.float().tolist() == [0, 0.875, 0, 0.875] and c.tolist() == [12, -7, 0, -7]
    assert lv.tolist() == [6, 0, 0, 0] and d.tolist() == [0, 1e-300, 0, 1e-300]


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ordered_atomics_build_with_nvrtc(arch):
    for func in (orders_kernel(), typed_kernel(), wide_prev(4, "bfloat16", ramp=True)):
        kernel = tilewright.compile(func, target=f"cuda -arch={arch}")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"


@pytest.mark.nvcc
def test_ordered_atomics_build_with_nvcc():
    """nvcc's int64_t is a long (NVRTC's a long long): the helpers go by the element's size."""
    for func in (orders_kernel(), typed_kernel()):
        kernel = tilewright.compile(func, target="cuda -arch=sm_90a", execution_backend="nvcc")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"


def test_a_relaxed_add_keeps_its_kernel_without_the_atomics_header():
    @T.prim_func
    def plain(S: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                T.atomic_add(S[i % 4], 1.0)

    text = _lower(plain).source.text
    assert "tw_atomic_add((&(S_ptr[" in text and "TW_ATOMICS_H" not in text


@pytest.mark.nvrtc
@pytest.mark.sass
def test_sass_fences_the_ordered_atomics_and_keeps_the_relaxed_ones_bare():
    kernel = tilewright.compile(orders_kernel(), target="cuda -arch=sm_90a")
    code = [line for line in sass.dump(kernel.executable.cubin).splitlines()
            if re.search(r"MEMBAR|ATOM|RED\.|LDG|STG", line)]
    ops = [re.search(r"(MEMBAR\S*|ATOMG?\S*|RED\S*|LDG\S*|STG\S*)", line).group(1)
           for line in code]
    text = " ".join(ops)
    # atomic_or: relaxed, no fence before it; the seq_cst and: fenced on both sides
    assert re.search(r"(ATOMG?|RED)\.E\.OR\S* (ATOMG?|RED)", text) or \
        re.search(r"(ATOMG?|RED)\.E\.OR\S* MEMBAR", text)
    assert re.search(r"MEMBAR\.SC\.GPU (ATOMG?|RED)\.E\.AND\S* MEMBAR\.SC\.GPU", text)
    # the acquire load: a strong load, then the fence; the release store: fence, then store
    assert re.search(r"LDG\.E\S*STRONG\S* MEMBAR\.SC\.GPU", text)
    assert re.search(r"MEMBAR\.SC\.GPU STG\.E\S*STRONG", text)


def test_an_element_type_without_atomics_is_refused_at_the_line():
    @T.prim_func
    def bad(S: T.Tensor((4,), T.float8_e4m3fn)):
        with T.Kernel(1, threads=32):
            T.atomic_add(S[0], S[1], memory_order="release")

    with pytest.raises(KernelError, match=r"T.atomic_add on float8_e4m3fn is not supported "
                                          "by backend 'cuda'"):
        _lower(bad)


def sixty_four_bit_kernel():
    @T.prim_func
    def wide_ints(U: T.Tensor((4,), T.uint64), S: T.Tensor((4,), T.int64)):
        with T.Kernel(1, threads=32):
            T.atomic_add(U[0], T.uint64(6))
            T.atomic_max(U[1], T.uint64(6))
            T.atomic_min(U[2], T.uint64(6))
            T.atomic_add(S[0], T.int64(-6))
            T.atomic_min(S[2], T.int64(6))

    return wide_ints


@pytest.mark.nvcc
def test_sixty_four_bit_integer_atomics_build_with_nvcc():
    """atomicAdd / atomicMax have no long overloads: under nvcc (int64_t a long) the add, max
    and min of int64 / uint64 did not compile before tw_cuda.h's TW_LONG_ATOMICS."""
    kernel = tilewright.compile(sixty_four_bit_kernel(), target="cuda -arch=sm_80",
                                execution_backend="nvcc")
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"


@pytest.mark.emulator
def test_sixty_four_bit_integer_atomics_in_the_emulation(tmp_path):
    u = torch.tensor([1, 2, 9, 0], dtype=torch.uint64)
    s = torch.tensor([0, 0, 9, 0], dtype=torch.int64)
    lowered = _lower(sixty_four_bit_kernel())
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, u, s)
    assert u.tolist() == [7, 6, 6, 0] and s.tolist() == [-6, 0, 6, 0]


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["int32", "bfloat16"])
def test_an_unused_previous_value_is_one_atomic_where_it_stands(tmp_path, dtype):
    """The language test's kernel (tests/language/test_atomic_orders.py): a bare statement
    made the atomic in every thread of block code on CUDA (96 for 3)."""
    c = torch.zeros(7, dtype=getattr(torch, dtype))
    lowered = _lower(unused_previous_values(dtype))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, c)
    assert c.tolist() == UNUSED_COUNTS


@pytest.mark.emulator
def test_an_atomic_in_an_expression_folded_to_a_constant_is_made(tmp_path):
    """The language test's kernel: ``T.atomic_add(C[0], 1, return_prev=True) * 0`` folded to
    0 as it was built and the generated CUDA had no atomic."""
    c = torch.zeros(5, dtype=torch.int32)
    d = torch.full((3, 32), -1, dtype=torch.int32)
    lowered = _lower(folded_previous_values())
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, c, d)
    assert c.tolist() == FOLDED_COUNTS and d.tolist() == FOLDED_D


def constant_stores_kernel():
    """Constants stored and combined atomically into 64- and 16-bit integers (the generated
    code prints a small int64 constant of T.atomic_store as an int literal)."""
    @T.prim_func
    def constants(L: T.Tensor((3,), T.int64), S: T.Tensor((3,), T.int16)):
        with T.Kernel(1, threads=32):
            T.atomic_store(L[0], T.int64(5))
            T.atomic_store(L[1], T.int64(-3), memory_order="release")
            T.atomic_or(L[2], T.int64(6), memory_order="acq_rel")
            T.atomic_store(S[0], T.int16(7))
            T.atomic_xor(S[1], T.int16(3), memory_order="seq_cst")
            T.atomic_add(S[2], T.int16(-2), memory_order="release")

    return constants


@pytest.mark.emulator
def test_constants_stored_into_64_and_16_bit_integers_in_the_emulation(tmp_path):
    """Before: "no instance of function template tw_atomic_store matches the argument list"
    (T deduced as int64_t from the address and int from the literal); found by the
    differential fuzzer (CUDA in compile mode, seed 0)."""
    big = torch.zeros(3, dtype=torch.int64)
    small = torch.tensor([0, 1, 1], dtype=torch.int16)
    lowered = _lower(constant_stores_kernel())
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, big, small)
    assert big.tolist() == [5, -3, 6] and small.tolist() == [7, 2, -1]


@pytest.mark.nvrtc
def test_constants_stored_into_64_and_16_bit_integers_build_with_nvrtc():
    kernel = tilewright.compile(constant_stores_kernel(), target="cuda -arch=sm_80")
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"
