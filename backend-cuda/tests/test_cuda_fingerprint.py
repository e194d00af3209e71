"""The disk-cache key holds what produced a cubin besides the source: the executors'
fingerprints name the compiler's version, the CUDA headers' versions and the options, and
changing any of them, or the architecture, builds the kernel again."""

from __future__ import annotations

import pytest
import tilewright
import tilewright.language as T
from tilewright_cuda import executor


def _kernel():
    @T.prim_func
    def twice(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as _bx:
            for i in T.Parallel(64):
                B[i] = A[i] * 2.0

    return twice


def _entries(cache_dir) -> int:
    return len(list((cache_dir / "kernels").glob("*/*")))


@pytest.mark.nvrtc
def test_nvrtc_fingerprint_names_compiler_headers_and_options():
    text = executor.NVRTC.fingerprint()
    assert text.startswith("NVRTC ") and "CUDA_VERSION " in text and "CCCL_VERSION " in text
    assert "-std=c++17" in text


@pytest.mark.nvcc
def test_nvcc_fingerprint_names_its_release_and_build():
    text = executor.NVCC.fingerprint()
    assert "release" in text and "Build cuda_" in text and "CUDA_VERSION " in text


@pytest.mark.nvrtc
@pytest.mark.parametrize("change", ["compiler", "headers", "arch"])
def test_a_new_toolchain_or_arch_builds_again(change, cache_dir, monkeypatch):
    def build(arch="sm_80"):
        tilewright.compile(_kernel(), target=f"cuda -arch={arch}", execution_backend="nvrtc")

    build()
    build()
    assert _entries(cache_dir) == 1  # the second compile came from the cache
    if change == "compiler":
        monkeypatch.setattr(executor, "nvrtc_version", lambda: "NVRTC 99.0")
        build()
    elif change == "headers":
        monkeypatch.setattr(executor, "header_versions", lambda: "CUDA_VERSION 99000")
        build()
    else:
        build("sm_90a")
    assert _entries(cache_dir) == 2
