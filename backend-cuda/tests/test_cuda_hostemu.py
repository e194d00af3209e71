"""The host emulation itself (hostemu.py): a deadlock is an error, not a hang, a launch after
one starts from clean barrier state, and a kernel's library is built once for every test of a
run that runs the same source."""

import hostemu
import pytest
import tilewright
import tilewright_cuda.language as T
import torch

SOURCE = """
extern "C" __global__ void __launch_bounds__(64) main_kernel(float* __restrict__ A) {
  if (threadIdx.x < WAITING) __syncthreads();
  A[threadIdx.x] = (float)threadIdx.x;
}
"""
LAUNCH = {"entry": "main_kernel", "symbols": {}, "grid": ["1", "1", "1"], "block": [64, 1, 1],
          "params": [{"kind": "tensor", "param": 0, "name": "A"}]}


@pytest.mark.emulator
def test_a_barrier_that_half_the_block_skips_is_a_deadlock_error(tmp_path):
    a = torch.zeros(64)
    with pytest.raises(RuntimeError, match=r"every thread of a block of main_kernel waits for "
                                           r"another \(a deadlock"):
        hostemu.run(SOURCE.replace("WAITING", "32"), LAUNCH, tmp_path, a)
    hostemu.run(SOURCE.replace("WAITING", "64"), LAUNCH, tmp_path, a)  # all of it: runs
    assert a.tolist() == [float(i) for i in range(64)]


@pytest.mark.emulator
def test_a_source_built_once_is_loaded_by_every_later_test(tmp_path, hostemu_builds):
    source = SOURCE.replace("WAITING", "64")
    first = hostemu.build(source, LAUNCH, tmp_path / "one")
    again = hostemu.build(source, LAUNCH, tmp_path / "two")
    assert first._name == again._name and first._name.startswith(str(hostemu_builds))
    assert len(list(hostemu_builds.glob("emu-*.so"))) >= 1


def _reversed_below(shift):
    """Threads ``tx < Reach[0]`` meet at named barrier 3 of the whole block, then read their
    neighbour's value (``(tx + shift) % 128``) from shared memory: with fewer than 128 reaching
    it, a deadlock."""

    @T.prim_func
    def main(X: T.Tensor((128,), "int32"), Reach: T.Tensor((1,), "int32"),
             Y: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            s = T.alloc_shared((128,), "int32")
            s[tx] = X[tx]
            if tx < Reach[0]:
                T.sync_threads(3, 128)
                Y[tx] = s[(tx + shift) % 128]

    return main


@pytest.mark.emulator
def test_a_launch_after_a_deadlock_starts_from_clean_barriers(tmp_path):
    # the deadlocked launch leaves named barrier 3 with 32 arrivals; the next launch of the
    # same library, and one of another kernel's, count theirs from zero
    first, second = (tilewright.lower(_reversed_below(s), "cuda -arch=sm_90a").source
                     for s in (1, 5))
    assert "tw_bar_sync(3, 128)" in first.text
    x = torch.randint(-99, 99, (128,), generator=torch.Generator().manual_seed(0),
                      dtype=torch.int32)
    y = torch.full_like(x, -1)
    with pytest.raises(RuntimeError, match=r"block of main_kernel waits .*a deadlock"):
        hostemu.run(first.text, first.payload, tmp_path, x, torch.tensor([32]).int(), y)
    for source, shift in ((second, 5), (first, 1)):
        y = torch.full_like(x, -1)
        hostemu.run(source.text, source.payload, tmp_path, x, torch.tensor([128]).int(), y)
        assert torch.equal(y, x.roll(-shift)), shift
