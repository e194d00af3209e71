"""The vector path of portable kernels: T.Parallel nests, reductions, broadcasts, bounds-checked
copies, scalar-unit fallbacks, atomics and debug ops, checked in the generated source and on
the emulator."""

import re

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError
from tilewright_ascend.executor import EmulatorError, compile_and_run_source
from tilewright_sdk.conformance.catalogue import CATALOGUE


def _kernel(name, dtype="float32", variant="partial"):
    k = next(k for k in CATALOGUE if k.name == name)
    return k.make(dtype, **k.shapes[variant]), k.shapes[variant]


def _source(name, dtype="float32", variant="partial"):
    func, _ = _kernel(name, dtype, variant)
    return tilewright.lower(func, target="ascend")


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_softmax_and_rmsnorm_use_vector_instructions(name):
    text = _source(name).source.text
    assert "scalar fallback" not in text and "SetValue" not in text
    assert "WholeReduceSum(" in text and "DataCopyPad(" in text
    assert re.search(r"\bMuls\(", text)
    if name == "softmax":
        assert "WholeReduceMax(" in text and re.search(r"\bExp\(", text)
        # x - max[i]: one scalar per row, read by the scalar unit after a V -> S flag
        assert "row_max.GetValue(" in text and "WaitFlag<HardEvent::V_S>" in text
    else:
        assert re.search(r"\bSqrt\(", text) and re.search(r"\bReciprocal\(", text)
        assert re.search(r"\bMul\(x\[r_?\d* \* 24\], tw_t\d+\[r_?\d* \* 24\], tw_t\d+", text)


def test_partial_tiles_are_bounds_checked_copies():
    text = _source("elementwise").source.text
    # the guard `by * 16 + i < M and bx * 16 + j < N` is dropped: the copies check the bounds
    assert "scalar fallback" not in text
    assert text.count("DataCopyPad(") == 3 and "tw_rows" in text and "tw_cols" in text
    assert "Muls(" in text and "Add(" in text


def _clamp():
    @T.prim_func
    def clamp(A: T.Tensor((8, 24), "float32"), B: T.Tensor((8, 24), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 24), "float32")
            y = T.alloc_fragment((8, 24), "float32")
            T.copy(A[0, 0], x)
            for i, j in T.Parallel(8, 24):
                y[i, j] = T.if_then_else(x[i, j] > 0, x[i, j], x[i, j] * 0.5 + i)
            T.copy(y, B[0, 0])

    return clamp


def test_scalar_fallback_runs_on_the_s_pipe():
    kernel = tilewright.compile(_clamp(), out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "// scalar fallback on the S pipe" in text
    assert "x.GetValue(" in text and "y.SetValue(" in text
    assert "WaitFlag<HardEvent::MTE2_S>" in text and "WaitFlag<HardEvent::S_MTE3>" in text
    a = torch.randn(8, 24)
    rows = torch.arange(8, dtype=torch.float32)[:, None]
    torch.testing.assert_close(kernel(a), torch.where(a > 0, a, a * 0.5 + rows))


def test_mutation_scalar_unit_flags_are_races(tmp_path):
    """The scalar loop reads x after MTE2 wrote it and writes y before MTE3 reads it: both
    flags are needed, and the emulator reports each deletion."""
    low = tilewright.lower(_clamp(), target="ascend")
    lines = low.source.text.splitlines()
    detected = set()
    for n, (event, _, s, w) in enumerate(_pairs(lines)):
        text = "\n".join(line for i, line in enumerate(lines) if i not in (s, w))
        work = tmp_path / f"s{n}"
        work.mkdir()
        with pytest.raises(EmulatorError, match=r"race \("):
            compile_and_run_source(text, low.source.payload,
                                   (torch.randn(8, 24), torch.empty(8, 24)), work)
        detected.add(event)
    assert detected == {"MTE2_S", "S_MTE3"}


def _pairs(lines):
    """(event, id, set line, wait line) of every flag pair outside loops."""
    out = []
    for i, line in enumerate(lines):
        m = re.search(r"SetFlag<HardEvent::(\w+)>\((\d+)\);", line)
        if not m:
            continue
        wait = f"WaitFlag<HardEvent::{m[1]}>({m[2]});"
        j = next((k for k in range(i + 1, len(lines)) if wait in lines[k]), None)
        if j is not None:
            out.append((m[1], int(m[2]), i, j))
    return out


def test_mutation_deleted_flags_of_the_vector_path_are_races(tmp_path):
    """Delete one inserted set/wait pair at a time from softmax: each deletion that is not
    implied by another pair is reported by the emulator (the scalar reads of the row
    broadcast included)."""
    low = _source("softmax", "float32", "full")
    lines = low.source.text.splitlines()
    x = torch.randn(8, 32)
    detected, tried = set(), set()
    for n, (event, _, s, w) in enumerate(_pairs(lines)):
        if event in tried:  # one deletion per event keeps the test quick
            continue
        tried.add(event)
        text = "\n".join(line for i, line in enumerate(lines) if i not in (s, w))
        work = tmp_path / f"m{n}"
        work.mkdir()
        try:
            compile_and_run_source(text, low.source.payload, (x, torch.empty(8, 32)), work)
        except EmulatorError as exc:
            assert "race (" in str(exc), str(exc)
            detected.add(event)
    # an S -> V pair after GetValue alone is implied: the scalar unit stalls on GetValue,
    # so nothing issued after it starts earlier
    assert {"MTE2_V", "V_S", "V_MTE3"} <= detected, detected


def test_out_of_bounds_copy_is_reported(tmp_path):
    low = _source("copy")
    text = low.source.text
    clamp = re.search(r"int32_t tw_rows = [^;]+;", text)[0]
    broken = text.replace(clamp, "int32_t tw_rows = 16;", 1)
    work = tmp_path / "oob"
    work.mkdir()
    with pytest.raises(EmulatorError, match="outside every tensor argument"):
        compile_and_run_source(broken, low.source.payload,
                               (torch.randn(40, 24), torch.empty(40, 24)), work)


def test_device_assert_that_fails_names_the_source_line():
    @T.prim_func
    def check(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            T.copy(A[0], x)
            T.device_assert(bx < 1, "only block 0")
            T.copy(x, B[0])

    kernel = tilewright.compile(check, out_idx=[-1], target="ascend")
    with pytest.raises(EmulatorError, match=r"device assertion failed: .*test_ascend_vector"
                                            r"\.py:\d+: .*only block 0"):
        kernel(torch.randn(8))


def test_an_assert_of_each_element_runs_in_the_scalar_loop():
    """``assert A[i] >= 0`` inside a T.Parallel loop (T.device_assert of each element): the
    loop runs on the scalar unit with the assertion in it (it was refused: "cannot run an
    expression statement ... on the scalar unit")."""
    @T.prim_func
    def doubled(A: T.Tensor((16,), "int32"), B: T.Tensor((16,), "int32")):
        with T.Kernel(2) as bx:
            for i in T.Parallel(8):
                assert A[bx * 8 + i] >= 0, "negative input"
                B[bx * 8 + i] = A[bx * 8 + i] * 2

    kernel = tilewright.compile(doubled, out_idx=[-1], target="ascend")
    a = torch.arange(16, dtype=torch.int32)
    assert torch.equal(kernel(a), a * 2)
    a[11] = -3
    with pytest.raises(EmulatorError, match=r"device assertion failed: .*test_ascend_vector"
                                            r"\.py:\d+: .*negative input"):
        kernel(a)


def test_print_goes_to_stdout(capfd):
    func, dims = _kernel("debug")
    kernel = tilewright.compile(func, out_idx=[-1], target="ascend")
    a = torch.randn(dims["N"])
    torch.testing.assert_close(kernel(a), a)
    out = capfd.readouterr().out
    assert "conformance tile: x 1x8 float32" in out and "conformance value: 0 (int32)" in out
    assert "DumpTensor: desc=0" in out


def test_print_of_a_2d_tile_prints_one_row_a_line(capfd):
    @T.prim_func
    def main(A: T.Tensor((2, 4), "float32"), C: T.Tensor((2, 4), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((2, 4), "float32")
            T.copy(A[0, 0], x)
            T.print(x, msg="x")
            T.copy(x, C[0, 0])

    a = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    torch.testing.assert_close(tilewright.compile(main, out_idx=[-1], target="ascend")(a), a)
    out = capfd.readouterr().out
    # UB rows are 32-byte aligned: 4 float32 padded to 8, the padding shown and named
    assert "x: x 2x4 float32, rows padded to 8\nDumpTensor: desc=0, addr=0, data_type=float32, " \
        "position=UB, dump_size=16\n[[0.000000,1.000000,2.000000,3.000000,0.000000,0.000000," \
        "0.000000,0.000000],\n[4.000000,5.000000,6.000000,7.000000,0.000000,0.000000," \
        "0.000000,0.000000]]\n" in out, out


def test_ub_capacity_error_names_buffer_bytes_and_limit():
    @T.prim_func
    def big(A: T.Tensor((256, 256), "float32"), B: T.Tensor((256, 256), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            huge = T.alloc_fragment((256, 256), "float32")
            T.copy(A[0, 0], huge)
            T.copy(huge, B[0, 0])

    with pytest.raises(KernelError) as info:
        tilewright.lower(big, target="ascend")
    message = str(info.value)
    assert "'huge'" in message and "262144 bytes" in message and "196608" in message, message


def test_math_functions_without_an_instruction_are_written_with_those_a2_has():
    """log2 = Ln / ln 2, tanh through Exp and a polynomial, sin and cos by a reduction to
    [-pi, pi] (a Cast with CAST_RINT) and Taylor series of the half angle, floor/ceil/round/
    trunc as float32 Casts in their modes: every element within the float32 tolerance model,
    over a range wider than the catalogue's (|x| up to 40)."""
    fns = {"log2": (lambda v: T.log2(T.abs(v) + 0.5), lambda v: (v.abs() + 0.5).log2()),
           "tanh": (T.tanh, torch.tanh), "sin": (T.sin, torch.sin), "cos": (T.cos, torch.cos),
           "floor": (T.floor, torch.floor), "ceil": (T.ceil, torch.ceil),
           "round": (T.round, torch.round), "trunc": (T.trunc, torch.trunc)}

    @T.prim_func
    def math_fns(X: T.Tensor((8, 64), "float32"), Y: T.Tensor((8, 8, 64), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 64), "float32")
            y = T.alloc_fragment((8, 64), "float32")
            T.copy(X[0, 0], x)
            for k, (fn, _) in enumerate(fns.values()):
                for i, j in T.Parallel(8, 64):
                    y[i, j] = fn(x[i, j])
                T.copy(y, Y[k, 0, 0])

    kernel = tilewright.compile(math_fns, out_idx=[-1], target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text
    for mode in ("CAST_FLOOR", "CAST_CEIL", "CAST_RINT", "CAST_TRUNC"):
        assert f"RoundMode::{mode}" in text
    x = torch.linspace(-40, 40, 8 * 64).reshape(8, 64)
    x[0, :8] = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1e-4, -1e-4])  # halves to even
    got = kernel(x)
    for k, (name, (_, ref)) in enumerate(fns.items()):
        tilewright.testing.assert_close(got[k], ref(x.double()), dtype="float32", name=name)


def test_tanh_is_within_two_ulp_down_to_tiny_inputs():
    # 1 - 2 / (e**2x + 1) alone cancels for small |x|: 2e7 ulp off near 1e-8, 977 the median
    @T.prim_func
    def tanh(X: T.Tensor((8, 64), "float32"), Y: T.Tensor((8, 64), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8, 64), "float32")
            T.copy(X[0, 0], x)
            for i, j in T.Parallel(8, 64):
                x[i, j] = T.tanh(x[i, j])
            T.copy(x, Y[0, 0])

    magnitudes = torch.logspace(-30, 1.5, 254)
    x = torch.cat([magnitudes, -magnitudes, torch.tensor([0.0, 0.625, -0.625, 100.0])])
    got = tilewright.compile(tanh, out_idx=[-1], target="ascend")(x.reshape(8, 64)).flatten()
    exact = torch.tanh(x.double())
    nearest = exact.float().abs()
    ulp = (torch.nextafter(nearest, torch.tensor(float("inf"))) - nearest).double()
    assert ((got.double() - exact).abs() / ulp).max() <= 2.0


def test_atomic_return_prev_is_refused_with_a_reason():
    @T.prim_func
    def prev(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((8,), "float32")
            for i in T.serial(8):
                x[i] = T.atomic_add(A[i], 1.0, return_prev=True)
            T.copy(x, B[0])

    with pytest.raises(KernelError, match=r"T.atomic_add\(..., return_prev=True\) \(an atomic "
                                          r"add of one element returning the previous value\) "
                                          r"is not supported by backend 'ascend' \(it does not "
                                          r"declare the feature 'atomic_return_prev'\)") as info:
        tilewright.lower(prev, target="ascend")
    assert "x[i] = T.atomic_add(A[i], 1.0, return_prev=True)" in str(info.value)


def test_long_rows_column_reductions_and_reversed_operands():
    """Rows longer than one 256-byte repeat (folded before WholeReduce), abs reductions down
    the columns, reductions that accumulate (clear=False), and operands in reversed order:
    scalar - tile, scalar / tile, column - tile."""

    @T.prim_func
    def mix(X: T.Tensor((6, 100), "float32"), W: T.Tensor((100,), "float32"),
            Y: T.Tensor((6, 100), "float32"), R: T.Tensor((6,), "float32"),
            C: T.Tensor((100,), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            x = T.alloc_fragment((6, 100), "float32")
            y = T.alloc_fragment((6, 100), "float32")
            r = T.alloc_fragment((6,), "float32")
            c = T.alloc_fragment((100,), "float32")
            T.copy(X[0, 0], x)
            T.reduce_sum(x, r, dim=1)
            T.reduce_absmax(x, r, dim=1, clear=False)
            T.reduce_absmax(x, c, dim=0)
            for i, j in T.Parallel(6, 100):
                y[i, j] = (2.0 - x[i, j]) + W[j] - x[i, j] * 3.0 + 1.0 / (T.abs(x[i, j]) + 1.0)
            T.copy(y, Y[0, 0])
            T.copy(r, R[0])
            T.copy(c, C[0])

    kernel = tilewright.compile(mix, out_idx=[2, 3, 4], target="ascend")
    text = kernel.get_kernel_source()
    assert "scalar fallback" not in text and "WholeReduceMax(" in text
    x, w = torch.randn(6, 100), torch.randn(100)
    y, r, c = kernel(x, w)
    torch.testing.assert_close(y, (2.0 - x) + w - x * 3.0 + 1.0 / (x.abs() + 1.0))
    torch.testing.assert_close(r, torch.maximum(x.sum(1), x.abs().amax(1)))
    torch.testing.assert_close(c, x.abs().amax(0))


def integer_reductions(dtype, M=6, N=10):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), S: T.Tensor((M,), dtype), A: T.Tensor((N,), dtype),
             L: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=32) as _:
            x = T.alloc_fragment((M, N), dtype)
            s = T.alloc_fragment((M,), dtype)
            a = T.alloc_fragment((N,), dtype)
            row = T.alloc_fragment((N,), dtype)
            low = T.alloc_fragment((1,), dtype)
            T.copy(X[0, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.reduce_absmax(x, a, dim=0)
            T.copy(X[2, 0], row)
            T.reduce_min(row, low, dim=0)
            T.copy(s, S[0])
            T.copy(a, A[0])
            T.copy(low, L[0])

    return main


@pytest.mark.parametrize("dtype", ["int16", "int32"])
def test_integer_reductions_run_on_the_scalar_unit(dtype, asc_check):
    """A2's WholeReduce takes floats: integer reductions are scalar loops (a sum wraps)."""
    func = integer_reductions(dtype)
    text = tilewright.lower(func, target="ascend").source.text
    assert not re.search(r"WholeReduce\w*\(", text) and f"T.reduce_sum of {dtype}" in text
    kernel = tilewright.compile(func, out_idx=[1, 2, 3], target="ascend")
    x = torch.randint(-3000, 3000, (6, 10), generator=torch.Generator().manual_seed(9),
                      dtype=getattr(torch, dtype))
    s, a, low = kernel(x)
    torch.testing.assert_close(s, x.sum(1, dtype=x.dtype))
    torch.testing.assert_close(a, x.abs().amax(0))
    torch.testing.assert_close(low, x[2].amin().reshape(1))
    from_headers = asc_check({dtype: text})
    assert not from_headers, from_headers[0].text[-3000:]
