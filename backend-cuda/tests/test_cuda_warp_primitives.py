"""TileLang's warp-level primitives on CUDA: the conformance suite's warp rows (shuffles with
widths and out-of-group sources, votes, block predicates, lane and warp indices, __ffs and
__fns, in whole and partial warps) run by the host emulation against their references, a vote
under a condition on the thread index with a partial mask, equal to the CPU reference
backend's result; TileLang's own kernels of test_tilelang_language_warp_vote.py,
test_tilelang_language_warp_sync.py and test_tilelang_language_get_warp_info.py, ported by
their imports; the intrinsics each lowers to; an NVRTC build of every kernel."""

import hostemu
import pytest
import tilewright
import tilewright as tilelang
import tilewright.language as T
import tilewright_cuda.language as cuda_lang
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import cases
from tvm import tirx

TARGET = "cuda -arch=sm_90a"
WARP_CASES = cases(["warp_shuffle", "warp_vote", "warp_index"])


@pytest.mark.emulator
@pytest.mark.parametrize("case", WARP_CASES, ids=[c.id for c in WARP_CASES])
def test_warp_rows_of_the_conformance_suite_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, TARGET, tmp_path)


def guarded_votes():
    """Lanes 0..15 of each warp (mask 0x0000FFFF) vote and shuffle; the others do not."""

    @T.prim_func
    def main(A: T.Tensor((64,), "int32"), B: T.Tensor((64, 4), "int64")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx % 32 < 16:
                B[tx, 0] = T.cast(T.ballot_sync(A[tx] > 0, 0xFFFF), "int64")
                B[tx, 1] = T.cast(T.activemask(), "int64")
                B[tx, 2] = T.cast(T.shfl_up(A[tx], 1, 16, 0xFFFF), "int64")
                B[tx, 3] = T.cast(T.all_sync(A[tx] > -5, 0xFFFF), "int64")
            else:
                B[tx, 0] = -1

    return main


@pytest.mark.emulator
def test_votes_of_half_a_warp_equal_the_cpu_backends(tmp_path):
    a = torch.randint(-9, 10, (64,), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    on_cpu = torch.zeros((64, 4), dtype=torch.int64)
    tilewright.compile(guarded_votes(), target="cpu")(a, on_cpu)
    lowered = tilewright.lower(guarded_votes(), TARGET)
    out = torch.zeros_like(on_cpu)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    # activemask under divergence is the lanes the GPU runs together: compare the others
    assert torch.equal(out[:, [0, 2, 3]], on_cpu[:, [0, 2, 3]])
    assert (on_cpu[:, 1][torch.arange(64) % 32 < 16] == 0xFFFF).all()


def test_each_primitive_lowers_to_its_intrinsic():
    rows = {c.kernel.name: c for c in WARP_CASES if c.variant == "partial"}
    shuffles = tilewright.lower(rows["warp_shuffle"].kernel.make("float32", M=2, N=48),
                                TARGET).source.text
    for name in ("__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync",
                 "__syncwarp"):
        assert name + "(" in shuffles
    # the last warp of 48 threads has 16 lanes: the member mask names those alone
    assert "65535" in shuffles
    votes = tilewright.lower(rows["warp_vote"].kernel.make("int32", M=2, N=64),
                             TARGET).source.text
    for name in ("__any_sync", "__all_sync", "__ballot_sync", "__activemask",
                 "__match_any_sync", "tw_match_all_sync", "__syncthreads_count",
                 "__syncthreads_and", "__syncthreads_or"):
        assert name + "(" in votes


@pytest.mark.nvrtc
def test_every_warp_kernel_builds_with_nvrtc():
    funcs = [c.kernel.make(c.dtype, **c.dims) for c in WARP_CASES]
    funcs += [k.get_tir() for k in (kernel_any_sync, kernel_ballot_sync, kernel_match_all_sync,
                            kernel_syncthreads_count, kernel_shfl_sync, kernel_with_warp_sync)]
    for func in funcs:
        text = tilewright.lower(func, TARGET).source.text
        cubin, _ = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
        assert cubin


def test_a_block_vote_inside_a_role_is_refused_at_its_line():
    @cuda_lang.prim_func
    def main(A: T.Tensor((256,), "int32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            with cuda_lang.ws(0):
                A[tx] = T.syncthreads_count(tx < 3)

    with pytest.raises(KernelError, match=r"test_cuda_warp_primitives\.py:\d+: "
                       r"T\.syncthreads_count is a barrier of the whole block"):
        tilewright.lower(main, TARGET)


# -- TileLang's kernels (testing/python/language/test_tilelang_language_warp_*.py,
# get_warp_info.py), their imports changed ------------------------------------------------------
@tilelang.jit
def kernel_any_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            val = T.any_sync(tx == 0)
            B[tx] = val

    return main


@tilelang.jit
def kernel_ballot_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int64")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            mask = T.ballot_sync(tx == 0)
            B[tx] = T.cast(mask, "int64")

    return main


@tilelang.jit
def kernel_ffs_ballot_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            mask = T.ballot_sync(tx >= 7)
            B[tx] = T.__ffs(mask) - 1

    return main


@tilelang.jit
def kernel_fns_ballot_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            mask = T.cast(T.ballot_sync(tx >= 7), "uint32")
            B[tx] = T.cast(T.__fns(mask, 0, 3), "int32")

    return main


@tilelang.jit
def kernel_match_any_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            value = T.if_then_else(tx < 16, 1, 2)
            peers = T.match_any_sync(value)
            B[tx] = T.cast(peers, "int32")

    return main


@tilelang.jit
def kernel_match_all_sync():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            result = T.match_all_sync(7)
            B[tx] = T.cast(result, "int32")

    return main


@tilelang.jit
def kernel_syncthreads_count():
    @T.prim_func
    def main(B: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            cnt = T.syncthreads_count(tx < 16)
            B[tx] = cnt

    return main


@tilelang.jit
def kernel_with_warp_sync():
    @T.prim_func
    def main(A: T.Tensor((1,), "int32"), B: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            if tx == 0:
                tirx.call_extern("void", "__nanosleep", 100)
                A[0] = -1
            T.sync_warp()
            if tx == 1:
                B[0] = A[0]

    return main


@tilelang.jit
def kernel_shfl_sync():
    @T.prim_func
    def main(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            val = tx * 10
            broadcast = T.shfl_sync(val, 31)
            A[tx] = broadcast

    return main


@tilelang.jit(out_idx=[-1])
def _shuffle_elect_kernel(num_threads: int = 128, thread_extent: int = 64):
    @T.prim_func
    def shuffle_elect_kernel(A: T.Tensor((num_threads,), T.int32)):
        with T.Kernel(1, threads=num_threads) as _:
            tx = T.get_thread_binding()
            elected = T.shuffle_elect(thread_extent)
            A[tx] = elected

    return shuffle_elect_kernel


def _emulate(func, tmp_path, *args):
    lowered = tilewright.lower(func, TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)
    return lowered.source.text


TILELANG = [
    (kernel_any_sync, "__any_sync", torch.int32, [1] * 32),
    (kernel_ballot_sync, "__ballot_sync", torch.int64, [1] * 32),
    (kernel_ffs_ballot_sync, "__ballot_sync", torch.int32, [7] * 32),
    (kernel_fns_ballot_sync, "__ballot_sync", torch.int32, [9] * 32),
    (kernel_match_any_sync, "__match_any_sync", torch.int32,
     [0x0000FFFF] * 16 + [0xFFFF0000 - (1 << 32)] * 16),
    (kernel_match_all_sync, "tw_match_all_sync", torch.int32, [-1] * 32),
    (kernel_syncthreads_count, "__syncthreads_count", torch.int32, [16] * 32),
    (kernel_shfl_sync, "__shfl_sync", torch.int32, [310] * 32),
]


@pytest.mark.emulator
@pytest.mark.parametrize("kernel,intrinsic,dtype,want", TILELANG,
                         ids=[k[0].get_tir.__self__.__name__ if False else str(i)
                              for i, k in enumerate(TILELANG)])
def test_tilelangs_warp_kernels_in_host_emulation(kernel, intrinsic, dtype, want, tmp_path):
    out = torch.zeros(32, dtype=dtype)
    text = _emulate(kernel.get_tir(), tmp_path, out)
    assert intrinsic + "(" in text
    assert out.tolist() == want


@pytest.mark.emulator
def test_tilelangs_warp_sync_kernel_in_host_emulation(tmp_path):
    a, b = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    assert "__syncwarp(" in _emulate(kernel_with_warp_sync.get_tir(), tmp_path, a, b)
    assert b.item() == -1


@pytest.mark.emulator
@pytest.mark.parametrize("threads,extent", [(256, 64), (128, 0)])
def test_tilelangs_shuffle_elect_in_host_emulation(threads, extent, tmp_path):
    out = torch.zeros(threads, dtype=torch.int32)
    _emulate(_shuffle_elect_kernel.get_tir(num_threads=threads, thread_extent=extent),
             tmp_path, out)
    index = torch.arange(threads)
    want = index == 0 if extent == 0 else index % extent == 0
    assert torch.equal(out, want.to(torch.int32))


@pytest.mark.parametrize("first", [32, 16])
def test_a_block_predicate_under_a_condition_on_the_thread_is_refused_at_its_line(first):
    """A branch selecting whole warps is a role (its vote refused as in T.ws); another one is
    refused as a block's op under a condition."""

    @T.prim_func
    def main(A: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx < first:
                A[tx] = T.syncthreads_or(tx == 3)

    message = "is a barrier of the whole block" if first == 32 else \
        "under a condition on the thread index"
    with pytest.raises(KernelError, match=r"test_cuda_warp_primitives\.py:\d+: "
                       r"T\.syncthreads_or " + message):
        tilewright.lower(main, TARGET)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16"])
def test_narrow_values_shuffle_as_ints_and_equal_the_cpu_backends(dtype, tmp_path):
    @T.prim_func
    def main(A: T.Tensor((48,), dtype), B: T.Tensor((48, 2), dtype)):
        with T.Kernel(1, threads=48):
            tx = T.get_thread_binding()
            B[tx, 0] = T.shfl_xor(A[tx], 3)
            B[tx, 1] = T.shfl_up(A[tx], 2, 8)

    a = (torch.arange(48) % 3 == 0) if dtype == "bool" else \
        (torch.arange(48) * 7 % 100).to(getattr(torch, dtype))
    on_cpu = torch.zeros((48, 2), dtype=a.dtype)
    tilewright.compile(main, target="cpu")(a, on_cpu)
    lowered = tilewright.lower(main, TARGET)
    assert "__shfl_xor_sync(" in lowered.source.text
    out = torch.zeros_like(on_cpu)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    assert torch.equal(out, on_cpu)
