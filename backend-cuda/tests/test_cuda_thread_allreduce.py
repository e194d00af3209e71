"""``T.tvm_thread_allreduce`` along any thread dimension on CUDA (TileLang's GEMV examples
reduce along threadIdx.y): the group of a dimension is the threads sharing the other
coordinates, ``stride`` (the dimensions below it) apart in the block's thread number
``x + X * (y + Y * z)``. A group inside one warp (powers of two, ``stride * group`` up to 32)
is XOR shuffles at offsets ``stride * 2^i``; a group spanning warps (threads=(2, 32) along y:
32 threads two apart, in two warps) or of sizes other than powers of two shuffles within
each warp, then combines the warps' totals through shared slots after ``__syncthreads()``.
The generated CUDA runs in the host emulation against torch and builds with NVRTC; TileLang's
``splitk_gemv_vectorized_tvm``, ported by its imports, computes ``B @ A``."""

import re

import hostemu
import pytest
import tilewright
import tilewright as tilelang
import tilewright.language as T
import tilewright_cuda.language as cuda_lang
import torch
from cuda_source import kernel as kernels_of
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor
from tvm import DataType

TARGET = "cuda -arch=sm_90a"
COMBINERS = {
    "sum": (lambda a, b: a + b, lambda t, axis: t.sum(dim=axis, keepdim=True)),
    "max": (lambda a, b: T.max(a, b), lambda t, axis: t.amax(dim=axis, keepdim=True)),
    "min": (lambda a, b: T.min(a, b), lambda t, axis: t.amin(dim=axis, keepdim=True)),
}


def allreduce(threads, dim, kind="sum", dtype="float32", accum="float32", repeat=1):
    """Thread (x, y, z) of one block of ``threads`` reads A[z, y, x] (times the pass number
    when ``repeat`` > 1, the reduction in a loop) and writes its group's combined value along
    ``dim`` to S[z, y, x], in ``accum``."""
    X, Y, Z = (*threads, 1, 1)[:3]
    fcombine = COMBINERS[kind][0]

    @T.prim_func
    def main(A: T.Tensor((Z, Y, X), dtype), S: T.Tensor((repeat, Z, Y, X), accum)):
        with T.Kernel(1, threads=threads):
            x = T.get_thread_binding(0) if X > 1 else 0
            y = T.get_thread_binding(1) if Y > 1 else 0
            z = T.get_thread_binding(2) if Z > 1 else 0
            acc = T.alloc_local((1,), accum)
            out = T.alloc_local((1,), accum)
            for p in T.serial(repeat) if repeat > 1 else [0]:
                acc[0] = A[z, y, x].astype(accum) * (p + 1)
                with T.attr(T.comm_reducer(fcombine, [T.cast(0, accum)]), "reduce_scope",
                            T.reinterpret(T.uint64(0), dtype="handle")):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0],
                                                      (x, y, z)[dim], dtype="handle"))
                S[p, z, y, x] = out[0]

    return main


def _inputs(threads, dtype):
    shape = tuple(reversed((*threads, 1, 1)[:3]))
    gen = torch.Generator().manual_seed(0)
    if dtype == "int32":
        return torch.randint(-1000, 1000, shape, generator=gen, dtype=torch.int32)
    return torch.randn(shape, generator=gen).to(getattr(torch, dtype))


def _expected(a, dim, kind, accum, repeat):
    axis = 2 - dim  # A is (Z, Y, X)
    wide = a.to(torch.int64) if accum == "int32" else a.double()
    rows = [COMBINERS[kind][1](wide * (p + 1), axis).expand(a.shape) for p in range(repeat)]
    return torch.stack(rows).to(getattr(torch, accum))


# (threads, dim, combiner, value dtype, accumulator dtype, passes)
CASES = [
    ((2, 32), 1, "sum", "float32", "float32", 1),  # TileLang's GEMV: a group in two warps
    ((4, 8), 1, "sum", "float32", "float32", 1),  # inside one warp: offsets 16, 8, 4
    ((8, 4, 2), 2, "sum", "float32", "float32", 1),  # z: two threads 32 apart
    ((8, 4, 2), 1, "max", "float32", "float32", 1),
    ((2, 32), 1, "max", "float32", "float32", 1),
    ((8, 4, 2), 2, "min", "float32", "float32", 1),
    ((2, 32), 1, "sum", "int32", "int32", 1),
    ((8, 4, 2), 2, "sum", "int32", "int32", 1),
    ((2, 32), 1, "sum", "float16", "float32", 1),
    ((4, 64), 1, "sum", "float16", "float16", 1),  # half slots
    ((2, 32), 1, "max", "float16", "float16", 1),  # the NaN rule's comparison of halves
    ((64, 2), 0, "sum", "float32", "float32", 1),  # x beyond a warp
    ((24,), 0, "max", "float32", "float32", 1),  # x not a power of two: runs of 8
    ((3, 5), 1, "sum", "float32", "float32", 1),  # no shuffles: a slot per thread
    ((4, 6, 3), 1, "min", "int32", "int32", 1),
    ((2, 32), 1, "sum", "float32", "float32", 3),  # the slots reused in a loop
]


def _id(case):
    threads, dim, kind, dtype, accum, repeat = case
    return (f"{'x'.join(map(str, threads))}-{'xyz'[dim]}-{kind}-{dtype}-{accum}"
            + (f"-x{repeat}" if repeat > 1 else ""))


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_allreduce_along_a_dimension_matches_torch_in_emulation(case, tmp_path):
    threads, dim, kind, dtype, accum, repeat = case
    lowered = tilewright.lower(allreduce(threads, dim, kind, dtype, accum, repeat), TARGET)
    a = _inputs(threads, dtype)
    out = torch.full((repeat, *a.shape), -1 if accum == "int32" else float("nan"),
                     dtype=getattr(torch, accum))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    want = _expected(a, dim, kind, accum, repeat)
    if accum == "int32" or kind != "sum":
        assert torch.equal(out, want)
    else:
        tol = 1e-2 if accum == "float16" else 1e-5
        torch.testing.assert_close(out, want, rtol=tol, atol=tol)


@pytest.mark.emulator
@pytest.mark.parametrize("case", [c for c in CASES if c[2] != "sum" or c[4] == "int32"],
                         ids=[_id(c) for c in CASES if c[2] != "sum" or c[4] == "int32"])
def test_exact_allreduces_equal_the_cpu_backends_bit_for_bit(case, tmp_path):
    """Integers and max / min: the CUDA result is the CPU reference backend's exactly."""
    threads, dim, kind, dtype, accum, repeat = case
    func = allreduce(threads, dim, kind, dtype, accum, repeat)
    a = _inputs(threads, dtype)
    on_cpu = torch.zeros((repeat, *a.shape), dtype=getattr(torch, accum))
    tilewright.compile(func, target="cpu")(a, on_cpu)
    lowered = tilewright.lower(func, TARGET)
    out = torch.zeros_like(on_cpu)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    assert torch.equal(out, on_cpu)


@pytest.mark.nvrtc
def test_every_allreduce_builds_with_nvrtc():
    for case in CASES:
        text = tilewright.lower(allreduce(*case), TARGET).source.text
        cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
        assert cubin, _id(case)


def test_a_group_inside_a_warp_is_shuffles_at_its_stride_alone():
    text = kernels_of(tilewright.lower(allreduce((4, 8), 1), TARGET).source.text)
    offsets = [int(o) for o in re.findall(r"__shfl_xor_sync\(\(uint\)4294967295, out\w*\[0\], "
                                          r"(\d+), 32\)", text)]
    assert offsets == [16, 8, 4]
    assert "__syncthreads" not in text and "tw_smem" not in text


def test_a_group_across_warps_shuffles_then_combines_one_slot_per_warp():
    text = kernels_of(tilewright.lower(allreduce((2, 32), 1), TARGET).source.text)
    # 16 members of each group in a warp (lanes of one parity): offsets 16, 8, 4, 2
    assert text.count("__shfl_xor_sync(") == 4 and ", 2, 32)" in text
    assert ", 1, 32)" not in text
    # lanes 0 and 1 of each warp put their group's total in the slot warp * 2 + lane
    put, sync = text.index("& 31) < 2)"), text.index("__syncthreads();")
    assert put < sync and text.count("__syncthreads();") == 1


def test_the_x_dimension_within_a_warp_keeps_its_shuffles():
    """A group of up to a warp along x (a power of two) is consecutive lanes, as before."""
    text = kernels_of(tilewright.lower(allreduce((8, 4), 0), TARGET).source.text)
    assert [", 4, 32)" in text, ", 2, 32)" in text, ", 1, 32)" in text] == [True] * 3
    assert "__syncthreads" not in text


def test_a_group_across_warps_inside_a_role_is_refused_at_the_line():
    """The block's barrier of a group spanning warps cannot be reached by a role's threads
    alone; a group inside one warp can be reduced there."""
    def kernel(dim):
        @cuda_lang.prim_func
        def main(A: T.Tensor((8, 32), "float32"), S: T.Tensor((8, 32), "float32")):
            with T.Kernel(1, threads=(32, 8)):
                x = T.get_thread_binding(0)
                y = T.get_thread_binding(1)
                acc = T.alloc_local((1,), "float32")
                out = T.alloc_local((1,), "float32")
                acc[0] = A[y, x]
                with cuda_lang.ws(0):
                    with T.attr(T.comm_reducer(lambda a, b: a + b, [T.float32(0)]),
                                "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0],
                                                          (x, y)[dim], dtype="handle"))
                    S[y, x] = out[0]

        return main

    assert "__shfl_xor_sync" in tilewright.lower(kernel(0), TARGET).source.text
    with pytest.raises(KernelError, match=r"test_cuda_thread_allreduce\.py:\d+: "
                       r"T\.tvm_thread_allreduce along threadIdx\.y \(8 threads 32 apart, "
                       r"threads=\(32, 8, 1\)\) in a role of 128 threads .* inside one warp"):
        tilewright.lower(kernel(1), TARGET)


# -- TileLang's examples/gemv/example_gemv.py, its imports changed ------------------------------
@tilelang.jit
def splitk_gemv_vectorized_tvm(
    A,
    B,
    BLOCK_N: int,
    reduce_threads: int,
    dtype: T.dtype = T.float16,
    accum_dtype: T.dtype = T.float,
):
    N, K = T.const("N, K")
    MAX_TRANSACTION_SIZE_IN_BITS = 128
    TILE_K = MAX_TRANSACTION_SIZE_IN_BITS // DataType(dtype).bits
    BLOCK_K = reduce_threads * TILE_K

    A: T.Tensor((K,), dtype)
    B: T.Tensor((N, K), dtype)
    C = T.empty((N,), dtype)

    with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, reduce_threads)) as bn:
        tn = T.get_thread_binding(0)
        tk = T.get_thread_binding(1)
        A_local = T.alloc_local((TILE_K,), dtype)
        B_local = T.alloc_local((TILE_K,), dtype)
        C_accum = T.alloc_local((1,), accum_dtype)

        T.clear(C_accum)
        for bk in T.serial(T.ceildiv(K, BLOCK_K)):
            for k in T.vectorized(TILE_K):
                A_local[k] = A[bk * BLOCK_K + tk * TILE_K + k]
                B_local[k] = B[bn * BLOCK_N + tn, bk * BLOCK_K + tk * TILE_K + k]
            for k in T.serial(TILE_K):
                C_accum[0] += A_local[k].astype(accum_dtype) * B_local[k].astype(accum_dtype)
        C_reduced = T.alloc_local((1,), accum_dtype)
        with T.attr(
            T.comm_reducer(lambda x, y: x + y, [T.cast(0, accum_dtype)]),
            "reduce_scope",
            T.reinterpret(T.uint64(0), dtype="handle"),
        ):
            T.evaluate(
                T.tvm_thread_allreduce(
                    T.uint32(1),
                    C_accum[0],
                    True,
                    C_reduced[0],
                    tk,
                    dtype="handle",
                )
            )

        C[bn * BLOCK_N + tn] = C_reduced[0]

    return C


GEMV_SHAPES = [(2, 32), (4, 8)]  # the example's main() (two warps per group), one warp


@pytest.mark.emulator
@pytest.mark.parametrize("block_n, reduce_threads", GEMV_SHAPES)
def test_tilelangs_gemv_example_matches_torch_in_emulation(block_n, reduce_threads, tmp_path):
    N, K = 8, 2 * reduce_threads * 8  # two passes over K of the reduce threads' 8 halves
    func = splitk_gemv_vectorized_tvm.get_tir(N=N, K=K, BLOCK_N=block_n,
                                              reduce_threads=reduce_threads)
    lowered = tilewright.lower(func, TARGET)
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(K, generator=gen).half()
    b = torch.randn(N, K, generator=gen).half()
    c = torch.full((N,), float("nan"), dtype=torch.float16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(c, (b.float() @ a.float()).half(), rtol=2e-3, atol=2e-3)


@pytest.mark.nvrtc
@pytest.mark.parametrize("block_n, reduce_threads", GEMV_SHAPES)
def test_tilelangs_gemv_example_builds_with_nvrtc(block_n, reduce_threads):
    func = splitk_gemv_vectorized_tvm.get_tir(N=8, K=512, BLOCK_N=block_n,
                                              reduce_threads=reduce_threads)
    cubin, _ = executor.nvrtc_compile(tilewright.lower(func, TARGET).source.text,
                                      arch.get("sm_80"), ".")
    assert cubin

