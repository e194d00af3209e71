"""Bad input to the CUDA backend gets one clear compile-time error naming the problem (and the
user's line where there is one): shared memory above the architecture's limit, an unknown
architecture, a compiler failure (failing generated lines and a repro command), and gemm tiles
or thread counts the tensor-core policy cannot use."""

import re
import shutil
import subprocess

import pytest
import tilewright
import tilewright.language as T
from tilewright.errors import KernelError, TargetError, UnsupportedOpError
from tilewright_cuda import arch, executor
from tilewright_cuda.analysis.gemm_fit import mma_policy_error


def smem_kernel(elements: int):
    """Two float32 shared tiles of ``elements`` elements each, copied through."""

    @T.prim_func
    def big_smem(X: T.Tensor((elements,), "float32"), Y: T.Tensor((elements,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((elements,), "float32")
            b = T.alloc_shared((elements,), "float32")
            T.copy(X[0], a)
            T.copy(a, b)
            T.copy(b, Y[0])

    return big_smem


def test_shared_memory_above_the_limit_names_bytes_and_limit():
    # 2 x 90000 bytes: above sm_80's 166912 opt-in limit, below sm_90a's 232448
    func = smem_kernel(22500)
    with pytest.raises(KernelError) as info:
        tilewright.lower(func, "cuda -arch=sm_80")
    text = str(info.value)
    assert "180224 bytes of shared memory" in text  # two 128-byte aligned 90000-byte tiles
    assert "a 90000" in text and "b 90000" in text
    assert "166912 bytes one block may use on sm_80" in text
    assert "test_cuda_errors.py" in text  # the user's file and line
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert lowered.source.payload["dynamic_smem_bytes"] == 180224


def test_shared_memory_limit_on_sm_90a():
    with pytest.raises(KernelError, match=r"232448 bytes one block may use on sm_90a"):
        tilewright.lower(smem_kernel(30000), "cuda -arch=sm_90a")


@pytest.mark.parametrize("name", ["sm_123x", "sm_91", "compute_80", "80"])
def test_unknown_arch_lists_the_known_ones(name):
    with pytest.raises(TargetError) as info:
        tilewright.lower(smem_kernel(128), f"cuda -arch={name}")
    text = str(info.value)
    assert f"unknown CUDA architecture {name!r}" in text
    assert all(known in text for known in ("sm_80", "sm_90a", "sm_120"))


def test_unknown_arch_in_the_environment(monkeypatch):
    monkeypatch.setenv(arch.ENV, "sm_999")
    if arch.visible_gpu_arch() is not None:
        pytest.skip("a visible GPU decides the architecture of plain 'cuda'")
    with pytest.raises(TargetError, match=r"unknown CUDA architecture 'sm_999'.*TILEWRIGHT"):
        tilewright.lower(smem_kernel(128), "cuda")


BROKEN = 'extern "C" __global__ void k(float* a) {\n  float x = 1.0f;\n' \
         '  a[0] = undefined_name + x;\n}\n'


@pytest.mark.nvrtc
def test_nvrtc_failure_shows_the_lines_and_a_repro_command(tmp_path):
    with pytest.raises(executor.CompileError) as info:
        executor.nvrtc_compile(BROKEN, arch.get("sm_80"), tmp_path)
    text = str(info.value)
    assert text.startswith("NVRTC failed to compile the generated CUDA (kept at ")
    assert 'kernel.cu:3: error: identifier "undefined_name" is undefined' in text
    assert ">     3 |   a[0] = undefined_name + x;" in text  # the line, marked, numbered
    assert "      2 |   float x = 1.0f;" in text            # and its neighbours
    repro = re.search(r"reproduce with: (.*)", text).group(1)
    assert re.match(r"cd \S+ && \S*nvcc -cubin -gencode=arch=compute_80,code=sm_80 ", repro)


@pytest.mark.nvcc
@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_repro_command_reproduces_the_failure_after_the_build_folder_is_gone(compiler,
                                                                             tmp_path):
    if compiler == "nvrtc" and not executor.nvrtc_available():
        pytest.skip("NVRTC unavailable")
    build = tmp_path / "build"
    build.mkdir()
    compile_ = executor.nvrtc_compile if compiler == "nvrtc" else executor.nvcc_compile
    with pytest.raises(executor.CompileError) as info:
        compile_(BROKEN, arch.get("sm_90a"), build)
    shutil.rmtree(build)  # the cache removes a failed build's staging folder
    repro = re.search(r"reproduce with: (.*)", str(info.value)).group(1)
    result = subprocess.run(repro, shell=True, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert 'kernel.cu(3): error: identifier "undefined_name" is undefined' in result.stdout + \
        result.stderr


# -- gemm policy ----------------------------------------------------------------------------
def gemm_kernel(bm, bn, bk, threads, dtype="float16", accum="float32"):
    M, N, K = 2 * bm, 2 * bn, 2 * bk

    @T.prim_func
    def policy_gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                    C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.serial(T.ceildiv(K, bk)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)  # the gemm line
            T.copy(C_f, C[by * bm, bx * bn])

    return policy_gemm


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_tile_not_a_multiple_of_the_instruction(dtype):
    with pytest.raises(UnsupportedOpError) as info:
        tilewright.lower(gemm_kernel(24, 64, 32, 128, dtype), "cuda -arch=sm_80")
    text = str(info.value)
    assert f"T.gemm of {dtype} into float32 accumulators on backend 'cuda' (sm_80)" in text
    assert "M x N x K = 24 x 64 x 32" in text
    assert "instruction shape 16 x 8 x 16" in text
    assert "# the gemm line" in text and "test_cuda_errors.py" in text


def test_gemm_k_not_a_multiple_of_16():
    with pytest.raises(UnsupportedOpError, match=r"64 x 64 x 8 is not a multiple"):
        tilewright.lower(gemm_kernel(64, 64, 8, 128), "cuda -arch=sm_90a")


def test_gemm_threads_not_matching_the_warps():
    with pytest.raises(UnsupportedOpError) as info:
        tilewright.lower(gemm_kernel(16, 16, 16, 128), "cuda -arch=sm_80")
    text = str(info.value)
    assert "threads=128 gives 4 warps" in text
    assert "2 output tiles of 16 x 8 (1 x 2)" in text
    assert "use threads in {32, 64}" in text
    assert "# the gemm line" in text
    # the suggested thread counts compile
    tilewright.lower(gemm_kernel(16, 16, 16, 64), "cuda -arch=sm_80")


@pytest.mark.parametrize("target, args", [
    ("cuda -arch=sm_75", (24, 64, 32, 128)),                       # no mma.sync m16n8k16
    ("cuda -arch=sm_80", (24, 20, 12, 128, "float32", "float32")),  # float32 gemm
    ("cuda -arch=sm_80", (24, 20, 16, 128, "float16", "float16")),  # float16 accumulator
])
def test_gemms_not_asking_for_tensor_cores_take_the_thread_gemm(target, args):
    text = tilewright.lower(gemm_kernel(*args), target).source.text
    assert "tw_gemm_mma" not in text


def test_policy_error_is_none_where_mma_fits():
    import tvm_ffi
    from tilewright.ir import decode
    from tvm import tirx

    calls = []
    func = gemm_kernel(64, 64, 32, 128)
    tvm_ffi.structural_walk(func.body, (tirx.Evaluate, lambda s: calls.append(decode(s))))
    gemm = next(c for c in calls if c is not None and c.name == "gemm")
    assert mma_policy_error(gemm, arch.get("sm_80"), 128) is None
    assert "gives 3 warps" in mma_policy_error(gemm, arch.get("sm_80"), 96)
    assert mma_policy_error(gemm, arch.get("sm_75"), 96) is None


def test_a_symbol_only_inside_a_nonlinear_dimension_is_named():
    # a symbol in a linear dimension (n * 4) the launcher solves; one in n * n it cannot
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n * n,), "int32")):
        with T.Kernel(T.ceildiv(n * n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n * n:
                    A[bx * 128 + i] = n

    with pytest.raises(KernelError, match=r"launches the kernel with the symbol n"):
        tilewright.lower(main, "cuda -arch=sm_90a")




def test_an_error_in_a_dialect_kernel_names_the_users_line():
    """A kernel written with the CUDA dialect (``tilewright_cuda.language``): the refusal of
    its block size (above a CUDA block's 1024 threads) names the user's ``with T.Kernel``
    line, not the dialect's own (its frames are marked internal,
    ``tilewright.errors.mark_internal``; the span was dialect.py's)."""
    import tilewright_cuda.language as D

    @D.prim_func
    def too_many(A: D.Tensor((64,), "float32")):
        with D.Kernel(1, threads=2048):
            A[0] = 1.0

    with pytest.raises(KernelError) as info:
        tilewright.lower(too_many, "cuda -arch=sm_90a")
    assert info.value.location.filename == __file__
    assert "with D.Kernel(1, threads=2048)" in str(info.value)
    assert "at most 1024" in str(info.value)
