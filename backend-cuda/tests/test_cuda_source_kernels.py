"""``T.CUDASourceCodeKernel`` on the CUDA backend: the user's source is the kernel file, its
entry is launched by name with the function's parameters, then its shape symbols. TileLang's
four tests (test_tilelang_language_source_kernel.py: inline source, from a file, a bad entry
name listing the entries, a run), the run in the host emulation and on a GPU; NVRTC builds for
sm_80 and sm_90a; a 2-D grid of a symbol with a scalar parameter; a prelude; clusters."""

import re
from pathlib import Path

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright_cuda import arch, executor

CUDA_SOURCE = """
extern "C" __global__ void external_copy(float* A, float* B, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        B[i] = A[i];
    }
}
"""
SM90 = "cuda -arch=sm_90a"


def make_source_kernel(source_code_or_path, entry_name: str, threads=128, **options):
    N = T.dynamic("N")
    per_block = threads if isinstance(threads, int) else threads[0] * threads[1] * threads[2]

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        T.CUDASourceCodeKernel(T.ceildiv(N, per_block), threads=threads,  # the launch's line
                               source_code_or_path=source_code_or_path, entry_name=entry_name,
                               **options)

    return main


LAUNCH_LINE = next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                   if line.endswith("# the launch's line"))


def test_source_kernel_inline_codegen():
    lowered = tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy"), SM90)
    assert re.search(r"__global__\s+void\s+external_copy\s*\(", lowered.source.text)
    assert "B[i] = A[i];" in lowered.source.text
    payload = lowered.source.payload
    assert payload["entry"] == "external_copy"
    assert payload["params"] == [{"kind": "tensor", "param": 0, "name": "A"},
                                 {"kind": "tensor", "param": 1, "name": "B"},
                                 {"kind": "symbol", "name": "N", "dtype": "int32"}]
    assert payload["block"] == [128, 1, 1] and payload["dynamic_smem_bytes"] == 0
    assert eval(payload["grid"][0], {}, {"N": 300}) == 3  # noqa: S307 - the launcher's form


def test_source_kernel_loads_from_file(tmp_path):
    path = tmp_path / "external_copy.cu"
    path.write_text(CUDA_SOURCE)
    for given in (path, str(path)):
        lowered = tilewright.lower(make_source_kernel(given, "external_copy"), SM90)
        assert "B[i] = A[i];" in lowered.source.text


def test_source_kernel_invalid_entry_name_fails_in_lower():
    with pytest.raises(KernelError, match=r"Available entries: external_copy") as info:
        tilewright.lower(make_source_kernel(CUDA_SOURCE, "main_kernel"), SM90)
    assert info.value.location.line == LAUNCH_LINE
    assert "'main_kernel'" in str(info.value)


def test_entry_must_be_unmangled():
    source = CUDA_SOURCE.replace('extern "C" ', "")
    with pytest.raises(KernelError, match=r"must be declared extern \"C\"") as info:
        tilewright.lower(make_source_kernel(source, "external_copy"), SM90)
    assert info.value.location.line == LAUNCH_LINE
    block = 'extern "C" {\n' + source + "}\n"  # an extern "C" block names it unmangled too
    assert "B[i] = A[i];" in tilewright.lower(make_source_kernel(block, "external_copy"),
                                              SM90).source.text


@pytest.mark.emulator
def test_source_kernel_run(tmp_path):
    lowered = tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy"), SM90)
    a = torch.randn(300, dtype=torch.float32)  # three blocks, the last one partly
    b = torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.gpu
def test_source_kernel_run_on_the_gpu():
    kernel = tilewright.compile(make_source_kernel(CUDA_SOURCE, "external_copy"),
                                target="cuda")
    a = torch.randn(300, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    kernel(a, b)
    torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.nvrtc
@pytest.mark.parametrize("name", ["sm_80", "sm_90a"])
def test_source_kernel_compiles_with_nvrtc(name, tmp_path):
    lowered = tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy"),
                               f"cuda -arch={name}")
    cubin, _ = executor.nvrtc_compile(lowered.source.text, arch.get(name), tmp_path)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.nvrtc
def test_source_kernel_builds_a_cubin():
    kernel = tilewright.compile(make_source_kernel(CUDA_SOURCE, "external_copy"), target=SM90)
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"
    assert "B[i] = A[i];" in kernel.get_kernel_source()


# A 2-D grid whose dimensions are shape symbols, a scalar parameter, the symbols after it.
SCALE_SOURCE = """
#include <cuda_fp16.h>
extern "C" __global__ void scale_rows(const float* X, half* Y, float s, int m, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y;
    if (i < m && j < n) {
        Y[i * n + j] = __float2half(X[i * n + j] * s + (float)i);
    }
}
"""


def scale_rows():
    M, N = T.dynamic("M, N")

    @T.prim_func
    def main(X: T.Tensor((M, N), T.float32), Y: T.Tensor((M, N), T.float16), s: T.float32):
        T.CUDASourceCodeKernel(T.ceildiv(N, 32), M, threads=32, source_code_or_path=SCALE_SOURCE,
                               entry_name="scale_rows")

    return main


def test_2d_grid_of_symbols_passes_scalars_then_symbols():
    payload = tilewright.lower(scale_rows(), SM90).source.payload
    assert [p["kind"] for p in payload["params"]] == ["tensor", "tensor", "scalar", "symbol",
                                                     "symbol"]
    assert [p["name"] for p in payload["params"]] == ["X", "Y", "s", "M", "N"]
    assert payload["params"][2]["dtype"] == "float32"
    assert eval(payload["grid"][0], {}, {"N": 33}) == 2 and payload["grid"][1] == "M"  # noqa: S307


@pytest.mark.emulator
def test_2d_grid_of_symbols_runs(tmp_path):
    lowered = tilewright.lower(scale_rows(), SM90)
    x = torch.randn(5, 70)
    y = torch.full((5, 70), float("nan"), dtype=torch.float16)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y, 0.5)
    want = (x * 0.5 + torch.arange(5.0)[:, None]).half()
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.nvrtc
def test_2d_grid_of_symbols_compiles_with_nvrtc(tmp_path):
    lowered = tilewright.lower(scale_rows(), SM90)
    executor.nvrtc_compile(lowered.source.text, arch.get("sm_90a"), tmp_path)


PRELUDE = "__device__ __forceinline__ float twice(float x) { return 2.0f * x; }"
TWICE_SOURCE = CUDA_SOURCE.replace("B[i] = A[i];", "B[i] = twice(A[i]);")


@pytest.mark.emulator
def test_prelude_goes_first(tmp_path):
    lowered = tilewright.lower(make_source_kernel(TWICE_SOURCE, "external_copy",
                                                  prelude=PRELUDE), SM90)
    text = lowered.source.text
    assert text.index("twice(float x)") < text.index("external_copy")
    a = torch.randn(130)
    b = torch.full_like(a, float("nan"))
    hostemu.run(text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, 2 * a, rtol=0, atol=0)


def test_cluster_dims_declared_on_the_entry():
    lowered = tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy",
                                                  cluster_dims=2), SM90)
    assert "__cluster_dims__(2, 1, 1) external_copy(" in lowered.source.text
    assert lowered.source.payload["cluster_dims"] == [2, 1, 1]


def test_cluster_dims_refused_below_sm_90():
    with pytest.raises(KernelError, match=r"cluster_dims=\[2, 1, 1\] needs thread-block "
                       r"clusters .* the target is sm_80") as info:
        tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy", cluster_dims=2),
                         "cuda -arch=sm_80")
    assert info.value.location.line == LAUNCH_LINE


@pytest.mark.emulator
def test_cluster_kernel_runs(tmp_path):
    source = CUDA_SOURCE.replace("B[i] = A[i];", "B[i] = A[i] + (float)(blockIdx.x % 2);")
    lowered = tilewright.lower(make_source_kernel(source, "external_copy", cluster_dims=2),
                               SM90)
    a = torch.randn(512)
    b = torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, a + (torch.arange(512) // 128 % 2).float(), rtol=0, atol=0)


@pytest.mark.nvrtc
def test_cluster_kernel_compiles_with_nvrtc(tmp_path):
    lowered = tilewright.lower(make_source_kernel(CUDA_SOURCE, "external_copy",
                                                  cluster_dims=(2, 1)), SM90)
    executor.nvrtc_compile(lowered.source.text, arch.get("sm_90a"), tmp_path)


@pytest.mark.emulator
@pytest.mark.parametrize("threads", [48, (8, 4, 2)])
def test_any_block_shape(threads, tmp_path):
    """The block is the user's to schedule: any size (not only whole warps), up to 3-D."""
    source = CUDA_SOURCE.replace(
        "int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);",
        "int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
        "    int i = (int)(blockIdx.x * (blockDim.x * blockDim.y * blockDim.z) + t);")
    lowered = tilewright.lower(make_source_kernel(source, "external_copy", threads=threads),
                               SM90)
    block = list(threads) if isinstance(threads, tuple) else [threads, 1, 1]
    assert lowered.source.payload["block"] == block
    a = torch.randn(200)
    b = torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    torch.testing.assert_close(b, a, rtol=0, atol=0)
