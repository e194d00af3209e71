"""``T.StridedTensor`` parameters on CUDA: stride symbols read from the arguments at launch
(``[param, dim, 1]`` in the launch description), the 16-byte paths (cp.async, 128-bit copies,
TMA) taken only where the row stride provably keeps chunks aligned, and the host emulation
refusing a chunk that is not (the GPU's misaligned-address fault)."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_sdk.conformance.catalogue import cases

STRIDED = [c for c in cases(["strided_tensors"])]


@pytest.mark.emulator
@pytest.mark.parametrize("case", STRIDED, ids=[c.id for c in STRIDED])
def test_strided_conformance_cases_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, "cuda -arch=sm_90a", tmp_path)


def rows_into_shared(stride):
    M, N = 32, 64

    @T.prim_func
    def main(A: T.StridedTensor((M, N), (stride, 1), T.float16),
             B: T.Tensor((M, N), T.float16)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((M, N), T.float16)
            T.copy(A, S)
            T.copy(S, B)

    return main


def test_chunks_of_a_strided_tensor_need_a_provably_aligned_row_stride():
    symbolic = tilewright.lower(rows_into_shared(T.symbolic("s")), "cuda -arch=sm_90a")
    assert "tw_cp_async16" not in symbolic.source.text.split('extern "C"')[-1]
    assert symbolic.source.payload["symbols"]["s"] == [0, 0, 1]  # A's stride 0, at launch
    aligned = tilewright.lower(rows_into_shared(72), "cuda -arch=sm_90a")  # 144 bytes
    assert "tw_cp_async16" in aligned.source.text.split('extern "C"')[-1]
    odd = tilewright.lower(rows_into_shared(68), "cuda -arch=sm_90a")  # 136 bytes
    assert "tw_cp_async16" not in odd.source.text.split('extern "C"')[-1]


@pytest.mark.emulator
def test_a_strided_tensor_runs_with_its_strides_in_host_emulation(tmp_path):
    lowered = tilewright.lower(rows_into_shared(T.symbolic("s")), "cuda -arch=sm_90a")
    wide = torch.randn(32, 100).half()
    a, b = wide[:, 3:67], torch.full((32, 64), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b)
    assert torch.equal(b, a)


MISALIGNED = """
import json, sys, torch
sys.path.insert(0, {tests!r})
import hostemu
from pathlib import Path
wide = torch.randn(32 * 72 + 8).half()
a = wide[1:1 + 32 * 72].view(32, 72)[:, :64]  # rows 144 bytes apart, from a 2-byte offset
b = torch.empty(32, 64).half()
hostemu.run(Path(sys.argv[1]).read_text(), json.loads(Path(sys.argv[2]).read_text()),
            Path(sys.argv[3]), a, b)
print("RAN")
"""


@pytest.mark.emulator
def test_the_emulation_faults_on_a_misaligned_chunk_as_the_gpu_does(tmp_path):
    """The runtime passes a misaligned tensor as an aligned copy; called around it (as a
    bundle harness could), the 16-byte copy the code assumes aligned is refused."""
    lowered = tilewright.lower(rows_into_shared(72), "cuda -arch=sm_90a")
    done = hostemu.run_script(MISALIGNED, lowered.source.text, lowered.source.payload, tmp_path)
    assert done.returncode != 0 and "RAN" not in done.stdout
    assert "cp.async of 16 bytes from" in done.stderr and "not 16-byte aligned" in done.stderr
