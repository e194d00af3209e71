"""Every example kernel builds to a cubin for sm_80 with nvcc, without a GPU and without
register spills; the PTX holds the instructions the lowering chose; compiler failures are
reported with the failing line and a repro command."""

from __future__ import annotations

import re
import subprocess

import cuda_cases as kernels
import pytest
from tilewright.jit import compile as tw_compile
from tilewright_cuda import executor


def _cubin_log(kernel) -> str:
    with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
        assert f.read(4) == b"\x7fELF"
    with open(f"{kernel.artifact_dir}/build.log") as f:
        return f.read()


@pytest.mark.nvcc
@pytest.mark.parametrize("name", kernels.NAMES)
def test_nvcc_builds_sm_80_without_spills(name):
    kernel = tw_compile(kernels.func(name), target="cuda -arch=sm_80", execution_backend="nvcc")
    log = _cubin_log(kernel)
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert registers and max(registers) <= 255
    assert spills and max(spills) == 0, log


def _ptx(name, arch, tmp_path):
    import tilewright

    lowered = tilewright.lower(kernels.func(name), f"cuda -arch={arch}")
    (tmp_path / "k.cu").write_text(lowered.source.text)
    cmd = [executor.nvcc_path(), "-ptx", f"-arch={arch}", "-std=c++17", "-o",
           str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")]
    subprocess.run(cmd, check=True, capture_output=True)
    return (tmp_path / "k.ptx").read_text()


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_has_tensor_core_mma(arch, tmp_path):
    # 32 tiles of 16x8 per warp, block_K 32 = 2 x k16, fully unrolled
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
                          _ptx("gemm", arch, tmp_path))) == 64
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in _ptx("gemm_bf16", arch,
                                                                         tmp_path)


@pytest.mark.nvcc
def test_ptx_has_warp_shuffles_and_atomics(tmp_path):
    assert "shfl.sync.bfly.b32" in _ptx("softmax", "sm_90a", tmp_path)
    assert re.search(r"(red|atom)\.global\.add\.f32", _ptx("gemm_splitk", "sm_90a", tmp_path))


@pytest.mark.nvcc
def test_compiler_failure_shows_the_line_and_a_repro_command(tmp_path):
    from tilewright_cuda import arch

    source = 'extern "C" __global__ void k(float* a) {\n  a[0] = undefined_name;\n}\n'
    with pytest.raises(executor.CompileError) as info:
        executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path)
    text = str(info.value)
    assert "kernel.cu:2" in text and "a[0] = undefined_name;" in text
    assert "reproduce with: cd" in text and "nvcc -cubin" in text
