"""wgmma groups kept in flight across the k-tiles of a ``T.Pipelined`` loop (transforms/pipeline):
with 3+ stages each gemm retires all but its own group (``wgmma.wait_group 1``) and the
cp.async refill runs one stage less ahead, so it never overwrites a tile a wgmma in flight
reads. The host emulation retires wgmma groups at their wait_group and aborts when shared
memory under one in flight changed; a schedule broken on purpose shows that it does."""

import re
import subprocess
import sys
from pathlib import Path

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
from test_cuda_wgmma import gemm
from tilewright_cuda import arch, executor

TARGET = "cuda -arch=sm_90a"
TESTS = Path(__file__).resolve().parent


def _loop(text: str) -> str:
    kernel = text[text.index('extern "C" __global__'):]
    return kernel[kernel.index("for (int ko"):]


def test_pipelined_wgmma_keeps_one_group_in_flight():
    # the cp.async form (the TMA form below and in test_cuda_tma_pipeline.py)
    text = tilewright.lower(gemm(K=512, stages=4), TARGET,
                            {"cuda.disable_tma_lower": True}).source.text
    loop = _loop(text)
    body, after = loop.split("tw_wgmma_wait<1>();", 1)
    assert "tw_cp_async_wait<1>();" in body  # 4 stages, refilled 2 ahead: 1 group may fly
    assert "if (ko < 6) {" in body and "tw_wgmma_wait<0>" not in body  # 8 k-tiles
    assert after.index("tw_wgmma_wait<0>();") < after.index("tw_cp_async_wait<0>();")
    # one barrier per k-tile: the landed stage is fenced to the async proxy before it
    assert body.count("__syncthreads();") == 1
    assert body.index("tw_fence_proxy_async();") < body.index("__syncthreads();")


def test_tma_pipeline_keeps_one_group_in_flight():
    # issued in order by thread 0 (the warp-specialised form: test_cuda_tma_pipeline.py)
    text = tilewright.lower(gemm(K=512, stages=4), TARGET,
                            {"cuda.disable_warp_specialized": True}).source.text
    body, after = _loop(text).split("tw_wgmma_wait<1>();", 1)
    assert "tw_tma_load_2d(" in body and "if (ko < 6) {" in body  # refilled 2 stages ahead
    assert "tw_wgmma_wait<0>" not in body and "tw_wgmma_wait<0>();" in after
    assert body.count("__syncthreads();") == 1


@pytest.mark.parametrize("kwargs", [{"stages": 2}, {"stages": 1}])
def test_fewer_than_three_stages_wait_for_each_gemm(kwargs):
    text = tilewright.lower(gemm(**kwargs), TARGET).source.text
    assert "tw_wgmma_wait<1>" not in text and "tw_wgmma_wait<0>();" in _loop(text)


def test_attention_scores_read_element_wise_wait_for_their_gemm():
    sys.path.insert(0, str(TESTS.parent / "bench"))
    import kernels

    text = tilewright.lower(kernels.attention.fn(1, 2, 512, 64, num_stages=3), TARGET)
    assert "tw_wgmma_wait<1>" not in text.source.text


@pytest.mark.nvrtc
@pytest.mark.sass
def test_overlapped_wgmma_sass_waits_for_one_group_without_spills():
    text = tilewright.lower(gemm(stages=4, N=512, bN=256), TARGET).source.text
    cubin, log = executor.nvrtc_compile(text, arch.get("sm_90a"), ".")
    code = sass.dump(cubin)
    assert "HGMMA.64x256x16.F32" in code
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in code and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in code
    assert "0 bytes spill stores" in log and not re.search("serializ", log, re.IGNORECASE)


RUN = """
import sys, json, torch
sys.path.insert(0, {tests!r})
import hostemu
from pathlib import Path
text = Path(sys.argv[1]).read_text()
launch = json.loads(Path(sys.argv[2]).read_text())
torch.manual_seed(0)
a, b = torch.randn(256, 256).half(), torch.randn(256, 256).half()
c = torch.full((256, 256), float("nan"))
hostemu.run(text, launch, Path(sys.argv[3]), a, b, c)
torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-3)
print("MATCHES")
"""


def _emulate_in_subprocess(text: str, launch: dict, tmp_path) -> subprocess.CompletedProcess:
    return hostemu.run_script(RUN, text, launch, tmp_path)


@pytest.mark.emulator
def test_emulation_catches_a_tile_overwritten_under_a_wgmma_in_flight(tmp_path):
    # two stages refill the version the previous gemm read: correct only if it was retired
    lowered = tilewright.lower(gemm(K=256, stages=2), TARGET)
    text, launch = lowered.source.text, lowered.source.payload
    good = _emulate_in_subprocess(text, launch, tmp_path)
    assert good.returncode == 0 and "MATCHES" in good.stdout, good.stdout + good.stderr
    loop = _loop(text)
    broken = text.replace(loop, loop.replace("tw_wgmma_wait<0>();", "tw_wgmma_wait<1>();", 1))
    assert broken != text
    bad = _emulate_in_subprocess(broken, launch, tmp_path)
    if "overwritten before its wait_group" not in bad.stdout:
        # once more: under a heavy load, g++ itself has been killed before the run (an empty
        # stdout); a missing diagnostic fails both times
        bad = _emulate_in_subprocess(broken, launch, tmp_path)
    assert bad.returncode != 0
    assert "overwritten before its wait_group" in bad.stdout, bad.stdout + bad.stderr


def _two_gemms(then: str):
    """C1 = A B, then C2 = A B, then ``then`` before both leave: ``"scale C1"`` (registers
    only, not C2's), ``"C1 to shared"`` (a shared store), ``"scale C2"`` (C2's accumulator)."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32"), D: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_shared((64, 64), "float32")
            C1 = T.alloc_fragment((64, 64), "float32")
            C2 = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C1, clear_accum=True)
            T.gemm(A_s, B_s, C2, clear_accum=True)
            if then == "scale C1":
                for i, j in T.Parallel(64, 64):
                    C1[i, j] *= 2
            elif then == "C1 to shared":
                T.copy(C1, S)
            else:
                for i, j in T.Parallel(64, 64):
                    C2[i, j] *= 2
            T.copy(C1, C)
            T.copy(C2, D)

    return main


@pytest.mark.parametrize(("then", "deferred"), [("scale C1", True), ("C1 to shared", False),
                                                ("scale C2", False)])
def test_wgmma_wait_deferred_only_past_register_work_on_other_fragments(then, deferred):
    # transforms/wgmma_wait: C2's wait moves past work that writes only registers other than
    # C2's; a shared store or a read of C2 keeps it right after the gemm (C1's wait stays:
    # the next statement is a gemm)
    text = tilewright.lower(_two_gemms(then), TARGET).source.text
    kernel = text[text.index('extern "C" __global__'):]
    first = kernel.index("tw_gemm_wgmma<")
    second = kernel.index("tw_gemm_wgmma<", first + 1)
    assert kernel.index("tw_wgmma_wait<0>();", first) < second
    between = kernel[second:kernel.index("tw_wgmma_wait<0>();", second)]
    after_issue = between[between.index(";") + 1:]
    assert ("C1_ptr[" in after_issue) == deferred and "C2_ptr[" not in after_issue
