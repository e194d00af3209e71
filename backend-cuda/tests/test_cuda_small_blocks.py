"""Blocks that are not whole warps (TileLang's ``with T.Kernel(1, threads=1):``, 16, 48, 100
threads): the block's last warp is partial, so every shuffle's member mask names only the
lanes that exist (``rules.common.lane_mask``), reductions across a partial warp combine only
the partners that exist (``rules.common.combine_lanes``), and the shuffle reductions of
shared tiles take groups that divide the block. Elementwise, atomic, reduction, reducer,
scan, warp-reduce, thread-level and thread-gemm kernels run in the host emulation (whose
shuffles fail on a mask naming a lane that does not exist) against torch and build with
NVRTC; what needs whole warps (a tensor-core gemm, ``ldmatrix``, ``mma.sync``,
``setmaxnreg``) is refused at its line naming the op and the thread count, and so is a block
above 1024 threads. The conformance case ``random`` (a block of one thread) runs on CUDA."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError
from tilewright.plugin import get_manager
from tilewright_sdk.conformance.catalogue import cases
from tilewright_sdk.conformance.runner import missing_capabilities

THREADS = (1, 16, 48, 100)
NAN = float("nan")


def _line(marker: str) -> int:
    """The line of this file holding ``# marker``."""
    with open(__file__) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def _assert_at(exc: KernelError, marker: str, *words: str) -> None:
    assert exc.location is not None and exc.location.filename == __file__, str(exc)
    assert exc.location.line == _line(marker), str(exc)
    for word in words:
        assert word in str(exc), str(exc)


# -- kernels: (the PrimFunc, the arguments, the reference of the outputs, the outputs' places) --
def elementwise(threads):
    @T.prim_func
    def main(A: T.Tensor((100,), "float32"), C: T.Tensor((100,), "float32")):
        with T.Kernel(2, threads=threads) as bx:
            for i in T.Parallel(50):
                C[bx * 50 + i] = A[bx * 50 + i] * 2.0 + 1.0

    a = torch.randn(100)
    return main, [a, torch.full((100,), NAN)], [a * 2 + 1], [1]


def block_atomics(threads):
    """Each iteration's atomic, and the block's one atomic of an element."""

    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), S: T.Tensor((1,), "float32"),
             Blocks: T.Tensor((1,), "int32")):
        with T.Kernel(4, threads=threads) as bx:
            for i in T.Parallel(64):
                T.atomic_add(S[0], A[bx * 64 + i])
            T.atomic_add(Blocks[0], 1)

    a = torch.randint(-8, 8, (256,)).float()  # exact in any order
    return main, [a, torch.zeros(1), torch.zeros(1, dtype=torch.int32)], \
        [a.sum().reshape(1), torch.tensor([4], dtype=torch.int32)], [1, 2]


def row_reductions(threads):
    """Rows of a tile in shared memory: groups of lanes that divide the block, their shuffles
    masked to the lanes that exist."""

    @T.prim_func
    def main(A: T.Tensor((8, 70), "float32"), S: T.Tensor((8,), "float32"),
             M: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((8, 70), "float32")
            R = T.alloc_fragment((8,), "float32")
            R2 = T.alloc_fragment((8,), "float32")
            T.copy(A, F)
            T.reduce_sum(F, R, dim=1)
            T.reduce_max(F, R2, dim=1)
            T.copy(R, S)
            T.copy(R2, M)

    a = torch.randn(8, 70)
    return main, [a, torch.full((8,), NAN), torch.full((8,), NAN)], [a.sum(1), a.amax(1)], \
        [1, 2]


def spread_reduction(threads):
    """A fragment spread over the threads in registers, reduced whole: each warp's lanes, a
    partial last warp's too, then one shared slot per warp."""
    n = threads * 4

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((n,), "float32")
            R = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(n):
                F[i] = A[i] * 2.0
            T.reduce_sum(F, R, dim=0)
            B[0] = R[0]

    a = torch.randn(n)
    return main, [a, torch.full((1,), NAN)], [(a * 2).sum().reshape(1)], [1]


def reducer(threads):
    @T.prim_func
    def main(A: T.Tensor((64, 16), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_reducer((16,), "float32", op="sum")
            T.reducer_init(acc, 0.0)
            for i, j in T.Parallel(64, 16):
                T.reducer_update(acc[j], A[i, j])
            T.finalize_reducer(acc, B)

    a = torch.randint(-8, 8, (64, 16)).float()
    return main, [a, torch.full((16,), NAN)], [a.sum(0)], [1]


def cumsum(threads):
    @T.prim_func
    def main(A: T.Tensor((4, 40), "float32"), B: T.Tensor((4, 40), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((4, 40), "float32")
            T.copy(A, s)
            T.cumsum(s, dim=1)
            T.copy(s, B)

    a = torch.randint(-8, 8, (4, 40)).float()
    return main, [a, torch.full((4, 40), NAN)], [a.cumsum(1)], [1]


def warp_reduce(threads):
    """The value summed and maxed over each warp; the last warp of 48 threads has 16."""

    @T.prim_func
    def main(X: T.Tensor((threads,), "float32"), S: T.Tensor((threads,), "float32"),
             M: T.Tensor((threads,), "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            S[tx] = T.warp_reduce_sum(X[tx])
            M[tx] = T.warp_reduce_max(X[tx])

    x = torch.randint(-8, 8, (threads,)).float()
    total, most = x.clone(), x.clone()
    for first in range(0, threads, 32):
        total[first:first + 32] = x[first:first + 32].sum()
        most[first:first + 32] = x[first:first + 32].max()
    return main, [x, torch.full((threads,), NAN), torch.full((threads,), NAN)], \
        [total, most], [1, 2]


def thread_code(threads):
    """Each thread's own row maximum and ticket (an atomic returning the previous value)."""

    @T.prim_func
    def main(X: T.Tensor((threads, 8), "float32"), Y: T.Tensor((threads,), "float32"),
             Count: T.Tensor((1,), "int32"), Ticket: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            m = T.alloc_var("float32")
            m = X[tx, 0]
            for j in T.serial(1, 8):
                m = T.max(m, X[tx, j])
            Y[tx] = m
            Ticket[tx] = T.atomic_add(Count[0], 1, return_prev=True)

    x = torch.randn(threads, 8)
    return main, [x, torch.full((threads,), NAN), torch.zeros(1, dtype=torch.int32),
                  torch.full((threads,), -1, dtype=torch.int32)], \
        [x.amax(1), torch.tensor([threads], dtype=torch.int32)], [1, 2]


def thread_gemm(threads):
    """A float32 gemm in a pipelined loop: C's elements spread over the threads."""

    @T.prim_func
    def main(A: T.Tensor((64, 128), "float32"), B: T.Tensor((128, 32), "float32"),
             C: T.Tensor((64, 32), "float32")):
        with T.Kernel(2, threads=threads) as bx:
            As = T.alloc_shared((32, 32), "float32")
            Bs = T.alloc_shared((32, 32), "float32")
            Cf = T.alloc_fragment((32, 32), "float32")
            T.clear(Cf)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[bx * 32, k * 32], As)
                T.copy(B[k * 32, 0], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[bx * 32, 0])

    a, b = torch.randint(-4, 4, (64, 128)).float(), torch.randint(-4, 4, (128, 32)).float()
    return main, [a, b, torch.full((64, 32), NAN)], [a @ b], [2]


KERNELS = {f.__name__: f for f in (elementwise, block_atomics, row_reductions,
                                   spread_reduction, reducer, cumsum, warp_reduce,
                                   thread_code, thread_gemm)}


@pytest.mark.emulator
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("name", KERNELS)
def test_small_block_matches_torch_in_host_emulation(name, threads, tmp_path):
    func, args, want, outputs = KERNELS[name](threads)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert lowered.source.payload["block"] == [threads, 1, 1]
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    for place, expected in zip(outputs, want, strict=True):
        torch.testing.assert_close(args[place], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.nvrtc
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("name", KERNELS)
def test_small_block_builds_with_nvrtc(name, threads):
    kernel = tilewright.compile(KERNELS[name](threads)[0], target="cuda -arch=sm_80",
                                execution_backend="nvrtc")
    assert kernel.executor == "nvrtc"
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"


def _shuffles(text: str) -> list[str]:
    return [line for line in text.splitlines() if "__shfl_" in line]


def test_shuffle_masks_name_the_lanes_that_exist():
    """16 threads: the lanes 0-15 of the one warp; 48: every lane of the first warp, lanes
    0-15 of the second; 64 (whole warps): every lane, as before."""
    for threads, masks in ((16, {"(uint)65535"}), (48, {"(uint)65535", "(uint)4294967295"}),
                           (64, {"(uint)4294967295"})):
        text = tilewright.lower(reducer(threads)[0], "cuda -arch=sm_80").source.text
        found = _shuffles(text)
        assert found, text
        for line in found:
            assert all(m in line for m in masks), line
            assert threads != 48 or ">> 5) == 1)" in line  # the second warp's mask
        assert threads % 32 == 0 or "?" in text  # a partner read only where it exists


@pytest.mark.emulator
def test_emulation_refuses_a_mask_naming_lanes_that_do_not_exist(tmp_path):
    """The host emulation's shuffles check the member mask against the lanes of the warp
    that exist: a full mask in a block of 48 threads fails the launch; the mask of the lanes
    that exist runs."""

    def kernel(mask):
        @T.prim_func
        def main(X: T.Tensor((48,), "float32"), Y: T.Tensor((48,), "float32")):
            with T.Kernel(1, threads=48):
                tx = T.get_thread_binding()
                Y[tx] = T.tvm_warp_shuffle(mask(tx), X[tx], 0, 32, 32)
        return main

    x = torch.randn(48)
    bad = tilewright.lower(kernel(lambda tx: 0xFFFFFFFF), "cuda -arch=sm_80").source
    with pytest.raises(RuntimeError, match="names lanes that do not exist"):
        hostemu.run(bad.text, bad.payload, tmp_path, x, torch.zeros(48))
    good = tilewright.lower(kernel(lambda tx: T.if_then_else(
        tx < 32, T.uint32(0xFFFFFFFF), T.uint32(0xFFFF))), "cuda -arch=sm_80").source
    y = torch.zeros(48)
    hostemu.run(good.text, good.payload, tmp_path, x, y)
    torch.testing.assert_close(y, torch.cat([x[:1].expand(32), x[32:33].expand(16)]))


# -- what needs whole warps ---------------------------------------------------------------------
def test_tensor_core_gemm_is_refused_on_a_partial_warp():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
             C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=48):
            As = T.alloc_shared((16, 16), "float16")
            Bs = T.alloc_shared((16, 16), "float16")
            Cf = T.alloc_fragment((16, 16), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.clear(Cf)
            T.gemm(As, Bs, Cf)  # gemm-line
            T.copy(Cf, C)

    for arch in ("sm_80", "sm_90a"):
        with pytest.raises(UnsupportedOpError) as info:
            tilewright.lower(main, f"cuda -arch={arch}")
        _assert_at(info.value, "gemm-line", "T.gemm of float16", "mma.sync m16n8k16",
                   "whole warps of 32 threads", "threads=48 leaves a partial warp of 16 threads",
                   "use a multiple of 32 threads")


def test_warp_wide_dialect_ops_are_refused_on_a_partial_warp():
    @T.prim_func
    def ldmatrix(A: T.Tensor((16, 16), "float16"), C: T.Tensor((48, 8), "float16")):
        with T.Kernel(1, threads=48):
            S = T.alloc_shared((16, 16), "float16")
            a = T.alloc_local((8,), "float16")
            T.copy(A, S)
            tx = T.get_thread_binding()
            T.ptx_ldmatrix(False, 4, T.access_ptr(S[tx % 16, 0], "r"),  # ldmatrix-line
                           T.access_ptr(a[0], "w"))
            for i in T.serial(8):
                C[tx, i] = a[i]

    @T.prim_func
    def mma(C: T.Tensor((48, 4), "float32")):
        with T.Kernel(1, threads=48):
            a = T.alloc_local((8,), "float16")
            b = T.alloc_local((4,), "float16")
            c = T.alloc_local((4,), "float32")
            tx = T.get_thread_binding()
            for i in T.serial(8):
                a[i] = T.float16(1)
            for i in T.serial(4):
                b[i] = T.float16(1)
                c[i] = T.float32(0)
            T.ptx_mma("float32", "m16n8k16", "row", "col", "fp16", "fp16", "fp32",  # mma-line
                      a.data, 0, b.data, 0, c.data, 0, False)
            for i in T.serial(4):
                C[tx, i] = c[i]

    @T.prim_func
    def registers(A: T.Tensor((48,), "float32")):
        with T.Kernel(1, threads=48):
            T.set_max_nreg(240, 1)  # nreg-line
            for i in T.Parallel(48):
                A[i] = A[i] + 1.0

    for func, marker, instruction in ((ldmatrix, "ldmatrix-line", "T.ptx_ldmatrix issues "
                                       "ldmatrix"), (mma, "mma-line", "T.ptx_mma issues "
                                                     "mma.sync"),
                                      (registers, "nreg-line", "T.set_max_nreg issues "
                                       "setmaxnreg")):
        with pytest.raises(KernelError) as info:
            tilewright.lower(func, "cuda -arch=sm_90a")
        _assert_at(info.value, marker, instruction, "all 32 lanes of a warp",
                   "threads=48 leaves a partial warp of 16 threads")


def test_one_thread_is_named_so():
    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=1):
            T.set_max_nreg(240, 1)  # one-line
            for i in T.Parallel(16):
                A[i] = A[i] + 1.0

    with pytest.raises(KernelError) as info:
        tilewright.lower(main, "cuda -arch=sm_90a")
    _assert_at(info.value, "one-line", "threads=1 leaves a partial warp of 1 thread: use")


def test_a_block_above_1024_threads_is_refused_at_its_line():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=(32, 33)):  # kernel-line
            for i in T.Parallel(64):
                A[i] = A[i] + 1.0

    with pytest.raises(KernelError) as info:
        tilewright.lower(main, "cuda -arch=sm_80")
    _assert_at(info.value, "kernel-line", "threads=(32, 33, 1) gives 1056 threads per block",
               "at most 1024")


# -- the conformance suite's block of one thread ------------------------------------------------
@pytest.mark.emulator
def test_the_random_conformance_case_runs_a_block_of_one_thread(tmp_path):
    (case,) = cases(["random"])
    assert case.kernel.features == ("single_thread_blocks",)
    assert missing_capabilities(case, get_manager().backend_for("cuda")) == []
    source = hostemu.run_case(case, "cuda -arch=sm_80", tmp_path)
    assert "__shfl" not in source
