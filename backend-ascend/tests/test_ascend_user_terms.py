"""Constructs the differential fuzzer (seeds 1001 and 1002) found refused in terms of the
backend's own temporaries: a column of a tensor stored or read in ``T.Parallel`` (now staged
through a tile of one-element rows, checked on the emulator against torch), and the refusals
that remain, which must name the user's tile, the rule and the line, never a temporary."""


import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError


def column_store(M=16, N=3):
    """Block ``bx`` writes column ``bx`` of ``Y`` from a 1-D tile, and reads column ``bx`` of
    ``X`` into another 1-D tile: both columns are rows of one element in GM."""

    @T.prim_func
    def main(V: T.Tensor((M,), "float32"), X: T.Tensor((M, N), "float32"),
             Y: T.Tensor((M, N), "float32"), Z: T.Tensor((M,), "float32")):
        with T.Kernel(N, threads=128) as bx:
            t = T.alloc_fragment((M,), "float32")
            T.copy(V[0], t)
            for i in T.Parallel(M):
                Y[i, bx] = t[i] * 2 + bx
            z = T.alloc_fragment((M,), "float32")
            for i in T.Parallel(M):
                z[i] = X[i, bx] + t[i]
            if bx == 0:
                T.copy(z, Z[0])

    return main


def column_store_3d(R=3, C=4):
    """The fuzzer's form: ``R6[bz, by * 16 + i, bx] = t5[i]``, cut short by the tensor."""

    @T.prim_func
    def main(X: T.Tensor((16,), "int32"), R6: T.Tensor((1, R, C), "int32")):
        with T.Kernel(C, 1, 1, threads=128) as (bx, by, bz):
            t5 = T.alloc_fragment((16,), "int32")
            T.copy(X[0], t5)
            for i in T.Parallel(16):
                if by * 16 + i < R:
                    R6[bz, by * 16 + i, bx] = t5[i] + bx

    return main


def test_a_column_of_a_tensor_is_stored_and_read_from_a_1d_tile():
    kernel = tilewright.compile(column_store(), out_idx=[2, 3], target="ascend")
    gen = torch.Generator().manual_seed(11)
    v, x = torch.randn(16, generator=gen), torch.randn(16, 3, generator=gen)
    y, z = kernel(v, x)
    torch.testing.assert_close(y, v[:, None] * 2 + torch.arange(3.0))
    torch.testing.assert_close(z, x[:, 0] + v)


def test_a_column_cut_short_by_the_tensor_is_stored():
    kernel = tilewright.compile(column_store_3d(), out_idx=[1], target="ascend")
    x = torch.randint(-20, 20, (16,), generator=torch.Generator().manual_seed(12),
                      dtype=torch.int32)
    r6 = kernel(x)
    torch.testing.assert_close(r6, (x[:3, None] + torch.arange(4, dtype=torch.int32))[None])


def unaligned_copy(dtype="bfloat16"):
    """One element copied into column 3 of a tile (fuzz seed 1001): no vector instruction
    starts at element 3 of a UB tile (6 bytes in), so the scalar unit copies it."""

    @T.prim_func
    def main(X: T.Tensor((1, 16), dtype), Y: T.Tensor((1, 16), dtype)):
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_fragment((1, 16), dtype)
            T.copy(X[0, 0], a)
            b = T.alloc_shared((1, 16), dtype)
            T.fill(b, 1)
            T.copy(a[0:1, 0:2], b[0:1, 3:5])
            T.copy(b, Y[0, 0])

    return main


def constant_math(dtype="float16"):
    """A math function of constants (fuzz seed 1001): computed when the kernel compiles; the
    scalar unit has no math functions and the vector unit computes on tiles."""

    @T.prim_func
    def main(X: T.Tensor((4, 16), dtype), Y: T.Tensor((4, 16), dtype)):
        with T.Kernel(1, threads=128) as _:
            for i, j in T.Parallel(4, 16):
                Y[i, j] = T.min(X[i, j], T.sqrt(T.abs(T.cast(-2.0, dtype)) + T.cast(0.25, dtype)))

    return main


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int8"])
def test_an_unaligned_tile_copy_runs_on_the_scalar_unit(dtype):
    kernel = tilewright.compile(unaligned_copy(dtype), out_idx=[1], target="ascend")
    assert "T.copy element 0 of 'a' -> element 3 of 'b'" in kernel.get_kernel_source()
    x = torch.randint(-9, 9, (1, 16), generator=torch.Generator().manual_seed(13)).to(
        getattr(torch, dtype))
    want = torch.ones_like(x)
    want[0, 3:5] = x[0, 0:2]
    torch.testing.assert_close(kernel(x), want)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_math_of_constants_is_computed_when_compiling(dtype):
    kernel = tilewright.compile(constant_math(dtype), out_idx=[1], target="ascend")
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(14)).to(getattr(torch, dtype))
    torch.testing.assert_close(kernel(x), torch.clamp(x, max=1.5))


def test_the_backend_temporaries_are_named_by_what_they_hold():
    """Refusals name a temporary of the vector path by what it holds (the emitter's
    ``tile_name``), never by its internal name."""
    module = tilewright.lower(column_store(), target="ascend").module
    func = next(iter(module.functions.values()))
    holds = {str(b.name): str(v) for b, v in func.attrs["ascend.temporaries"].items()}
    assert "the UB tile of the elements of 'Y' that a T.Parallel loop reads or stores" in \
        holds.values()
    assert all(not re.search(r"tw_t\d|\bcid\b|\bvid\b", v) for v in holds.values())


def math_of_the_block_index():
    @T.prim_func
    def main(X: T.Tensor((4, 16), "float32"), Y: T.Tensor((4, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(4, 16):
                Y[i, j] = X[i, j] + T.sqrt(T.cast(bx + 2, "float32"))

    return main


def test_a_refused_expression_is_named_without_ir_node_names():
    try:
        kernel = tilewright.compile(math_of_the_block_index(), out_idx=[1], target="ascend")
    except KernelError as exc:
        message = str(exc)
        assert re.search(r"test_ascend_user_terms.py:\d+: .*T.sqrt", message), message
        assert "(Call)" not in message and "tw_t" not in message, message
        return
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(15))
    torch.testing.assert_close(kernel(x), x + 2 ** 0.5)


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    kernels = {"column": column_store(), "column3d": column_store_3d(),
               "unaligned": unaligned_copy(), "constant_math": constant_math()}
    sources = {name: tilewright.lower(f, target="ascend").source.text
               for name, f in kernels.items()}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)
