"""The host emulation itself (hostemu.py): a deadlock is an error, not a hang, and a kernel's
library is built once for every test of a run that runs the same source."""

import hostemu
import pytest
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
