"""Every example kernel lowers to CUDA C++ with the launch description the executors need;
targets, architectures and bad input give clear errors."""

from __future__ import annotations

import cuda_cases as kernels
import pytest
import tilewright
import tilewright.language as T
from tilewright.errors import KernelError, TargetError


@pytest.mark.parametrize("name", kernels.NAMES)
def test_example_lowers_to_cuda(name):
    lowered = tilewright.lower(kernels.func(name), "cuda -arch=sm_90a")
    text, launch = lowered.source.text, lowered.source.payload
    assert lowered.source.language == "cuda"
    # tensor-core kernels also say one block per SM, so ptxas may use 255 registers
    kernel = text[text.rindex('extern "C" __global__'):]
    bounds = f'{launch["block"][0]}, 1' if "tw_gemm_" in kernel else launch["block"][0]
    assert f'extern "C" __global__ void __launch_bounds__({bounds}) {launch["entry"]}(' in text
    assert "threadIdx.x" in text and "blockIdx.x" in text
    # a pipelined loop fed by TMA gets a producer warpgroup: 128 threads more
    extra = 128 if "tw_setmaxnreg_dec" in kernel else 0
    assert launch["arch"] == "sm_90a" and launch["block"] == [128 + extra, 1, 1]
    # every tensor reaches the kernel: as a pointer, or as the TMA descriptors of its tiles
    tensors = {p["param"] for p in launch["params"] if p["kind"] in ("tensor", "tensormap")}
    assert tensors == set(range(len(kernels.func(name).params)))
    if launch["dynamic_smem_bytes"]:
        assert "extern __shared__" in text
    assert "tw_atomic_add" in text if name == "gemm_splitk" else True


def test_gemm_layout_and_barriers():
    lowered = tilewright.lower(kernels.func("gemm"), "cuda -arch=sm_80")
    launch = lowered.source.payload
    # 3 pipeline versions of the A 128x32 + B 32x128 fp16 tiles; the C fragment in registers
    assert launch["dynamic_smem_bytes"] == 3 * (8192 + 8192)
    assert launch["grid"] == ["2", "2", "1"]
    text = lowered.source.text
    prologue, body = text.split("for (int k = 0;", 1)
    body = body.split("tw_cp_async_wait<0>();", 1)[0]
    # one barrier per iteration, after the wait for stage k: it publishes stage k and ends the
    # reads of the version the refill overwrites; none in the prologue
    assert body.count("__syncthreads()") == 1
    assert body.index("tw_cp_async_wait<1>();") < body.index("__syncthreads()") < \
        body.index("tw_cp_async16(") < body.index("tw_gemm_mma_rf<")
    assert prologue.count("tw_cp_async_commit();") == 2 and "__syncthreads" not in prologue


def test_gemm_takes_tensor_cores_where_they_fit():
    fp16 = tilewright.lower(kernels.func("gemm"), "cuda -arch=sm_80").source.text
    # the accumulator in registers: 2x2 warps of 64x64 = 32 tiles of 16x8 x 4 floats; A and
    # B in swizzled layouts (64- and 128-byte rows)
    assert "tw_gemm_mma_rf<128, 128, 32, false, false, 128, 2, 2, tw::swizzled<128, 64, 2>, " \
           "tw::swizzled<32, 128, 3>>(" in fp16
    assert "float C_local_ptr[128];" in fp16
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in fp16
    old_arch = tilewright.lower(kernels.func("gemm"), "cuda -arch=sm_70").source.text
    fp32 = tilewright.lower(kernels.func("gemm_dynamic"), "cuda -arch=sm_90a").source.text
    for text in (old_arch, fp32):
        assert "tw_gemm_mma" not in text and "gemm_acc" in text


def test_flash_attention_accumulators_live_in_registers():
    text = tilewright.lower(kernels.func("flash_attention_f16"), "cuda -arch=sm_80").source.text
    # acc_s and acc_o: gemm C, T.Parallel over [i, j], row reductions, copies -- registers in
    # a 4 x 1 warp grid (each warp owns 16 whole rows); Q, K, V and the float16 copy of acc_s
    # in swizzled shared tiles (128-byte rows)
    sw = "tw::swizzled<64, 128, 3>"
    assert text.count(f"tw_gemm_mma_rf<64, 64, 64, false, true, 128, 4, 1, {sw}, {sw}>(") == 1
    assert text.count(f"tw_gemm_mma_rf<64, 64, 64, false, false, 128, 4, 1, {sw}, {sw}>(") == 1
    assert "float acc_s_ptr[" in text and "float acc_o_ptr[" in text
    assert "__shfl_xor_sync" in text  # the row reductions across the 4 lanes of a row


def _transposed_use():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], S)
            T.clear(F)
            T.gemm(S, S, F)
            for i, j in T.Parallel(64, 64):
                C[i, j] = F[j, i]

    return main


def test_fragments_indexed_otherwise_stay_in_shared_memory():
    text = tilewright.lower(_transposed_use(), "cuda -arch=sm_80").source.text
    assert "tw_gemm_mma<64, 64, 64, false, false, 128," in text and "tw_gemm_mma_rf<" not in text


def test_mma_predicate_explains_each_misfit():
    from tilewright.ir import tile_ops_in
    from tilewright_cuda import arch
    from tilewright_cuda.analysis.gemm_fit import mma_misfit as mma_misfit_for

    fp32 = next(c for c in tile_ops_in(kernels.func("gemm_dynamic")) if c.name == "gemm")
    fp16 = next(c for c in tile_ops_in(kernels.func("gemm")) if c.name == "gemm")
    assert mma_misfit_for(fp16, arch.get("sm_75"), 128) == \
        "mma.sync m16n8k16 .f16 needs sm_80 or newer"
    assert "have no mma.sync form" in mma_misfit_for(fp32, arch.get("sm_90a"), 128)
    assert mma_misfit_for(fp16, arch.get("sm_90a"), 128) is None
    # 8 x 16 = 128 output tiles over 96 threads = 3 warps
    assert "do not split evenly over 3 warps" in mma_misfit_for(fp16, arch.get("sm_90a"), 96)


def test_dynamic_grid_is_an_expression_over_shape_symbols():
    launch = tilewright.lower(kernels.func("gemm_dynamic"), "cuda").source.payload
    assert launch["symbols"] == {"m": [0, 0], "k": [0, 1], "n": [1, 1]}
    grid = [eval(g, {}, {"m": 77, "n": 130, "k": 65}) for g in launch["grid"]]
    assert grid == [3, 2, 1]
    assert {p["name"] for p in launch["params"] if p["kind"] == "symbol"} == {"m", "n", "k"}


def test_reductions_use_warp_shuffles():
    text = tilewright.lower(kernels.func("softmax"), "cuda").source.text
    assert "__shfl_xor_sync" in text


def test_plain_cuda_compiles_for_the_env_arch_then_sm_90a(monkeypatch):
    func = kernels.func("elementwise_add")
    assert tilewright.lower(func, "cuda").source.payload["arch"] == "sm_90a"
    monkeypatch.setenv("TILEWRIGHT_CUDA_ARCH", "sm_80")
    assert tilewright.lower(func, "cuda").source.payload["arch"] == "sm_80"


def test_unknown_arch_is_an_error_naming_it():
    with pytest.raises(TargetError, match=r"unknown CUDA architecture 'sm_99'.*sm_90a"):
        tilewright.lower(kernels.func("elementwise_add"), "cuda -arch=sm_99")


def test_unknown_target_option_is_an_error():
    with pytest.raises(TargetError, match="no option -mcpu"):
        tilewright.lower(kernels.func("elementwise_add"), "cuda -mcpu=x")


def _big_shared():
    @T.prim_func
    def main(A: T.Tensor((1024, 1024), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((256, 256), "float32")
            T.copy(A[0, 0], S)
            T.copy(S, A[0, 0])

    return main


def test_shared_memory_above_the_arch_limit_gives_bytes_and_limit():
    with pytest.raises(KernelError, match=r"needs 262144 bytes of shared memory.*above the "
                                          r"166912 bytes one block may use on sm_80"):
        tilewright.lower(_big_shared(), "cuda -arch=sm_80")


def test_device_assert_and_print_are_gated():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((128,), "float32")
            T.copy(A[0], F)
            T.print(F, msg="tile")
            T.print(A[3], msg="scalar")
            T.device_assert(A[0] > 0.0, msg="positive")

    text = tilewright.lower(main, "cuda").source.text
    kernel = text[text.index('extern "C" __global__'):]  # after the pasted headers
    assert "if (((int)threadIdx.x) == 0)" in kernel  # the tile: one thread prints it
    assert kernel.count(" printf(") == 4  # tile header, tile element, scalar, assertion
    assert "__trap()" in text and "positive" in text
