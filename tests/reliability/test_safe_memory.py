"""Element accesses of global tensors past their end (the last, partial block of a size that
is not a multiple of the tile): a load reads 0 and a store is not made, as TileLang's
safe-memory legalisation (tilewright.transform.safe_memory), on every backend; never the
memory after the tensor. Checked by giving each kernel views into larger tensors and looking
at the elements after the view."""

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelIndexError

N = 20  # blocks of 8: the third block's last four indices pass the end


def shift_in_block_code():
    """Block code (a serial loop): B[i] = A[i + 1], the last element reading past A's end."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 8), threads=32) as bx:
            for i in T.serial(8):
                B[bx * 8 + i] = A[bx * 8 + i + 1] * 2

    return main


def scale_in_parallel():
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 8), threads=32) as bx:
            for i in T.Parallel(8):
                B[bx * 8 + i] = A[bx * 8 + i] * 2

    return main


def per_thread():
    """Thread-level code (T.get_thread_binding): each thread its element, and an atomic of
    one element per thread, also returning the previous value."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32"), P: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 8), threads=8) as bx:
            tx = T.get_thread_binding()
            B[bx * 8 + tx] = A[bx * 8 + tx] * 2
            T.atomic_add(C[bx * 8 + tx], 1.0)
            P[bx * 8 + tx] = T.atomic_add(C[bx * 8 + tx + 1], 1.0, return_prev=True) + 0.5

    return main


def _views(*fills):
    """Each a tensor of N elements in front of 8 sentinel elements (NaN: any write shows)."""
    out = []
    for fill in fills:
        whole = torch.full((N + 8,), float("nan"))
        whole[:N] = fill
        out.append((whole[:N], whole))
    return out


@pytest.mark.parametrize("target", ["cpu", "interp", "ascend"])
def test_block_code_and_parallel_loops_stay_inside_the_tensors(target):
    if target == "ascend":
        pytest.importorskip("tilewright_ascend")  # its CPU emulator runs the generated code
    (a, _), (b, b_whole) = _views(torch.arange(N, dtype=torch.float32), 0.0)
    tilewright.compile(shift_in_block_code(), target=target)(a, b)
    assert b.tolist() == [2 * (i + 1) for i in range(N - 1)] + [0.0]  # A[20] reads 0
    assert b_whole[N:].isnan().all()
    (a, _), (b, b_whole) = _views(torch.arange(N, dtype=torch.float32), 0.0)
    tilewright.compile(scale_in_parallel(), target=target)(a, b)
    assert b.tolist() == [2 * i for i in range(N)] and b_whole[N:].isnan().all()


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_thread_code_and_element_atomics_stay_inside_the_tensors(target):
    views = _views(torch.arange(N, dtype=torch.float32), 0.0, 0.0, 0.0)
    (a, _), (b, b_whole), (c, c_whole), (p, p_whole) = views
    tilewright.compile(per_thread(), target=target)(a, b, c, p)
    assert b.tolist() == [2 * i for i in range(N)]
    # C[i] gets one add of each of the two atomics, C[0] only the first
    assert c.tolist() == [1.0] + [2.0] * (N - 1)
    # the thread of C[i + 1] saw it once added or not yet: 0 or 1, plus 0.5; past the end, 0
    assert all(v in (0.5, 1.5) for v in p[:-1].tolist()) and p[-1].item() == 0.5
    for whole in (b_whole, c_whole, p_whole):
        assert whole[N:].isnan().all()


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_a_tensors_safe_value_is_what_its_loads_outside_read(target):
    @T.prim_func
    def shift(A: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int32"),
              B: T.Tensor((N,), "float32"), J: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 8), threads=32) as bx:
            T.annotate_safe_value({A: -7.5, I: 3})
            for i in T.serial(8):
                B[bx * 8 + i] = A[bx * 8 + i + 1]
                J[bx * 8 + i] = I[bx * 8 + i + 2]

    (a, _), (b, _), (i, _), (j, _) = _views(torch.arange(N, dtype=torch.float32), 0.0, 0.0,
                                            0.0)
    ints = torch.arange(N, dtype=torch.int32)
    jj = torch.zeros(N, dtype=torch.int32)
    tilewright.compile(shift, target=target)(a, ints, b, jj)
    assert b.tolist() == [float(k + 1) for k in range(N - 1)] + [-7.5]
    assert jj.tolist() == [k + 2 for k in range(N - 2)] + [3, 3]
    with pytest.raises(tilewright.errors.KernelError, match="the kernel's global tensors"):
        @T.prim_func
        def tile_key(A: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((8,), "float32")
                T.annotate_safe_value({s: 1.0})
                A[0] = s[0]


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_an_atomic_load_outside_reads_what_a_load_reads(target):
    """``T.atomic_load`` of an element past the end is not made and reads the tensor's safe
    value (0 without one), in T.Parallel and in block code. Before, its element became the
    guarded load, which the CPU could not take the address of ("'Call' object has no
    attribute 'source'")."""
    @T.prim_func
    def shift(A: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int32"),
              B: T.Tensor((N,), "float32"), J: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 8), threads=32) as bx:
            T.annotate_safe_value({I: 3})
            for i in T.Parallel(8):
                B[bx * 8 + i] = T.atomic_load(A[bx * 8 + i + 1], memory_order="acquire")
            for i in T.serial(8):
                J[bx * 8 + i] = T.atomic_load(I[bx * 8 + i + 2])

    (a, _), (b, b_whole) = _views(torch.arange(N, dtype=torch.float32), 0.0)
    ints, j = torch.arange(N, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    tilewright.compile(shift, target=target)(a, ints, b, j)
    assert b.tolist() == [float(k + 1) for k in range(N - 1)] + [0.0]
    assert j.tolist() == [k + 2 for k in range(N - 2)] + [3, 3]
    assert b_whole[N:].isnan().all()


def test_disabling_the_guards_leaves_the_access_to_the_interpreters_check():
    (a, _), (b, _) = _views(torch.arange(N, dtype=torch.float32), 0.0)
    kernel = tilewright.compile(shift_in_block_code(), target="interp",
                                pass_configs={"tl.disable_safe_memory_legalize": True})
    with pytest.raises(KernelIndexError, match="index out of bounds"):
        kernel(a, b)


def test_accesses_proven_inside_get_no_guard():
    @T.prim_func
    def exact(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for i in T.Parallel(8):
                B[bx * 8 + i] = A[bx * 8 + i] * 2

    source = tilewright.lower(exact, "cuda -arch=sm_90a").source.text
    assert "< 32" not in source and "condval" not in source
    source = tilewright.lower(scale_in_parallel(), "cuda -arch=sm_90a").source.text
    assert source.count("< 20)") == 1 and "condval" not in source  # one guard for both
