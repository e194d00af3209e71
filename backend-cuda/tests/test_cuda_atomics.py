"""float16 and bfloat16 atomic max/min and 8- and 16-bit integer add/max/min (the compare-and-swap
helpers of include/tw_cuda.h): the generated CUDA is run by the host emulation, one host
thread per CUDA thread, with several blocks racing on the same elements; results are compared
with torch. The cubin builds are checked for the 16-bit compare-and-swap
(``atom.global.cas.b16``) or the 32-bit one on the word holding a narrow integer in the PTX.
Atomics inside T.Parallel are made by every thread."""

import re
import subprocess

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
NARROW = {"int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
          "uint16": torch.uint16}


def tile_kernel(kind: str, dtype: str, splits=3, M=20, N=24, bm=16, bn=16):
    """``splits`` blocks per output tile each apply their slice of X with T.atomic_<kind>."""
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def atomic_tile(X: T.Tensor((splits, M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=64) as (bx, by, bz):
            x = T.alloc_fragment((bm, bn), dtype)
            T.copy(X[bz, by * bm, bx * bn], x)
            op(Y[by * bm, bx * bn], x)

    return atomic_tile


def prev_kernel(kind: str, dtype: str, blocks=40):
    """Every block updates one element and keeps the value it replaced (return_prev): once
    per block, though the block's 32 threads all run the statement."""
    op = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def atomic_prev(X: T.Tensor((blocks,), dtype), Best: T.Tensor((1,), dtype),
                    Prev: T.Tensor((blocks,), dtype)):
        with T.Kernel(blocks, threads=32) as bx:
            Prev[bx] = op(Best[0], X[bx], return_prev=True)

    return atomic_prev


def _run(func, tmp_path, *args):
    lowered = tilewright.lower(func, "cuda -arch=sm_80")
    assert "tw_atomic_" in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, *args)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_tile_atomic_minmax_half(kind, dtype, tmp_path):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 20, 24, generator=g).to(DTYPES[dtype])
    start = torch.randn(20, 24, generator=g).to(DTYPES[dtype])
    y = start.clone()
    _run(tile_kernel(kind, dtype), tmp_path, x, y)
    reduce = torch.maximum if kind == "max" else torch.minimum
    want = reduce(start, x.amax(0) if kind == "max" else x.amin(0))
    assert torch.equal(y, want)


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_scalar_atomic_minmax_half_return_prev(kind, dtype, tmp_path):
    blocks = 40
    x = torch.randperm(blocks).to(DTYPES[dtype]) - 20  # distinct, exact in both dtypes
    start = torch.tensor([-100.0 if kind == "max" else 100.0], dtype=DTYPES[dtype])
    best, prev = start.clone(), torch.full((blocks,), float("nan"), dtype=DTYPES[dtype])
    _run(prev_kernel(kind, dtype, blocks), tmp_path, x, best, prev)
    want = x.max() if kind == "max" else x.min()
    assert best.item() == want.item()
    # each old value is the start or a value some block wrote, and never beyond the final one
    allowed = set(x.tolist()) | {start.item()}
    assert set(prev.tolist()) <= allowed
    if kind == "max":
        assert prev.max().item() <= want.item()
    else:
        assert prev.min().item() >= want.item()
    # blocks run one after another in the emulation: block b sees the running extreme
    running = torch.cat([start, x]).cummax(0).values if kind == "max" else \
        torch.cat([start, x]).cummin(0).values
    assert torch.equal(prev, running[:-1])


def tickets_kernel(blocks=40):
    @T.prim_func
    def tickets(Counter: T.Tensor((1,), "int32"), Ticket: T.Tensor((blocks,), "int32")):
        with T.Kernel(blocks, threads=64) as bx:
            Ticket[bx] = T.atomic_add(Counter[0], 1, return_prev=True)

    return tickets


@pytest.mark.emulator
def test_scalar_return_prev_happens_once_per_block(tmp_path):
    counter, ticket = torch.tensor([7], dtype=torch.int32), torch.zeros(40, dtype=torch.int32)
    _run(tickets_kernel(), tmp_path, counter, ticket)
    assert int(counter) == 7 + 40
    assert sorted(ticket.tolist()) == list(range(7, 47))


# (the kernels, the compare-and-swap their PTX shows): 16-bit floats swap their own 16 bits,
# narrow integers the 32-bit word that holds them
CAS = {"half": (lambda: (tile_kernel("max", "bfloat16"), prev_kernel("min", "float16")), 16),
       "narrow_int": (lambda: (tile_kernel("add", "int8"), prev_kernel("min", "uint16")), 32)}


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kinds", CAS)
def test_atomics_compare_and_swap_in_ptx(kinds, arch, tmp_path):
    from tilewright_cuda import executor

    kernels, bits = CAS[kinds]
    for func in kernels():
        (tmp_path / "k.cu").write_text(tilewright.lower(func, f"cuda -arch={arch}").source.text)
        cmd = [executor.nvcc_path(), "-ptx", f"-arch={arch}", "-std=c++17", "-o",
               str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")]
        subprocess.run(cmd, check=True, capture_output=True)
        assert re.search(rf"atom\.global\.cas\.b{bits}|atom\.cas\.b{bits}",
                         (tmp_path / "k.ptx").read_text())


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_half_atomics_build_with_nvrtc(arch):
    for func in (tile_kernel("max", "bfloat16"), prev_kernel("min", "float16")):
        kernel = tilewright.compile(func, target=f"cuda -arch={arch}")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"


def parallel_kernel(M=6, N=8, bm=2, bn=4):
    """Atomics inside T.Parallel: each iteration updates its own element of Y and adds to S."""

    @T.prim_func
    def atomic_parallel(X: T.Tensor((M, N), "int32"), Y: T.Tensor((bm, bn), "int32"),
                        S: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), "int32")
            T.copy(X[by * bm, bx * bn], x)
            for i, j in T.Parallel(bm, bn):
                T.atomic_add(Y[i, j], x[i, j])
                T.atomic_add(S[0], x[i, j])

    return atomic_parallel


@pytest.mark.emulator
def test_element_atomics_inside_parallel_run_on_every_thread(tmp_path):
    """An element's atomic inside T.Parallel was made by thread 0 only (the rule's guard for
    a lone element): every other iteration was lost (fuzzer, cuda_emu seed 1)."""
    x = torch.randint(-20, 20, (6, 8), dtype=torch.int32)
    y, s = torch.zeros(2, 4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    _run(parallel_kernel(), tmp_path, x, y, s)
    assert torch.equal(y, x.reshape(3, 2, 2, 4).sum(dim=(0, 2), dtype=torch.int32))
    assert int(s) == int(x.sum())


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_tile_atomics_of_narrow_integers(kind, dtype, tmp_path):
    """Neighbouring elements of one 32-bit word belong to different threads; the adds wrap
    modulo 2^bits (values up to the type's range: three of them pass it)."""
    info = torch.iinfo(NARROW[dtype])
    g = torch.Generator().manual_seed(2)
    x = torch.randint(info.min, info.max + 1, (3, 20, 24), generator=g)
    start = torch.randint(info.min, info.max + 1, (20, 24), generator=g)
    y = start.to(NARROW[dtype])
    _run(tile_kernel(kind, dtype), tmp_path, x.to(NARROW[dtype]), y)
    want = {"add": lambda: start + x.sum(0), "max": lambda: start.maximum(x.amax(0)),
            "min": lambda: start.minimum(x.amin(0))}[kind]()
    assert torch.equal(y.long(), want.to(NARROW[dtype]).long())


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["int8", "uint16"])
def test_narrow_integer_return_prev(dtype, tmp_path):
    blocks = 40
    x = torch.randperm(blocks).to(NARROW[dtype])
    best = torch.zeros(1, dtype=NARROW[dtype])
    prev = torch.zeros(blocks, dtype=NARROW[dtype])
    _run(prev_kernel("max", dtype, blocks), tmp_path, x, best, prev)
    assert int(best) == blocks - 1
    running = torch.cat([torch.zeros(1, dtype=torch.long), x.long()]).cummax(0).values
    assert torch.equal(prev.long(), running[:-1])


@pytest.mark.nvrtc
@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_integer_atomics_build_with_nvrtc(dtype):
    for func in (tile_kernel("add", dtype), prev_kernel("max", dtype)):
        kernel = tilewright.compile(func, target="cuda -arch=sm_90a")
        with open(f"{kernel.artifact_dir}/kernel.cubin", "rb") as f:
            assert f.read(4) == b"\x7fELF"
