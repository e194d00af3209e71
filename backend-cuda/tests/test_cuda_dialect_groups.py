"""cp.async groups and the grid barrier of the CUDA dialect.

- ``T.ptx_commit_group`` / ``T.ptx_wait_group(n)`` (cp.async.commit_group / wait_group) after
  ``T.ptx_cp_async``: the wait lands the copies for barrier insertion (the intrinsics table),
  and a statement touching a tile whose copies nothing has waited for yet is refused at its
  line, naming the copy;
- ``T.sync_grid()``: cooperative groups' grid barrier; the launch description says
  ``cooperative`` (the launcher then uses cuLaunchCooperativeKernel after checking that the
  grid fits on the GPU at once); the host emulation runs the blocks at once."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch
from tilewright.errors import KernelError
from tilewright.runtime.cuda import check_launch, cooperative_grid_error
from tilewright_cuda import arch, executor


def grouped_copies(stages=2, rows=16, cols=64, wait=True, commit=True, steps=4):
    """Each of 128 threads copies 16 bytes of a (rows, cols) half tile per step with
    T.ptx_cp_async into the stage ``k % stages``, commits a group and waits for all but the
    newest ``stages - 1``: the classic cp.async pipeline, written by hand."""

    @T.prim_func
    def main(A: T.Tensor((steps, rows, cols), "float16"),
             O: T.Tensor((steps, rows, cols), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((stages, rows, cols), "float16")
            tx = T.get_thread_binding()
            for k in T.serial(steps):
                T.ptx_cp_async(T.access_ptr(S[k % stages, tx // 8, tx % 8 * 8], "w", 8),
                               T.access_ptr(A[k, tx // 8, tx % 8 * 8], "r", 8), 8)
                if commit:
                    T.ptx_commit_group()
                if wait:
                    T.ptx_wait_group(0)
                for i, j in T.Parallel(rows, cols):
                    O[k, i, j] = S[k % stages, i, j] * 2

    return main


def grid_sum(blocks=4, n=128):
    """Each block writes its row, the grid synchronises, then each block reads its
    neighbour's row: wrong values unless every block's write came before every read."""

    @T.prim_func
    def main(A: T.Tensor((blocks, n), "float32"), W: T.Tensor((blocks, n), "float32"),
             O: T.Tensor((blocks, n), "float32")):
        with T.Kernel(blocks, threads=128) as bx:
            for i in T.Parallel(n):
                W[bx, i] = A[bx, i] * 2
            T.sync_grid()
            for i in T.Parallel(n):
                O[bx, i] = W[(bx + 1) % blocks, i] + W[bx, i]

    return main


def _kernel(text: str) -> str:
    return text[text.index('extern "C" __global__'):]


def test_a_wait_group_lands_the_copies_before_the_block_barrier():
    lowered = tilewright.lower(grouped_copies(), "cuda -arch=sm_80")
    text = _kernel(lowered.source.text)
    wait = text.index("tw_cp_async_wait<0>();")
    assert text.index("tw_cp_async_bytes<16>(") < text.index("tw_cp_async_commit();") < wait
    assert "__syncthreads();" in text[wait:]  # before the reads of S


@pytest.mark.emulator
def test_grouped_copies_match_torch(tmp_path):
    lowered = tilewright.lower(grouped_copies(), "cuda -arch=sm_90a")
    a = torch.randn(4, 16, 64, generator=torch.Generator().manual_seed(0)).half()
    out = torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, out)
    torch.testing.assert_close(out, a * 2, rtol=0, atol=0)


@pytest.mark.parametrize("kw, message", [
    ({"wait": False}, r"T\.ptx_cp_async: nothing waits for this kernel's copies"),
    # committed but the wait comes after the read: the read is refused at its line
    ({"commit": False}, r"touches 'S' while the T\.ptx_cp_async copy \(line \d+\) into it "
                        r"may still be in flight"),
])
def test_reading_copies_before_their_wait_is_refused(kw, message):
    with pytest.raises(KernelError, match=message) as info:
        tilewright.lower(grouped_copies(**kw), "cuda -arch=sm_90a")
    assert info.value.location is not None and \
        info.value.location.filename.endswith("test_cuda_dialect_groups.py")


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
def test_sync_grid_matches_torch_in_the_host_emulation(tmp_path):
    lowered = tilewright.lower(grid_sum(), "cuda -arch=sm_90a")
    a = torch.randn(4, 128, generator=torch.Generator().manual_seed(0))
    w, out = torch.full_like(a, float("nan")), torch.full_like(a, float("nan"))
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, w, out)
    torch.testing.assert_close(out, a.roll(-1, 0) * 2 + a * 2)


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


def test_sync_grid_is_refused_on_other_backends():
    with pytest.raises(KernelError, match=r"T\.sync_grid is an op of the 'cuda' dialect"):
        tilewright.lower(grid_sum(), "cpu")


def test_sync_grid_in_a_cluster_kernel_is_refused_at_the_users_line():
    with pytest.raises(KernelError, match=r"T\.sync_grid needs a cooperative launch, which has "
                                          r"no thread-block clusters") as info:
        @T.prim_func
        def main(A: T.Tensor((4, 128), "float32")):
            with T.ClusterKernel(4, threads=128, cluster_dims=(2, 1, 1)):
                T.sync_grid()

    assert info.value.location.filename.endswith("test_cuda_dialect_groups.py")
