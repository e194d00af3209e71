"""The interpreter: generated Python, debugging, and agreement with the CPU backend."""

import sys
import warnings
from pathlib import Path

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.plugin import get_manager
from tilewright.testing import ToleranceError, assert_close, float64_reference
from tilewright_interp import lowering

catalogue = pytest.importorskip("tilewright_sdk.conformance.catalogue")
runner = pytest.importorskip("tilewright_sdk.conformance.runner")

UNGUARDED = {"tl.disable_safe_memory_legalize": True}  # TileLang's switch


def _row_sum(M, N, bm=4):
    @T.prim_func
    def row_sum(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            tile = T.alloc_fragment((bm, N), "float32")
            acc = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], tile)
            T.reduce_sum(tile, acc, dim=1)
            T.print(acc, msg="row sums")
            T.device_assert(acc[0] == acc[0], "no NaN")
            T.copy(acc, Y[bx * bm])

    return row_sum


def test_generated_source_is_python_named_after_the_kernel():
    kernel = tilewright.compile(_row_sum(10, 12), out_idx=[-1], target="interp")
    source = kernel.get_kernel_source()
    assert kernel.source_ext == "py"
    compile(source, "kernel.py", "exec")  # valid Python
    assert "def row_sum(X_arg, Y_arg):" in source
    assert "for bx in range(3):  # block index" in source
    assert "tile = rt.alloc((4, 12,), 'float32')  # local.fragment" in source
    assert "RULES['reduce_sum']" in source
    x = torch.randn(10, 12)
    torch.testing.assert_close(kernel(x), x.sum(1), rtol=1e-6, atol=1e-6)


def test_blocks_run_one_at_a_time_and_tiles_are_visible_to_a_debugger(capfd):
    kernel = tilewright.compile(_row_sum(8, 6), out_idx=[-1], target="interp")
    x = torch.arange(48, dtype=torch.float32).reshape(8, 6)
    seen = []
    assert (Path(kernel.artifact_dir) / "kernel.py").read_text() == kernel.get_kernel_source()

    def tracer(frame, event, arg):
        if frame.f_code.co_name == "row_sum" and Path(frame.f_code.co_filename).name == "kernel.py":
            if event == "return":  # the kernel's frame: every tile is a local NumPy array
                seen.append(frame.f_locals["acc"].copy())
            return tracer
        return None

    sys.settrace(tracer)
    try:
        kernel(x)
    finally:
        sys.settrace(None)
    assert seen and list(seen[-1]) == [float(v) for v in x[4:8].sum(1)]  # the last block
    out = capfd.readouterr().out
    assert out.index("[block (0,)] row sums: acc shape (4,) float32") < \
        out.index("[block (1,)] row sums")


def test_device_assert_stops_the_kernel_with_its_message():
    @T.prim_func
    def checked(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            T.device_assert(X[0] > 0, "X[0] must be positive")
            for i in T.Parallel(4):
                Y[i] = X[i]

    kernel = tilewright.compile(checked, out_idx=[-1], target="interp")
    assert kernel(torch.ones(4)).sum() == 4
    with pytest.raises(RuntimeError, match=r"device_assert failed: X\[0\] must be positive"):
        kernel(-torch.ones(4))


def test_an_element_outside_its_tensor_is_named_at_the_users_line():
    """An index read from a tensor that leaves the tensor (TileLang's sparse MLA reads its KV
    at its sentinel index): the load reads 0, as TileLang's guard makes it; with the guard
    switched off (TL_DISABLE_SAFE_MEMORY_ACCESS), NumPy's IndexError, reported at the
    kernel's line."""

    @T.prim_func
    def gather(X: T.Tensor((8,), "float32"), Idx: T.Tensor((8,), "int32"),
               Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(8):
                Y[i] = X[Idx[i]] * 2.0

    x, y = torch.arange(8.0), torch.zeros(8)
    guarded = tilewright.compile(gather, target="interp")
    guarded(x, torch.tensor([0, 1, 2, 3, 4, 5, 6, 8], dtype=torch.int32), y)
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 0.0]
    kernel = tilewright.compile(gather, target="interp", pass_configs=UNGUARDED)
    kernel(x, torch.tensor([7, 6, 5, 4, 3, 2, 1, 0], dtype=torch.int32), y)
    assert y.tolist() == [14.0, 12.0, 10.0, 8.0, 6.0, 4.0, 2.0, 0.0]
    with pytest.raises(tilewright.errors.KernelIndexError) as info:
        kernel(x, torch.tensor([0, 1, 2, 3, 4, 5, 6, 8], dtype=torch.int32), y)
    message = str(info.value)
    assert message.startswith(f"{__file__}:")  # the user's file and line first
    assert "index 8 is out of bounds for axis 0 with size 8" in message
    assert "Y[i] = X[Idx[i]] * 2.0" in message  # the user's line, quoted
    assert isinstance(info.value, IndexError)  # still one for code that caught NumPy's


def test_an_element_before_its_tensor_is_an_error_not_the_last_element():
    """NumPy reads ``X[-1]`` as the last element; the hardware reads before the array. With
    TileLang's guard switched off, a negative index the loops do not rule out is checked when
    the kernel runs; indices they prove non-negative (loop variables, the block index) are
    emitted unchecked."""

    @T.prim_func
    def shift(X: T.Tensor((8,), "float32"), Off: T.Tensor((1,), "int32"),
              Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                Y[i] = X[i - Off[0]] + X[bx * 8 + i]

    kernel = tilewright.compile(shift, target="interp", pass_configs=UNGUARDED)
    x, y = torch.arange(8.0), torch.zeros(8)
    kernel(x, torch.tensor([0], dtype=torch.int32), y)
    assert y.tolist() == [2.0 * v for v in range(8)]
    with pytest.raises(tilewright.errors.KernelIndexError) as info:
        kernel(x, torch.tensor([1], dtype=torch.int32), y)
    message = str(info.value)
    assert message.startswith(f"{__file__}:")
    assert "index -1 is out of bounds for axis 0 of X (negative)" in message
    source = kernel.get_kernel_source()
    assert source.count("rt.element_index(") == 1, source  # X[i - Off[0]] only


def test_a_wrong_rule_is_caught_by_the_conformance_case(monkeypatch):
    backend = get_manager().backends()["interp"]
    case = next(c for c in catalogue.cases(["reduce_sum"]) if c.dtype == "float32")
    assert "max relative error" in runner.run_case(case, backend, "execute")
    monkeypatch.setitem(lowering.RULES, "reduce_sum", lowering.RULES["reduce_max"])
    with pytest.raises(ToleranceError, match="elements .* differ beyond tolerance"):
        runner.run_case(case, backend, "execute")


@pytest.mark.parametrize("name", ["gemm_nt", "softmax", "cumsum", "atomic_add",
                                  "attention"])
def test_cpu_backend_agrees_with_the_interpreter(name):
    """The interpreter is the semantics reference the CPU backend is cross-checked against."""
    if "cpu" not in get_manager().backends():
        pytest.skip("tilewright-cpu is not installed")
    for case in catalogue.cases([name]):
        if case.dtype != "float16":
            continue
        kernel = case.kernel
        func = kernel.make(case.dtype, **case.dims)
        gen = torch.Generator().manual_seed(1)
        inputs = kernel.inputs(torch, gen, case.dtype, **case.dims)
        outs = {}
        for target in ("interp", "cpu"):
            compiled = tilewright.compile(func, out_idx=list(kernel.out_idx), target=target)
            args = [t.clone() for t in inputs]
            result = compiled(*args)
            result = [] if result is None else [result] if torch.is_tensor(result) else result
            outs[target] = [*result, *(args[i] for i in kernel.inplace)]
        expected = float64_reference(kernel.reference, *inputs)
        for ours, cpu, want in zip(outs["interp"], outs["cpu"], expected):
            k = kernel.reduction(**case.dims)
            assert_close(ours, want, reduction_length=k, name=f"interp {case.id}")
            assert_close(cpu, ours.double(), reduction_length=k, name=f"cpu vs interp {case.id}")


def test_an_op_without_a_rule_is_refused_at_compile_time(monkeypatch):
    monkeypatch.delitem(lowering.RULES, "cumsum")
    backend = get_manager().backends()["interp"]
    case = catalogue.cases(["cumsum"])[0]
    from tilewright.engine import lower

    with pytest.raises(tilewright.UnsupportedOpError,
                       match="T.cumsum is not supported by backend 'interp'"):
        lower(case.kernel.make(case.dtype, **case.dims), "interp")
    assert backend.name == "interp"


def test_bitwise_and_shifts_in_a_kernel_named_like_a_runtime_helper():
    """``& | ^ ~ << >>`` run (>> of a negative value is arithmetic), and a kernel called
    ``atomic_prev`` does not shadow the helper of the same name its code calls."""

    @T.prim_func
    def atomic_prev(X: T.Tensor((4,), "int32"), Y: T.Tensor((6, 4), "int32"),
                    C: T.Tensor((1,), "int32")):
        with T.Kernel(1) as _bx:
            for i in T.Parallel(4):
                Y[0, i] = X[i] & 6
                Y[1, i] = X[i] | 1
                Y[2, i] = X[i] ^ 3
                Y[3, i] = ~X[i]
                Y[4, i] = T.abs(X[i]) << 2
                Y[5, i] = X[i] >> 1
            C[0] = T.atomic_add(C[0], 5, return_prev=True)

    kernel = tilewright.compile(atomic_prev, out_idx=[1], target="interp")
    x, c = torch.tensor([-5, -1, 2, 7], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    y = kernel(x, c)
    want = torch.stack([x & 6, x | 1, x ^ 3, ~x, x.abs() << 2, x >> 1])
    assert torch.equal(y, want) and c.item() == 0


def test_a_loop_whose_body_simplified_away_is_valid_python():
    """A branch that can never run (found by the differential fuzzer) leaves its loop with no
    statement: the generated block holds ``pass``."""

    @T.prim_func
    def never(X: T.Tensor((1, 4), "int8"), Y: T.Tensor((1, 4), "int8")):
        with T.Kernel(1, threads=128) as bx:
            t = T.alloc_fragment((1, 4), "int8")
            T.fill(t, 0)
            for i, j in T.Parallel(1, 4):
                if T.int8(0) < T.int8(0):
                    t[i, j] = X[i, j]
            T.copy(t, Y[0, bx * 4])

    kernel = tilewright.compile(never, out_idx=[-1], target="interp")
    assert "pass" in kernel.get_kernel_source()
    x = torch.ones(1, 4, dtype=torch.int8)
    torch.testing.assert_close(kernel(x), torch.zeros_like(x))


@pytest.mark.parametrize("src, via", [("int64", "uint8"), ("int32", "int8"), ("int32", "int16"),
                                      ("int16", "uint8")])
def test_an_integer_cast_wraps_into_the_narrower_type(src, via):
    """``T.cast`` to a narrower integer dtype wraps modulo its size, as torch, C and the CPU
    backend convert (found by the differential fuzzer, seed 20: the interpreter kept -7 as
    -7 through uint8 instead of 249)."""

    @T.prim_func
    def narrow(X: T.Tensor((6,), src), Y: T.Tensor((6,), src)):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(6):
                Y[bx * 6 + i] = T.cast(T.cast(X[bx * 6 + i], via), src)

    x = torch.tensor([-7, -1, 300, 5, 200, -200], dtype=getattr(torch, src))
    want = x.to(getattr(torch, via)).to(x.dtype)
    assert torch.equal(tilewright.compile(narrow, out_idx=[-1], target="interp")(x), want)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_unsigned_arithmetic_of_a_block_index_wraps(dtype):
    """``T.cast(bx, dtype) - 1`` at block 0 is ``2**bits - 1`` (unsigned arithmetic wraps, as
    torch's does): the interpreter held it as the Python int -1 and failed adding it to a
    loaded element ('Python integer -1 out of bounds for uint16', fuzzer seed 502)."""
    bits = int(dtype[4:])

    @T.prim_func
    def main(X: T.Tensor((4,), dtype), Y: T.Tensor((4,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            for j in T.Parallel(4):
                Y[j] = X[j] + (T.cast(bx, dtype) - T.cast(1, dtype)) // T.cast(3, dtype) + \
                    T.cast(bx, dtype) * T.cast(3, dtype) - T.cast(j + 1, dtype)

    x = torch.arange(4, dtype=torch.int64)
    want = (x + (2**bits - 1) // 3 - (x + 1)) % 2**bits
    got = tilewright.compile(main, out_idx=[1], target="interp")(x.to(getattr(torch, dtype)))
    assert torch.equal(got.long() % 2**bits, want)


def test_wrapping_and_division_by_zero_run_without_numpy_warnings():
    """A uint8 sum that wraps and a float division by zero give what torch gives (the
    wrapped value, inf), and NumPy warns of neither (a warning per element buried a
    kernel's own output)."""
    @T.prim_func
    def wrap_and_divide(A: T.Tensor((4,), "uint8"), X: T.Tensor((4,), "float32"),
                        S: T.Tensor((4,), "uint8"), Q: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                S[i] = A[i] + A[i]
                Q[i] = X[i] / (X[i] - X[i])

    kernel = tilewright.compile(wrap_and_divide, out_idx=[2, 3], target="interp")
    a = torch.tensor([200, 1, 128, 255], dtype=torch.uint8)
    x = torch.tensor([1.0, -2.0, 3.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, q = kernel(a, x)
    assert torch.equal(s, a + a)
    assert torch.equal(q, x / (x - x))
