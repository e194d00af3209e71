"""Global element accesses past a tensor's end on CUDA (tilewright.transform.safe_memory, as
TileLang's LegalizeSafeMemoryAccess): run by the host emulation on views into larger tensors,
whose elements after the view must stay untouched; proven accesses stay unguarded."""

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch

N = 40  # blocks of 32: the second block's last 24 indices pass the end
TARGET = "cuda -arch=sm_90a"


def kernels():
    @T.prim_func
    def shift(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                B[bx * 32 + i] = A[bx * 32 + i + 1] * 2

    @T.prim_func
    def per_thread(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
                   C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            tx = T.get_thread_binding()
            B[bx * 32 + tx] = A[bx * 32 + tx] * 2
            T.atomic_add(C[bx * 32 + tx], 1.0)

    return shift, per_thread


def _view(fill):
    whole = torch.full((N + 32,), float("nan"))
    whole[:N] = fill
    return whole[:N], whole


@pytest.mark.emulator
def test_parallel_and_thread_code_stay_inside_the_tensors(tmp_path):
    shift, per_thread = kernels()
    (a, _), (b, b_whole) = _view(torch.arange(N, dtype=torch.float32)), _view(0.0)
    lowered = tilewright.lower(shift, TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path / "shift", a, b)
    assert b.tolist() == [2.0 * (i + 1) for i in range(N - 1)] + [0.0]
    assert b_whole[N:].isnan().all()
    (a, _), (b, b_whole), (c, c_whole) = (_view(torch.arange(N, dtype=torch.float32)),
                                         _view(0.0), _view(0.0))
    lowered = tilewright.lower(per_thread, TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path / "threads", a, b, c)
    assert b.tolist() == [2.0 * i for i in range(N)] and c.tolist() == [1.0] * N
    assert b_whole[N:].isnan().all() and c_whole[N:].isnan().all()


def test_the_guard_is_the_stores_and_switches_off():
    shift, _ = kernels()
    text = tilewright.lower(shift, TARGET).source.text
    assert "< 40)" in text and "< 39)" in text  # the store's bound, then the load's beyond it
    off = tilewright.lower(shift, TARGET, {"tl.disable_safe_memory_legalize": True})
    assert "< 40)" not in off.source.text and "< 39)" not in off.source.text


@pytest.mark.emulator
def test_an_atomic_load_outside_reads_the_safe_value(tmp_path):
    """``T.atomic_load`` past the end is not made and reads what a load reads there (0, or the
    tensor's safe value). Before, its element became the guarded load: "'Call' object has no
    attribute 'source'" as it was lowered."""
    @T.prim_func
    def shift(A: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int32"),
              B: T.Tensor((N,), "float32"), J: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            T.annotate_safe_value({I: 3})
            for i in T.Parallel(32):
                B[bx * 32 + i] = T.atomic_load(A[bx * 32 + i + 1], memory_order="acquire")
            for i in T.serial(32):
                J[bx * 32 + i] = T.atomic_load(I[bx * 32 + i + 2])

    (a, _), (b, b_whole) = _view(torch.arange(N, dtype=torch.float32)), _view(0.0)
    ints, j = torch.arange(N, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    lowered = tilewright.lower(shift, TARGET)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, ints, b, j)
    assert b.tolist() == [float(k + 1) for k in range(N - 1)] + [0.0]
    assert j.tolist() == [k + 2 for k in range(N - 2)] + [3, 3]
    assert b_whole[N:].isnan().all()
