"""Scalar-unit loops, checked against torch on the emulator: branches on tile data (the scalar
unit does not branch on a value it has not read yet, so an ``if`` whose arms only bind names and
store to UB tiles becomes selects, the condition bound once before the stores) and math
functions, which A2's scalar unit lacks (computed first by vector instructions, over the tile or
on one element, or, on a value only the loop knows, inside the loop on one-element tiles)."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source


def compare_and_swap(M=8, N=16):
    """Neighbouring columns put in order through a name bound to an element (the conformance
    case ``named_value``): the second store must see the value before the first."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            t = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], t)
            for i, j in T.Parallel(M, N):
                p = j ^ 1
                if j < p and t[i, j] > t[i, p]:
                    v = t[i, j]
                    t[i, j] = t[i, p]
                    t[i, p] = v
            T.copy(t, B[0, 0])

    return main


def test_a_compare_and_swap_on_tile_data_runs_as_selects():
    kernel = tilewright.compile(compare_and_swap(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "TW_SELECT(tw_c1, " in text and not re.search(r"if \([^\n]*GetValue", text)
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    pairs = a.reshape(8, 8, 2)
    want = torch.stack([pairs.min(-1).values, pairs.max(-1).values], -1).reshape(8, 16)
    torch.testing.assert_close(kernel(a), want)


def both_arms(M=8, N=24):
    """An if/else on tile data whose arms store two tiles each, the then arm reading a tile
    the else arm writes, and a nested branch on tile data."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"),
             Z: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M, N), "float32")
            z = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                if x[i, j] > 0:
                    y[i, j] = x[i, j] * 2.0
                    z[i, j] = 1.0
                    if x[i, j] > 1:
                        z[i, j] = 2.0
                else:
                    y[i, j] = -x[i, j]
                    z[i, j] = y[i, j] + 0.5
            T.copy(y, Y[0, 0])
            T.copy(z, Z[0, 0])

    return main


def test_an_if_else_with_a_nested_branch_on_tile_data():
    kernel = tilewright.compile(both_arms(), out_idx=[1, 2], target="ascend")
    a = torch.randn(8, 24, generator=torch.Generator().manual_seed(2)) * 2
    y, z = kernel(a)
    torch.testing.assert_close(y, torch.where(a > 0, a * 2, -a))
    torch.testing.assert_close(z, torch.where(a > 1, 2.0, torch.where(a > 0, 1.0, -a + 0.5)))


def test_a_branch_on_tile_data_that_stores_to_global_memory_is_a_scalar_branch():
    """Not selects (the arm stores to GM): a branch of the scalar unit, after the flag that
    orders the tile's load before its reads."""

    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as _:
            x = T.alloc_fragment((8, 8), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 8):
                if x[i, j] > 0:
                    B[(i * 3) % 8, j] = x[i, j]

    kernel = tilewright.compile(main, target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"WaitFlag<HardEvent::MTE2_S>.*\n(.*\n){0,4}.*if \(\(0\.0f < x\.GetValue",
                     text)
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(3))
    b = torch.zeros(8, 8)
    kernel(a, b)
    want = torch.zeros(8, 8)
    rows = (torch.arange(8) * 3) % 8
    want[rows] = torch.where(a > 0, a, want[rows])
    assert torch.equal(b, want)


def gated(dtype):
    @T.prim_func
    def main(A: T.Tensor((8, 16), dtype), B: T.Tensor((8, 16), dtype)):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((8, 16), dtype)
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 16):
                x[i, j] = T.if_then_else(x[i, j] > 0, T.exp(x[i, j]), 0.0)
            T.copy(x, B[0, 0])

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_exp_in_a_select_arm_is_computed_by_the_vector_unit(dtype):
    kernel = tilewright.compile(gated(dtype), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"\bExp\(tw_t\d+, x, ", text) and "TW_SELECT(" in text
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(3)).to(getattr(torch, dtype))
    torch.testing.assert_close(kernel(a), torch.where(a > 0, a.float().exp(), 0.0).to(a.dtype))


def select_on_indices(M=8, N=16):
    """Both arms transcendental (exp; tanh and log written with Exp/Ln), the select on the
    indices."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                x[i, j] = T.if_then_else(j <= i, T.exp(x[i, j] - 1.0),
                                         T.tanh(x[i, j]) + T.log(T.abs(x[i, j]) + 1.0))
            T.copy(x, B[0, 0])

    return main


def test_both_select_arms_transcendental():
    kernel = tilewright.compile(select_on_indices(), out_idx=[-1], target="ascend")
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(4))
    i = torch.arange(16)
    want = torch.where(i[None, :] <= i[:8, None], (a - 1).exp(), a.tanh() + (a.abs() + 1).log())
    torch.testing.assert_close(kernel(a), want)


def scalar_math():
    """exp of one element in a serial loop, and of one element into a scalar variable."""

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32"),
             C: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((8,), "float32")
            y = T.alloc_fragment((8,), "float32")
            s = T.alloc_var("float32")
            T.copy(A[0], x)
            for i in T.serial(8):
                y[i] = T.exp(x[i] * 0.5) + 1.0
            T.copy(y, B[0])
            s = T.sqrt(x[3] * x[3] + 1.0)
            for i in T.Parallel(8):
                x[i] = x[i] * s
            T.copy(x, C[0])

    return main


def test_scalar_math_runs_on_a_one_element_vector_tile():
    kernel = tilewright.compile(scalar_math(), out_idx=[1, 2], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"\bExp\(tw_t\d+, tw_t\d+, 1\)", text)
    assert re.search(r"\bSqrt\(tw_t\d+, tw_t\d+, 1\)", text)
    a = torch.randn(8, generator=torch.Generator().manual_seed(5))
    b, c = kernel(a)
    torch.testing.assert_close(b, (a * 0.5).exp() + 1.0)
    torch.testing.assert_close(c, a * (a[3] * a[3] + 1.0).sqrt())


def after_store():
    """The exp reads ``x`` after the nest's first store changes it: it cannot be computed before
    the nest, so the nest computes it element by element on the vector unit."""

    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((8, 8), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 8):
                x[i, j] = T.if_then_else(x[i, j] > 0, x[i, j], 0.0)
                # j % 3: float32 division by 3 is inexact, so the nest stays on the scalar unit
                x[i, j] = T.if_then_else(j % 3 == 0, T.exp(x[i, j]), x[i, j])
            T.copy(x, B[0, 0])

    return main


def test_exp_of_an_element_the_nest_stored_first_runs_inside_the_nest():
    kernel = tilewright.compile(after_store(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    # the scalar unit writes the argument, the vector unit computes exp, the scalar unit reads
    assert re.search(r"(tw_t\d+)\.SetValue\(0, [^\n]*\n\s*SetFlag<HardEvent::S_V>\((\d)\);\n"
                     r"\s*WaitFlag<HardEvent::S_V>\(\2\);\n(.*\n)*?\s*Exp\(tw_t\d+, \1, 1\);", text)
    a = torch.randn(8, 8, generator=torch.Generator().manual_seed(6))
    r = a.clamp(min=0)
    torch.testing.assert_close(kernel(a), torch.where(torch.arange(8)[None, :] % 3 == 0, r.exp(),
                                                      r))


def bound_in_nest(M=8, N=16):
    """Math on a name the nest binds: computed over the tile through the name's value."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(M, N):
                v = x[i, j] * 2.0
                y[i, j] = T.if_then_else(v > 0, T.log(v + 1.0), T.exp(v))
            T.copy(y, B[0, 0])

    return main


def test_math_on_a_name_the_nest_binds_runs_over_the_tile():
    kernel = tilewright.compile(bound_in_nest(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"\bLn\(tw_t\d+, tw_t\d+, 128\)", text)
    assert re.search(r"\bExp\(tw_t\d+, tw_t\d+, 128\)", text)
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(7))
    v = a * 2
    torch.testing.assert_close(kernel(a), torch.where(v > 0, (v + 1).log(), v.exp()))


def running_rows(M=4, N=8):
    """A serial loop inside a parallel one: each element through exp of the one before it."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], x)
            for i in T.Parallel(M):
                y[i, 0] = x[i, 0]
                for k in T.serial(N - 1):
                    y[i, k + 1] = T.tanh(y[i, k] * -0.5) + x[i, k + 1]
            T.copy(y, B[0, 0])

    return main


def running_serial(N=8):
    """A serial loop whose exp reads the element the iteration before stored, and one whose
    exp reads a name bound in the loop."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as _:
            a = T.alloc_fragment((N,), "float32")
            b = T.alloc_fragment((N,), "float32")
            c = T.alloc_fragment((N,), "float32")
            T.copy(A[0], a)
            b[0] = a[0]
            for i in T.serial(N - 1):
                b[i + 1] = T.exp(b[i] * -0.5) + a[i + 1]
            for i in T.serial(N):
                x = a[i] * 2.0
                c[i] = T.exp(x) + x
            T.copy(b, B[0])
            T.copy(c, C[0])

    return main


def test_math_on_values_a_scalar_loop_computes():
    a = torch.randn(4, 8, generator=torch.Generator().manual_seed(8))
    kernel = tilewright.compile(running_rows(), out_idx=[-1], target="ascend")
    want = a.clone()
    for k in range(7):
        want[:, k + 1] = (want[:, k] * -0.5).tanh() + a[:, k + 1]
    torch.testing.assert_close(kernel(a), want)
    a = a[0]
    kernel = tilewright.compile(running_serial(), out_idx=[1, 2], target="ascend")
    want = a.clone()
    for k in range(7):
        want[k + 1] = (want[k] * -0.5).exp() + a[k + 1]
    b, c = kernel(a)
    torch.testing.assert_close(b, want)
    torch.testing.assert_close(c, (a * 2).exp() + a * 2)


def across(dtype):
    """A name bound before a store and read after math inside the nest, nested math (the inner
    result read in place by the outer function) and a branch on the indices around it."""

    @T.prim_func
    def main(A: T.Tensor((4, 8), dtype), B: T.Tensor((4, 8), dtype)):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((4, 8), dtype)
            y = T.alloc_fragment((4, 8), dtype)
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(4, 8):
                v = x[i, j]
                x[i, j] = T.if_then_else(v > 0, v * 0.5, v)
                if j < 6:
                    y[i, j] = T.exp(T.exp(x[i, j] * 0.25)) + v
                else:
                    y[i, j] = T.sigmoid(x[i, j]) - v
            T.copy(y, B[0, 0])

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_names_math_and_branches_inside_a_split_nest(dtype):
    kernel = tilewright.compile(across(dtype), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"Exp\((tw_t\d+), tw_t\d+, 1\);(.*\n)*?\s*Exp\(tw_t\d+, \1, 1\);", text)
    a = torch.randn(4, 8, generator=torch.Generator().manual_seed(10)).to(getattr(torch, dtype))
    x = torch.where(a > 0, a * 0.5, a).float()
    j = torch.arange(8)[None, :]
    want = torch.where(j < 6, (x * 0.25).exp().exp() + a.float(), x.sigmoid() - a.float())
    tol = {"atol": 2e-2, "rtol": 1e-2} if dtype == "float16" else {}
    torch.testing.assert_close(kernel(a).float(), want, **tol)


def test_the_kernels_compile_against_the_vendor_headers(asc_check):
    """``auto`` names bound to GetValue reads, TW_SELECT of them, the one-element vector math."""
    kernels = {"swap": compare_and_swap(), "arms": both_arms(), "gated32": gated("float32"),
               "gated16": gated("float16"), "indices": select_on_indices(),
               "scalar": scalar_math(), "after_store": after_store(),
               "bound": bound_in_nest(), "rows": running_rows(), "serial": running_serial(),
               "across16": across("float16"), "column": column_math()}
    sources = {name: tilewright.lower(f, target="ascend").source.text
               for name, f in kernels.items()}
    findings = asc_check(sources)
    assert not findings, "\n\n".join(f"== {f.name} as {f.core}\n{f.text[-3000:]}"
                                     for f in findings)


def count_zeros(n=8, m=6):
    """An ``if`` on a value the scalar unit reads from GM (no tile: it stays a branch; the
    conformance case ``loop_jumps`` runs run-time break/continue, whose jump flag is one too)."""

    @T.prim_func
    def main(A: T.Tensor((n, m), "int32"), C: T.Tensor((n,), "int32")):
        with T.Kernel(n) as bx:
            count = T.alloc_var("int32", init=0)
            for j in T.serial(m):
                if A[bx, j] == 0:
                    count = count + 1
            C[bx] = count

    return main


def test_a_branch_on_a_value_read_from_memory_runs_the_arm_it_picks():
    kernel = tilewright.compile(count_zeros(), out_idx=[1], target="ascend")
    assert re.search(r"if \(\(A\.GetValue\(", kernel.get_kernel_source())
    a = torch.randint(0, 3, (8, 6), dtype=torch.int32, generator=torch.Generator().manual_seed(2))
    assert torch.equal(kernel(a), (a == 0).sum(1).to(torch.int32))


def test_a_branch_whose_read_cannot_finish_is_reported_at_the_branch(tmp_path):
    low = tilewright.lower(count_zeros(), target="ascend")
    branch = "if ((A.GetValue("
    text = low.source.text.replace(branch, "WaitFlag<HardEvent::MTE3_S>(3);\n" + branch, 1)
    line = text[:text.index(branch)].count("\n") + 1
    a = torch.zeros(8, 6, dtype=torch.int32)
    with pytest.raises(EmulatorError, match=rf"a branch on the value GetValue reads at "
                       rf"kernel\.cpp:{line} cannot be decided"):
        compile_and_run_source(text, low.source.payload, (a, torch.empty(8, dtype=torch.int32)),
                               tmp_path)


def column_math(M=8):
    """exp over a column read as ``t[i, (j + 1) % 1]`` (``t[i, 0]``) in T.Parallel(M, 1), in
    the arm of an if/else on the loop index (a scalar nest): the vector unit computes it into
    an (M, 1) tile, one element a 32-byte row, that the nest reads at ``[i, 0]``. It was read
    as ``[i]``, one index for two dimensions: a TVM InternalError at compile (the fuzzer, seed
    1, /work/findings/fuzz-ascend-internalerror.py)."""

    @T.prim_func
    def main(A: T.Tensor((M, 1), "float32"), B: T.Tensor((M, 1), "float32")):
        with T.Kernel(1, threads=32) as _:
            t = T.alloc_fragment((M, 1), "float32")
            y = T.alloc_shared((M, 1), "float32")
            T.copy(A[0, 0], t)
            for i in T.Parallel(M):
                for j in T.Parallel(1):
                    if i % 3 == 0:
                        y[i, j] = T.clamp(T.exp(t[i, (j + 1) % 1]), T.float32(-3.0),
                                          T.float32(0.25))
                    else:
                        y[i, j] = t[i, j] * 2.0
            T.copy(y, B[0, 0])

    return main


def test_math_over_a_column_read_by_a_scalar_nest():
    kernel = tilewright.compile(column_math(), out_idx=[-1], target="ascend")
    assert re.search(r"\bExp\(tw_t\d+\[r \* 8\], t\[r \* 8\], 1\)", kernel.get_kernel_source())
    a = torch.randn(8, 1, generator=torch.Generator().manual_seed(11))
    i = torch.arange(8)[:, None]
    torch.testing.assert_close(kernel(a), torch.where(i % 3 == 0, a.exp().clamp(-3.0, 0.25),
                                                      a * 2.0))


def named_element(N=64):
    """A name bound to a tile's element before the tile is written (``v = f[0]``): the scalar
    unit's read (GetValue on S) waits for the copy that fills the tile, and the value is the
    one at that line."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((N,), "float32")
            T.copy(A, f)
            v = f[0]
            f[0] = 5.0
            for i in T.Parallel(N):
                f[i] = f[i] + v
            T.copy(f, B)

    return main


def test_a_name_bound_to_a_tile_element_waits_for_its_copy():
    # the read stood before the MTE2 -> S wait (a race the emulator reports), and a
    # declaration of the read's type did not build on the emulator
    kernel = tilewright.compile(named_element(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert re.search(r"WaitFlag<HardEvent::MTE2_S>\(0\);\s+auto v = TW_CAST\(float, "
                     r"f\.GetValue\(0\)\);", text)
    a = torch.randn(64, generator=torch.Generator().manual_seed(2))
    want = a + a[0]
    want[0] = 5 + a[0]
    torch.testing.assert_close(kernel(a), want)
