"""cp.async groups and the grid barrier of the CUDA dialect.

- ``T.ptx_commit_group`` / ``T.ptx_wait_group(n)`` (cp.async.commit_group / wait_group) after
  ``T.ptx_cp_async``: the wait lands the copies for barrier insertion (the intrinsics table),
  and a statement touching a tile whose copies nothing has waited for yet is refused at its
  line, naming the copy;
- ``T.sync_grid()``: cooperative groups' grid barrier; the launch description says
  ``cooperative`` (the launcher then uses cuLaunchCooperativeKernel after checking that the
  grid fits on the GPU at once); the host emulation runs the blocks at once.

The kernels are dialect_cases' (``grouped_copies``, ``grid_sum``), which
test_cuda_dialect_emulate.py runs on the host and the GPU checks on the device."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from dialect_cases import grid_sum, grouped_copies, prefetched_copies
from tilewright.errors import KernelError
from tilewright.jit import compile as tw_compile
from tilewright.runtime import load
from tilewright.runtime.cuda import check_launch, cooperative_grid_error
from tilewright_cuda import arch, executor


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def test_a_wait_group_lands_the_copies_before_the_block_barrier():
    lowered = tilewright.lower(grouped_copies(), "cuda -arch=sm_80")
    text = _kernel(lowered.source.text)
    wait = text.index("tw_cp_async_wait<0>();")
    assert text.index("tw_cp_async_bytes<16>(") < text.index("tw_cp_async_commit();") < wait
    assert "__syncthreads();" in text[wait:]  # before the reads of S


@pytest.mark.parametrize("kw, message", [
    ({"wait": False}, r"T\.ptx_cp_async: nothing waits for this kernel's copies"),
    # committed but the wait comes after the read: the read is refused at its line
    ({"commit": False}, r"touches 'S' while the T\.ptx_cp_async copy \(line \d+\) into it "
                        r"may still be in flight"),
])
def test_reading_copies_before_their_wait_is_refused(kw, message):
    with pytest.raises(KernelError, match=message) as info:
        tilewright.lower(grouped_copies(**kw), "cuda -arch=sm_90a")
    assert info.value.location.filename.endswith("dialect_cases.py")  # the kernel's file


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_a_wait_group_leaving_other_stages_in_flight_is_accepted(stages):
    """T.ptx_wait_group(stages - 1) leaves the prefetches of the other stages in flight; the
    read of stage k % stages is of none of them (emulated against torch in
    test_cuda_dialect_emulate: prefetched_copies)."""
    text = _kernel(tilewright.lower(prefetched_copies(stages=stages),
                                    "cuda -arch=sm_80").source.text)
    assert f"tw_cp_async_wait<{stages - 1}>();" in text


@pytest.mark.parametrize("stages, wait", [(2, 2), (3, 3), (3, 4)])
def test_a_wait_group_leaving_the_read_stage_in_flight_is_refused(stages, wait):
    """Waiting for one group fewer than a pipeline needs leaves the stage the block reads in
    flight (the groups of an earlier iteration, or of the copies before the loop): refused,
    at the read."""
    with pytest.raises(KernelError, match=r"touches 'S' while the T\.ptx_cp_async copy "
                                          r"\(line \d+\) into it may still be in flight"):
        tilewright.lower(prefetched_copies(stages=stages, wait=wait), "cuda -arch=sm_80")


def test_a_wait_group_leaving_the_newest_group_of_the_read_stage_is_refused():
    """One stage per iteration, wait_group(1): the group just committed writes the stage the
    block then reads (it was accepted when any wait retired every group)."""
    with pytest.raises(KernelError, match=r"may still be in flight"):
        tilewright.lower(grouped_copies(stages=2, wait_count=1), "cuda -arch=sm_80")


def test_a_read_before_the_wait_is_refused_at_its_line():
    @T.prim_func
    def main(A: T.Tensor((16, 64), "float16"), O: T.Tensor((16, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((16, 64), "float16")
            tx = T.get_thread_binding()
            T.ptx_cp_async(T.access_ptr(S[tx // 8, tx % 8 * 8], "w", 8),
                           T.access_ptr(A[tx // 8, tx % 8 * 8], "r", 8), 8)
            T.ptx_commit_group()
            T.copy(S, O)
            T.ptx_wait_group(0)

    with pytest.raises(KernelError, match=r"T\.copy touches 'S' while the T\.ptx_cp_async "
                                          r"copy \(line \d+\)") as info:
        tilewright.lower(main, "cuda -arch=sm_90a")
    where = info.value.location
    with open(where.filename) as f:
        assert "T.copy(S, O)" in f.readlines()[where.line - 1]


@pytest.mark.parametrize("num, message", [(-1, r"T\.ptx_wait_group takes the number of "
                                                r"groups left in flight"),
                                          (1.5, r"a constant int >= 0")])
def test_a_bad_wait_group_count_is_refused_at_the_users_line(num, message):
    with pytest.raises(KernelError, match=message) as info:
        @T.prim_func
        def main(G: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                T.ptx_wait_group(num)

    assert info.value.location.filename.endswith("test_cuda_dialect_groups.py")


def test_groups_are_refused_on_other_backends_and_before_sm_80():
    with pytest.raises(KernelError, match=r"is an op of the 'cuda' dialect.*backend 'cpu' "
                                          r"cannot lower it"):
        tilewright.lower(grouped_copies(), "cpu")
    with pytest.raises(KernelError, match=r"T\.ptx_cp_async needs sm_80 or newer"):
        tilewright.lower(grouped_copies(), "cuda -arch=sm_75")


# -- T.sync_grid ------------------------------------------------------------------------------
def test_sync_grid_is_a_cooperative_launch():
    lowered = tilewright.lower(grid_sum(), "cuda -arch=sm_90a")
    assert lowered.source.payload["cooperative"] is True
    assert "#include <cooperative_groups.h>" in lowered.source.text
    assert "tw_grid_sync();" in _kernel(lowered.source.text)
    check_launch(lowered.source.payload)
    plain = tilewright.lower(grouped_copies(), "cuda -arch=sm_90a")
    assert "cooperative" not in plain.source.payload
    assert "cooperative_groups" not in plain.source.text


@pytest.mark.nvrtc
def test_sync_grid_builds_with_nvrtc(tmp_path):
    lowered = tilewright.lower(grid_sum(), "cuda -arch=sm_90a")
    cubin, _ = executor.nvrtc_compile(lowered.source.text, arch.get("sm_90a"), tmp_path)
    assert cubin


@pytest.mark.emulator
def test_the_host_emulation_refuses_a_cooperative_grid_it_cannot_hold(tmp_path):
    lowered = tilewright.lower(grid_sum(blocks=9), "cuda -arch=sm_90a")
    a = torch.zeros(9, 128)
    with pytest.raises(RuntimeError, match=r"cooperative kernel \(T\.sync_grid\) with all its "
                                           r"blocks at once, up to 8 along x; got grid \[9"):
        hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, a.clone(),
                    a.clone())


def test_a_grid_larger_than_the_gpu_holds_is_refused_naming_grid_and_limit():
    kernel = {"entry": "main_kernel", "block": [256, 1, 1], "dynamic_smem_bytes": 98304}
    assert cooperative_grid_error(kernel, [132, 2, 1], 2, 132) is None
    message = cooperative_grid_error(kernel, [133, 2, 1], 2, 132)
    assert "grid [133, 2, 1] is 266 blocks, but this GPU holds at most 264 (2 per " \
        "multiprocessor x 132 multiprocessors" in message
    assert "T.sync_grid" in message


def test_a_cooperative_launch_description_is_checked():
    lowered = tilewright.lower(grid_sum(), "cuda -arch=sm_90a")
    bad = {**lowered.source.payload, "cooperative": "yes"}
    with pytest.raises(ValueError, match=r"malformed launch description: cooperative"):
        check_launch(bad)


def test_sync_grid_is_portable_the_cpu_runs_the_kernel_in_phases():
    # T.sync_grid is the core's: the CPU backend runs the blocks' statements before the
    # barrier for every block, then those after it (tilewright.transform.grid_sync)
    a = torch.randn(4, 128)
    w, o = torch.zeros_like(a), torch.zeros_like(a)
    tilewright.compile(grid_sum(), target="cpu")(a, w, o)
    assert torch.equal(o, (a * 2).roll(-1, 0) + a * 2)
    with pytest.raises(KernelError, match=r"T\.sync_grid is not supported by backend 'ascend'"):
        tilewright.lower(grid_sum(), "ascend")


def test_sync_grid_in_a_cluster_kernel_is_refused_at_the_users_line():
    with pytest.raises(KernelError, match=r"T\.sync_grid needs a cooperative launch, which has "
                                          r"no thread-block clusters") as info:
        @T.prim_func
        def main(A: T.Tensor((4, 128), "float32")):
            with T.ClusterKernel(4, threads=128, cluster_dims=(2, 1, 1)):
                T.sync_grid()

    assert info.value.location.filename.endswith("test_cuda_dialect_groups.py")


@pytest.mark.nvrtc
def test_an_exported_bundle_keeps_the_cooperative_launch(tmp_path):
    kernel = tw_compile(grid_sum(), target="cuda -arch=sm_90a", execution_backend="nvrtc")
    path = kernel.export(tmp_path / "bundle")
    assert (path / "launch.json").read_text().count('"cooperative": true') == 1
    assert load(path).function.launch["cooperative"] is True  # the launcher reads it
