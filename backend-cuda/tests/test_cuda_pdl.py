"""TileLang's programmatic dependent launch and launch bounds on CUDA: ``T.pdl_trigger`` /
``T.pdl_sync`` are ``griddepcontrol`` on sm_90+ and nothing below; a kernel waiting with
``T.pdl_sync`` is launched with programmatic stream serialisation and without
``__restrict__`` parameters, and refuses ``T.__ldg``; ``T.annotate_min_blocks_per_sm(n)`` is
``__launch_bounds__(threads, n)``."""

import re
import subprocess

import hostemu
import pytest
import tilewright
import tilewright.language as T
from tilewright.errors import KernelError
from tilewright.runtime.cuda import check_launch
from tilewright_cuda import executor
from tilewright_sdk.conformance.catalogue import cases


def trigger_then_sync(N=256, block=128, ldg=False, blocks_per_sm=None):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            if blocks_per_sm is not None:
                T.annotate_min_blocks_per_sm(blocks_per_sm)
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + 1.0
            T.pdl_trigger()
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            T.pdl_sync()
            for i in T.Parallel(block):
                C[bx * block + i] = (T.__ldg(B[bx * block + i]) if ldg else B[bx * block + i]) \
                    * 2.0

    return main


def test_griddepcontrol_on_sm_90_and_a_dependent_launch():
    lowered = tilewright.lower(trigger_then_sync(), "cuda -arch=sm_90a")
    text, launch = lowered.source.text, lowered.source.payload
    assert "griddepcontrol.launch_dependents" in text and "griddepcontrol.wait" in text
    first = text[text.index("main_0_kernel(float* __restrict__ A_ptr, float* __restrict__ "
                            "B_ptr) {"):]
    second = text[text.index("main_1_kernel(float* B_ptr, float* C_ptr) {"):]
    assert "tw_pdl_trigger();" in first[:first.index("main_1_kernel")]
    assert "tw_pdl_sync();" in second and "tw_pdl_trigger" not in second
    # only the waiting kernel is a dependent launch, the one whose parameters lost
    # __restrict__ (the first kernel keeps it)
    assert [k.get("pdl", False) for k in launch["kernels"]] == [False, True]
    check_launch(launch)


def test_nothing_to_order_below_sm_90():
    lowered = tilewright.lower(trigger_then_sync(), "cuda -arch=sm_80")
    assert "griddepcontrol" not in lowered.source.text and "tw_pdl" not in lowered.source.text
    assert not any(k.get("pdl") for k in lowered.source.payload["kernels"])


def test_a_read_only_load_is_refused_with_pdl_sync():
    with pytest.raises(KernelError, match=r"T.pdl_sync in a kernel that reads through "
                                          r"T.__ldg") as err:
        tilewright.lower(trigger_then_sync(ldg=True), "cuda -arch=sm_90a")
    assert "test_cuda_pdl.py" in str(err.value)  # the user's line
    # below sm_90 nothing overlaps: the read-only path stays
    text = tilewright.lower(trigger_then_sync(ldg=True), "cuda -arch=sm_80").source.text
    assert "__ldg((&(B_ptr" in text


def test_a_launch_description_checks_the_pdl_flag():
    launch = tilewright.lower(trigger_then_sync(), "cuda -arch=sm_90a").source.payload
    bad = {**launch, "kernels": [{**launch["kernels"][1], "pdl": "yes"}]}
    with pytest.raises(ValueError, match="pdl 'yes'"):
        check_launch(bad)
    both = {**launch, "kernels": [{**launch["kernels"][1], "cooperative": True}]}
    with pytest.raises(ValueError, match="a cooperative launch is not a dependent one"):
        check_launch(both)


def ptx(func, tmp_path, arch="sm_90a") -> str:
    """The PTX nvcc makes of ``func``'s CUDA source."""
    (tmp_path / "k.cu").write_text(tilewright.lower(func, f"cuda -arch={arch}").source.text)
    subprocess.run([executor.nvcc_path(), "-ptx", f"-arch={arch}", "-std=c++17", "-o",
                    str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")], check=True,
                   capture_output=True)
    return (tmp_path / "k.ptx").read_text()


@pytest.mark.nvcc
def test_griddepcontrol_builds_with_nvcc(tmp_path):
    text = ptx(trigger_then_sync(), tmp_path)
    assert "griddepcontrol.launch_dependents;" in text and "griddepcontrol.wait;" in text


def min_blocks(n):
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 128), "float32"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(128, threads=128) as bx:
            T.annotate_min_blocks_per_sm(n)
            for i in T.serial(128):
                C[bx, i] = A[bx, i] + B[bx, i]

    return main


@pytest.mark.parametrize("n", [1, 2, 4])
def test_min_blocks_per_sm_in_the_launch_bounds(n):
    text = tilewright.lower(min_blocks(n), "cuda -arch=sm_90a").source.text
    assert f"__launch_bounds__(128, {n})" in text


@pytest.mark.parametrize("n", [0, 33, 1.5, True, "2"])
def test_a_bad_block_count_is_refused_at_the_line(n):
    with pytest.raises(KernelError, match=r"T.annotate_min_blocks_per_sm takes an int from 1 "
                                          r"to 32") as err:
        min_blocks(n)
    assert "test_cuda_pdl.py" in str(err.value)


@pytest.mark.nvcc
def test_min_blocks_per_sm_reaches_ptxas(tmp_path):
    assert re.search(r"\.minnctapersm 4", ptx(min_blocks(4), tmp_path))


CASES = cases(["pdl_sequence"])


@pytest.mark.emulator
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_pdl_rows_in_host_emulation(case, arch, tmp_path):
    hostemu.run_case(case, f"cuda -arch={arch}", tmp_path)


def ws_gemm(blocks, M=256, N=256, K=256, bm=128, bn=128, bk=64):
    """A GEMM the backend warp-specialises on sm_90a (a producer warpgroup, setmaxnreg)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            T.annotate_min_blocks_per_sm(blocks)
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[ko * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def test_min_blocks_per_sm_must_match_the_register_budgets_of_setmaxnreg():
    text = tilewright.lower(ws_gemm(1), "cuda -arch=sm_90a").source.text
    assert "tw_setmaxnreg_inc" in text and "__launch_bounds__(384, 1)" in text
    with pytest.raises(KernelError, match=r"T.annotate_min_blocks_per_sm\(2\) in a kernel whose "
                                          r"warpgroups set their registers \(setmaxnreg\) for "
                                          r"1 block\(s\) per SM: give the pass config "
                                          r"cuda.blocks_per_sm=2") as err:
        tilewright.lower(ws_gemm(2), "cuda -arch=sm_90a")
    assert "test_cuda_pdl.py" in str(err.value)  # the kernel's line
    text = tilewright.lower(ws_gemm(2), "cuda -arch=sm_90a", {"cuda.blocks_per_sm": 2}).source.text
    assert "__launch_bounds__(384, 2)" in text
