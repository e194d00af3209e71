"""Tile selects on the vector unit: T.if_then_else over UB tiles and guarded stores become
Compare/Compares into a bit mask and Select (facts.instructions.COMPARE_MODES), checked in the
generated source and against torch on the emulator; what the instructions cannot take stays on
the scalar unit."""

import operator

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError

_OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
        "eq": operator.eq, "ne": operator.ne}


def _selects(M, N, dtype, scalar):
    """One output per comparison: z[k] = a op b ? a : b * 2 (tile against tile), or
    a op 0.5 ? b : -1 (tile against scalar, the scalar false arm of Select's mode 1)."""
    shape = (M, N) if M else (N,)

    @T.prim_func
    def main(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype),
             Z: T.Tensor((6, *shape), dtype)):
        with T.Kernel(1, threads=32) as _bx:
            a = T.alloc_fragment(shape, dtype)
            b = T.alloc_fragment(shape, dtype)
            z = T.alloc_fragment((6, *shape), dtype)
            T.copy(A[(0,) * len(shape)], a)
            T.copy(B[(0,) * len(shape)], b)
            if M:
                for i, j in T.Parallel(M, N):
                    for k, op in enumerate(_OPS.values()):
                        if scalar:
                            z[k, i, j] = T.if_then_else(op(a[i, j], 0.5), b[i, j], -1.0)
                        else:
                            z[k, i, j] = T.if_then_else(op(a[i, j], b[i, j]), a[i, j],
                                                        b[i, j] * 2)
            else:
                for j in T.Parallel(N):
                    for k, op in enumerate(_OPS.values()):
                        if scalar:
                            z[k, j] = T.if_then_else(op(0.5, a[j]), b[j], -1.0)
                        else:
                            z[k, j] = T.if_then_else(op(a[j], b[j]), a[j], b[j] * 2)
            T.copy(z, Z[(0,) * (len(shape) + 1)])

    return main


def _inputs(shape, dtype):
    t = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(shape, generator=gen).to(t)
    b = torch.randn(shape, generator=gen).to(t)
    b = torch.where(torch.rand(shape, generator=gen) < 0.3, a, b)  # ties for == and !=
    a.view(-1)[:3] = 0.5  # ties with the scalar
    return a, b


def _reference(a, b, scalar, one_d):
    out = []
    for op in _OPS.values():
        if scalar:
            cond = op(torch.full_like(a, 0.5), a) if one_d else op(a, 0.5)
            out.append(torch.where(cond, b, torch.full_like(b, -1.0)))
        else:
            out.append(torch.where(op(a, b), a, b * 2))
    return torch.stack(out)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("scalar", [False, True], ids=["tile", "scalar"])
@pytest.mark.parametrize("M,N", [(12, 20), (0, 100)], ids=["partial2d", "1d"])
def test_selects_match_torch(dtype, scalar, M, N):
    """Every comparison, tile against tile and tile against scalar (on the left in 1-D:
    the comparison is swapped), on tiles whose element count is not a multiple of Compare's
    repeat (12 x 20 with padded rows; 100 elements)."""
    kernel = tilewright.compile(_selects(M, N, dtype, scalar), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and "SetValue" not in text
    assert "Compares(" in text if scalar else "Compare(" in text
    mode = "VSEL_TENSOR_SCALAR_MODE" if scalar else "VSEL_TENSOR_TENSOR_MODE"
    assert f"SELMODE::{mode}" in text
    for name in ("LT", "LE", "GT", "GE", "EQ", "NE"):
        assert f"CMPMODE::{name}" in text
    a, b = _inputs((M, N) if M else (N,), dtype)
    torch.testing.assert_close(kernel(a, b), _reference(a, b, scalar, not M))


def test_whole_tiles_take_one_compare_and_one_select():
    kernel = tilewright.compile(_selects(16, 32, "float32", False), out_idx=[-1],
                                target="ascend")
    text = kernel.get_kernel_source()
    assert "Compare(tw_t" in text or "Compare(" in text
    assert "for (int32_t r" not in text.split("Compare(")[1].split(";")[0]
    assert text.count("Select(") == 6 and text.count("Compare(") == 6


def _guarded(dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((8, 20), dtype), B: T.Tensor((8, 20), dtype)):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 20), dtype)
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 20):
                if x[i, j] > 0:
                    B[i, j] = x[i, j] * 3
    return main


def test_guarded_store_becomes_a_select():
    """``if x > 0: B = 3 x`` keeps B's other elements: B is copied in, selected, copied out."""
    kernel = tilewright.compile(_guarded(), target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and "Compares(" in text and "Select(" in text
    a = torch.randn(8, 20)
    b = torch.randn(8, 20)
    expect = torch.where(a > 0, a * 3, b)
    kernel(a, b)
    torch.testing.assert_close(b, expect)


def test_what_select_cannot_take_stays_on_the_scalar_unit():
    """An integer select keeps the scalar loop, with the reason in the source; a condition on
    the loop index runs on the vector unit (test_ascend_index_conditions)."""

    @T.prim_func
    def main(A: T.Tensor((8, 16), "float32"), B: T.Tensor((8, 16), "int32"),
             C: T.Tensor((8, 16), "float32"), D: T.Tensor((8, 16), "int32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 16), "float32")
            y = T.alloc_fragment((8, 16), "int32")
            T.copy(A[0, 0], x)
            T.copy(B[0, 0], y)
            for i, j in T.Parallel(8, 16):
                C[i, j] = T.if_then_else(j < 5, x[i, j], 0.0)
            for i, j in T.Parallel(8, 16):
                D[i, j] = T.if_then_else(y[i, j] > 0, y[i, j], 0)

    kernel = tilewright.compile(main, target="ascend")
    text = kernel.get_kernel_source()
    assert "the condition j < 5" not in text and "CreateVecIndex(" in text
    assert "selects int32; A2's Select takes float16 and float32" in text
    a, b = torch.randn(8, 16), torch.randint(-5, 5, (8, 16), dtype=torch.int32)
    c, d = torch.empty(8, 16), torch.empty(8, 16, dtype=torch.int32)
    kernel(a, b, c, d)
    torch.testing.assert_close(c, torch.where(torch.arange(16) < 5, a, 0.0))
    torch.testing.assert_close(d, torch.where(b > 0, b, 0))


def test_a_kernel_with_select_leaves_select_scratch_free():
    """Select's modes 1 and 2 keep their scratch at TMP_UB_OFFSET (184 KiB) on A2: a kernel
    that calls Select plans its UB below it, one that does not may fill all 192 KiB."""

    def kernel(select):
        @T.prim_func
        def main(A: T.Tensor((188 * 256,), "float32"), B: T.Tensor((188 * 256,), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                x = T.alloc_fragment((188 * 256,), "float32")
                T.copy(A[0], x)
                for i in T.Parallel(188 * 256):
                    if select:
                        x[i] = T.if_then_else(x[i] > 0, x[i], 0.0)
                    else:
                        x[i] = x[i] * 2
                T.copy(x, B[0])
        return main

    tilewright.lower(kernel(False), target="ascend")
    with pytest.raises(KernelError, match=r"UB holds 188416 bytes"):
        tilewright.lower(kernel(True), target="ascend")


def test_generated_selects_compile_against_the_vendor_headers(asc_check):
    """Compare, Compares and both Select modes as generated, per row and whole, against the
    arch-2201 headers (as the cube core and as a vector core)."""
    sources = {f"selects_{dtype}_{scalar}_{M}": tilewright.lower(
        _selects(M, N, dtype, scalar), target="ascend").source.text
        for dtype in ("float32", "float16") for scalar in (False, True)
        for M, N in ((12, 20), (16, 32))}
    sources["guarded"] = tilewright.lower(_guarded(), target="ascend").source.text
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)


def _odd_int8(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "int8"), B: T.Tensor((n,), "int8"), C: T.Tensor((n,), "int8")):
        with T.Kernel(1, threads=32) as _:
            t = T.alloc_fragment((n,), "int8")
            u = T.alloc_fragment((n,), "int8")
            T.fill(t, -1)
            T.copy(t, B[0])
            T.copy(A[0], u)
            T.copy(u, t)
            T.copy(t, C[0])
    return main


@pytest.mark.parametrize("n", [1, 3, 37])
def test_int8_tiles_of_an_odd_length_are_filled_and_copied(n):
    """Duplicate and Adds take 16-bit lanes: the last row of a tile may cover one byte past
    an odd length, which belongs to no buffer (UB buffers start 32-byte aligned)."""
    kernel = tilewright.compile(_odd_int8(n), target="ascend")
    a = torch.arange(n, dtype=torch.int8)
    b, c = torch.zeros(n, dtype=torch.int8), torch.zeros(n, dtype=torch.int8)
    kernel(a, b, c)
    assert (b == -1).all() and (c == a).all()


def test_a_row_operand_is_broadcast_before_the_compare():
    """``x > r[i] ? r[i] : x``: the row operand becomes a full tile, then Compare and Select."""

    @T.prim_func
    def main(A: T.Tensor((8, 32), "float32"), R: T.Tensor((8,), "float32"),
             B: T.Tensor((8, 32), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((8, 32), "float32")
            r = T.alloc_fragment((8,), "float32")
            y = T.alloc_fragment((8, 32), "float32")
            T.copy(A[0, 0], x)
            T.copy(R[0], r)
            for i, j in T.Parallel(8, 32):
                y[i, j] = T.if_then_else(x[i, j] > r[i], r[i], x[i, j])
            T.copy(y, B[0, 0])

    kernel = tilewright.compile(main, out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and text.count("Compare(") == 1
    a, r = torch.randn(8, 32), torch.randn(8)
    torch.testing.assert_close(kernel(a, r), torch.where(a > r[:, None], r[:, None], a))
