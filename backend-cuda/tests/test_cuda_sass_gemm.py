"""The machine code of the standard GEMM (1024^3, blocks 128x128x32, 3 stages, float16) built
by nvcc: cp.async (LDGSTS), ldmatrix (LDSM, .MT for the k-major B tile), tensor-core HMMA, one
barrier in the main loop, and registers without spills for 128 and 256 threads. Each cubin is
built once per module."""

import re

import pytest
import sass
import tilewright
from test_cuda_pipeline import gemm
from tilewright_cuda import arch, executor

pytestmark = [pytest.mark.nvcc, pytest.mark.sass]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    built = {}

    def get(threads: int, arch_name: str = "sm_80"):
        if (threads, arch_name) not in built:
            source = tilewright.lower(gemm(1024, 1024, 1024, threads=threads),
                                      f"cuda -arch={arch_name}").source.text
            workdir = tmp_path_factory.mktemp(f"gemm{threads}_{arch_name}")
            cubin, log = executor.nvcc_compile(source, arch.get(arch_name), workdir)
            built[threads, arch_name] = (sass.dump(cubin), log)
        return built[threads, arch_name]

    return get


def _count(text: str, opcode: str) -> int:
    return len(re.findall(rf"\s{re.escape(opcode)}[\s.]", text))


def _resources(log: str) -> tuple[int, int]:
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", log).group(1))
    return registers, spills


@pytest.mark.parametrize("threads", [128, 256])
def test_standard_gemm_sm_80_instructions(build, threads):
    code, log = build(threads)
    counts = {op: _count(code, op) for op in ("LDGSTS", "LDSM", "HMMA", "BAR", "LDS", "STS")}
    # each stage: A 128x32 and B 32x128 in 16-byte chunks, 4 + 4 per thread at 128 threads
    assert counts["LDGSTS"] >= 2 * (8 * 128 // threads)
    assert "LDSM.16.M88.4" in code and "LDSM.16.MT88.4" in code  # A plain, B transposed
    # a warp tile of 64x64 (128 threads) or 64x32 (256) per k32: 64 or 32 HMMA.16816
    per_stage = 64 if threads == 128 else 32
    assert "HMMA.16816.F32" in code and counts["HMMA"] % per_stage == 0, counts
    # fragments come from ldmatrix only: no element-wise shared loads or stores
    assert counts["STS"] == 0 and "LDS.U16" not in code, counts
    # the epilogue stores each row's pair of accumulators as one 32-bit half2
    assert "STG.E.U16" not in code and _count(code, "STG") == 64 * 128 // threads
    registers, spills = _resources(log)
    assert spills == 0 and registers <= 255, log
    print(f"sm_80 gemm 128x128x32 3 stages, {threads} threads: {registers} registers, "
          f"{spills} bytes spilled, SASS {counts}")


def test_standard_gemm_sm_90a_builds_without_spills(build):
    code, log = build(128, "sm_90a")
    # the tiles arrive through TMA (a producer warpgroup); the 32-wide k-tiles take mma.sync
    assert "UTMALDG.2D" in code and "LDSM" in code and "HMMA.16816.F32" in code
    assert _resources(log)[1] == 0, log
