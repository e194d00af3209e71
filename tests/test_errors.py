"""Bad kernels and bad calls: one clear error that names the problem and the user's line."""

import pathlib
import runpy

import pytest
import tilewright
import tilewright.language as T
import torch
from source_lines import Markers

_M = Markers(__file__)
THIS, line_of, assert_at = _M.path, _M.line_of, _M.assert_at


def build(factory, *args):
    return tilewright.jit(factory, out_idx=[-1], target="cpu")(*args)


def trace_file(tmp_path, kernel: str) -> None:
    """Trace ``kernel`` (a ``@T.prim_func``'s source, spliced from a parameter) from a module
    file of its own, as a user's kernel is: its error then quotes that file's line."""
    path = tmp_path / "kernel.py"
    path.write_text("import tilewright.language as T\n" + kernel)
    runpy.run_path(str(path))


# -- errors while tracing a kernel -----------------------------------------------------------
def test_copy_shape_mismatch():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                s = T.alloc_shared((32, 16), "float32")
                T.copy(A[0:32, 0:32], s)  # copy-mismatch
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "copy-mismatch", "T.copy shape mismatch", "(32, 32)", "(32, 16)")


def test_gemm_k_mismatch():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                a = T.alloc_shared((32, 16), "float32")
                b = T.alloc_shared((8, 32), "float32")
                c = T.alloc_fragment((32, 32), "float32")
                T.gemm(a, b, c)  # gemm-k
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "gemm-k", "K mismatch", "16", "8")


def test_unknown_dtype_lists_close_matches():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                s = T.alloc_shared((64,), "flaot16")  # bad-dtype
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "bad-dtype", "unknown dtype 'flaot16'", "'float16'")
    assert str(info.value).count("unknown dtype") == 1


def test_unknown_dtype_in_tensor_annotation():
    with pytest.raises(tilewright.KernelError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "flaot16")):  # bad-annotation
            with T.Kernel(1) as bx:
                pass
    assert_at(info.value, "bad-annotation", "unknown dtype 'flaot16'", "'float16'")


def test_undefined_name_points_at_line():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(64):
                    C[i] = A[i] + undefined_thing  # noqa: F821 # undefined-name
        return main

    with pytest.raises(NameError) as info:
        build(k)
    assert "undefined_thing" in str(info.value)
    # the traceback's innermost frame in this file is the offending line
    frames = [f for f in info.traceback if pathlib.Path(str(f.path)) == THIS]
    assert frames[-1].lineno + 1 == line_of("undefined-name")


def test_alloc_inside_parallel():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for _i in T.Parallel(64):
                    t = T.alloc_local((1,), "float32")  # alloc-parallel
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "alloc-parallel", "inside a T.Parallel loop")


def test_reduce_wrong_output_shape_is_value_error():
    def k():
        @T.prim_func
        def main(A: T.Tensor((16, 8), "float32"), C: T.Tensor((16,), "float32")):
            with T.Kernel(1) as bx:
                t = T.alloc_fragment((16, 8), "float32")
                r = T.alloc_fragment((8,), "float32")
                T.reduce_sum(t, r, dim=1)  # reduce-shape
        return main

    with pytest.raises(ValueError) as info:
        build(k)
    assert_at(info.value, "reduce-shape", "T.reduce_sum", "(8,)", "(16,)")


def test_nested_pipelined():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for k in T.Pipelined(4, num_stages=2):
                    for j in T.Pipelined(4, num_stages=2):  # nested-pipelined
                        C[k * 16 + j] = A[k * 16 + j]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "nested-pipelined", "T.Pipelined cannot be nested")


@pytest.mark.parametrize("stages", [-1, 1.5, "3"])
def test_pipelined_stages_must_be_a_count(stages):
    """Before: -1 was accepted and 1.5 truncated to 1, silently."""
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for k in T.Pipelined(4, num_stages=stages):  # bad-stages
                    C[k] = A[k]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "bad-stages", "T.Pipelined's num_stages must be an int >= 0")


@pytest.mark.parametrize("grid", [(0,), (4, -1)])
def test_a_grid_without_blocks_is_refused_at_the_line(grid):
    """Before: TVM's "Check failed: pb->value != 0 (0 vs. 0) : Divide by zero", no line."""
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(*grid, threads=32):  # empty-grid
                for i in T.Parallel(32):
                    C[i] = A[i]
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "empty-grid", "T.Kernel grid dimensions must be positive")


@pytest.mark.parametrize("name, words", [
    ("ptx_wait_group", "no T.ptx_wait_group: the cuda dialect has it (import "
                       "tilewright_cuda.language as T; it compiles for cuda)"),
    ("reduce_summ", "no T.reduce_summ; did you mean T.reduce_sum"),
    ("not_a_tile_op", "no T.not_a_tile_op; docs/porting-from-tilelang.md")])
def test_a_name_the_language_lacks_says_where_it_is(name, words):
    """Before: "module 'tilewright.language' has no attribute 'ptx_wait_group'"."""
    with pytest.raises(AttributeError) as info:
        getattr(T, name)
    assert words in str(info.value)
    assert not hasattr(T, "__wrapped__")  # dunders stay plain, for inspect and pytest


def test_a_language_function_named_in_a_wrong_call():
    """Before: Python named the factory's inner function ("_float_binary.<locals>.op()")."""
    with pytest.raises(TypeError, match=r"^T\.pow\(\) missing 1 required positional"):
        T.pow(1.0)
    with pytest.raises(TypeError, match=r"^T\.exp\(\) takes 1 positional argument"):
        T.exp(1.0, 2.0)


@pytest.mark.parametrize("keyword, words", [
    ("thread=256", "T.Kernel got an unexpected keyword argument 'thread'; did you mean "
                   "'threads'?"),
    ("prelud=''", "unexpected keyword argument 'prelud'; did you mean 'prelude'?")])
def test_a_misspelt_kernel_keyword_is_refused(tmp_path, keyword, words):
    """Before: any keyword was taken and dropped: ``thread=256`` ran with 128 threads."""
    with pytest.raises(tilewright.KernelError) as info:
        trace_file(tmp_path, f"""
@T.prim_func
def main(A: T.Tensor((64,), "float32")):
    with T.Kernel(1, {keyword}):
        A[0] = 1.0
""")
    assert words in str(info.value) and f"T.Kernel(1, {keyword})" in str(info.value)


@pytest.mark.parametrize("dim", ["'x'", "True", "None"])
def test_a_tensor_dimension_that_is_not_an_integer_is_refused(tmp_path, dim):
    """Before: TVM's "AssertionError: data must be int or Expr, but got x", no line."""
    with pytest.raises(tilewright.KernelError, match=r"T.Tensor shape .*: dimension 0 is .*; "
                                                     r"they are ints, T.dynamic symbols"):
        trace_file(tmp_path, f"""
@T.prim_func
def main(A: T.Tensor(({dim}, 4), "float32")):
    with T.Kernel(1):
        A[0, 0] = 1.0
""")


def test_a_float_index_is_refused_at_the_line():
    """Before: LLVM's "Expected buffer index to be an integer", with no line."""
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(32):
                    C[i] = A[i * 0.5]  # float-index
        return main

    with pytest.raises(tilewright.KernelError) as info:
        build(k)
    assert_at(info.value, "float-index", "an index of 'A' is float32")


@pytest.mark.parametrize("out_idx, words", [
    ([3], "out_idx 3 is out of range for the 3 parameters (A, C, s)"),
    (-4, "out_idx -4 is out of range"),
    (1.5, "out_idx must be an int or a list of ints"),
    (["C"], "out_idx must be an int or a list of ints")])
def test_out_idx_out_of_range_is_refused(out_idx, words):
    """Before: taken modulo the parameter count, out_idx=[3] of 3 parameters made the first
    input an output, silently."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32"), s: T.float32):
        with T.Kernel(1) as bx:
            for i in T.Parallel(64):
                C[i] = A[i] * s

    with pytest.raises(tilewright.TilewrightError) as info:
        tilewright.compile(main, out_idx=out_idx, target="cpu")
    assert words in str(info.value)


def test_unknown_pass_config_lists_close_matches():
    def k():
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(64):
                    C[i] = A[i]
        return main

    fn = tilewright.jit(k, out_idx=[-1], target="cpu",
                        pass_configs={"tw.disable_vectorise": True})
    with pytest.raises(tilewright.ConfigError) as info:
        fn()
    assert "unknown pass_configs key 'tw.disable_vectorise'" in str(info.value)
    assert "'tw.disable_vectorize'" in str(info.value)


# -- errors when calling a kernel ------------------------------------------------------------
@tilewright.jit(out_idx=[-1], target="cpu")
def add2d(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1) as bx:
            for i, j in T.Parallel(M, N):
                C[i, j] = A[i, j] + B[i, j]
    return main


@pytest.fixture
def kernel(monkeypatch):
    k = add2d(8, 4)
    calls = []
    inner = k._fn
    monkeypatch.setattr(k, "_fn", lambda *a: calls.append(a) or inner(*a))
    yield k
    assert not calls, "the kernel ran despite a bad argument"


def good():
    return torch.randn(8, 4)


@pytest.mark.parametrize("bad,words", [
    (lambda: (good(), torch.randn(8, 5)), ["'B'", "(8, 4)", "(8, 5)"]),
    (lambda: (good(), torch.randn(8)), ["'B'", "2 dimension"]),
    (lambda: (good().double(), good()), ["'A'", "float32", "float64"]),
    (lambda: (good(), torch.empty(8, 4, device="meta")), ["'B'", "device", "meta"]),
    (lambda: (good(),), ["2 input", "A, B", "got 1"]),
    (lambda: (good(), good(), good()), ["2 input", "got 3"]),
    (lambda: (good(), 3.0), ["'B'", "torch.Tensor"]),
    (lambda: (good(), good().numpy()), ["'B'", "torch.Tensor", "ndarray"]),
])
def test_bad_call_is_argument_error(kernel, bad, words):
    with pytest.raises(tilewright.ArgumentError) as info:
        kernel(*bad())
    for word in words:
        assert word in str(info.value), str(info.value)
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("api", ["lower", "compile", "par_compile"])
def test_lower_and_compile_name_what_is_not_a_kernel(api):
    call = getattr(tilewright, api)
    wrap = (lambda x: [x]) if api == "par_compile" else (lambda x: x)
    with pytest.raises(tilewright.ArgumentError, match=f"tilewright.{api} takes a T.prim_func.*"
                       "got str 'main'"):
        call(wrap("main"), target="cpu")
    factory = tilewright.jit(add2d, out_idx=[-1], target="cpu")
    with pytest.raises(tilewright.ArgumentError, match=r"the @jit function 'add2d': pass "
                       r"add2d.get_tir\(<its arguments>\)"):
        call(wrap(factory), target="cpu")


def test_lower_takes_a_compiled_kernels_program():
    k = tilewright.compile(add2d(8, 4), out_idx=[-1], target="cpu")
    same = tilewright.lower(add2d(8, 4), "cpu").source.text
    assert tilewright.lower(k, "cpu").source.text == same
    a, b = good(), good()
    torch.testing.assert_close(tilewright.compile(k, out_idx=[-1], target="cpu")(a, b), a + b)


def test_good_call_after_bad_call_runs():
    k = add2d(8, 4)
    with pytest.raises(tilewright.ArgumentError):
        k(good(), good().double())
    a, b = good(), good()
    torch.testing.assert_close(k(a, b), a + b)


def test_dynamic_dim_only_in_output_is_type_error_at_call():
    @tilewright.jit(out_idx=[-1], target="cpu")
    def pad(M):
        n = T.dynamic("n")

        @T.prim_func
        def main(A: T.Tensor((M,), "float32"), C: T.Tensor((n,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.serial(n):
                    C[i] = A[0]
        return main

    k = pad(8)
    with pytest.raises(TypeError) as info:
        k(torch.randn(8))
    assert "'C'" in str(info.value) and "n" in str(info.value)


def test_op_dtypes_refuse_an_input_dtype_at_the_users_line():
    import dataclasses

    from tilewright.engine.session import check_support
    from tilewright.errors import UnsupportedOpError
    from tilewright.plugin import get_manager

    @T.prim_func
    def gemm32(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32"),
               C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            c = T.alloc_fragment((16, 16), "float32")
            T.clear(c)
            T.gemm(A[0:16, 0:16], B[0:16, 0:16], c)  # gemm-f32
            T.copy(c, C)

    cpu = get_manager().backends()["cpu"]
    narrow = dataclasses.replace(cpu, capabilities=dataclasses.replace(
        cpu.capabilities, op_dtypes={"gemm": {"float16", "bfloat16"}}))
    check_support(gemm32, cpu)
    with pytest.raises(UnsupportedOpError) as info:
        check_support(gemm32, narrow)
    assert_at(info.value, "gemm-f32", "T.gemm on float32 operands (A) is not supported by "
              "backend 'cpu' (it takes bfloat16, float16)")


def _float16_kernels():
    """Kernels using float16 as a parameter, an allocation and a conversion's result."""

    @T.prim_func
    def param(A: T.Tensor((16,), "float16"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(16):
                B[i] = T.cast(A[i], "float32")  # dtype-param

    @T.prim_func
    def alloc(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((16,), "float16")  # dtype-alloc
            T.copy(A, s)
            T.copy(s, B)

    @T.prim_func
    def cast(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(16):
                B[i] = T.cast(T.cast(A[i], "float16"), "float32")  # dtype-cast

    return {"param": (param, "parameter 'A'"), "alloc": (alloc, "buffer 's'"),
            "cast": (cast, "a conversion's result")}


@pytest.mark.parametrize("where", ["param", "alloc", "cast"])
def test_a_dtype_outside_the_backends_table_is_refused_at_the_users_line(where):
    # every installed backend, its dtype table less float16: the first line using float16 is
    # named with the backend and what it offers
    import dataclasses

    from tilewright.engine.session import check_support
    from tilewright.errors import UnsupportedOpError
    from tilewright.plugin import get_manager

    func, what = _float16_kernels()[where]
    backends = get_manager().backends()
    assert {"cpu", "interp"} <= set(backends)
    for backend in backends.values():
        check_support(func, backend)
        caps = backend.capabilities
        narrow = dataclasses.replace(backend, capabilities=dataclasses.replace(
            caps, dtypes=caps.dtypes - {"float16"},
            op_dtypes={op: d - {"float16"} for op, d in caps.op_dtypes.items()}))
        with pytest.raises(UnsupportedOpError) as info:
            check_support(func, narrow)
        assert_at(info.value, f"dtype-{where}", f"{what} is float16, which backend "
                  f"'{backend.name}' does not compute (it offers "
                  f"{', '.join(sorted(narrow.capabilities.dtypes))})")


def test_uint4_is_refused_by_every_backend_at_the_users_line():
    # T.uint4 is a dtype of the language no backend computes (T.unpack reads 4-bit fields);
    # T.int4 tensors are held one value a byte in int8 (tests/language/test_int4_tensors.py)
    from tilewright.engine.session import check_support
    from tilewright.errors import UnsupportedOpError
    from tilewright.plugin import get_manager

    @T.prim_func
    def widen(A: T.Tensor((16,), T.uint4), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(16):
                B[i] = T.cast(A[i], "float32")  # int4-param

    for backend in get_manager().backends().values():
        with pytest.raises(UnsupportedOpError) as info:
            check_support(widen, backend)
        assert_at(info.value, "int4-param", f"parameter 'A' is uint4, which backend "
                  f"'{backend.name}' does not compute (it offers "
                  f"{', '.join(sorted(backend.capabilities.dtypes))})")


def test_float4_is_refused_at_the_users_line_where_a_backend_lacks_it():
    # cpu, interp (tests/language/test_float4_tensors.py) and cuda compute float4_e2m1fn;
    # ascend refuses it at the first line using it, naming what it offers
    from tilewright.engine.session import check_support
    from tilewright.errors import UnsupportedOpError
    from tilewright.plugin import get_manager

    @T.prim_func
    def quantise(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), T.float4_e2m1fn)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(16):
                B[i] = A[i]  # float4-store

    backends = get_manager().backends()
    assert {"cpu", "interp", "cuda"} <= {name for name, b in backends.items()
                                         if "float4_e2m1fn" in b.capabilities.dtypes}
    lacking = [b for b in backends.values() if "float4_e2m1fn" not in b.capabilities.dtypes]
    assert "ascend" in {b.name for b in lacking}
    for backend in lacking:
        with pytest.raises(UnsupportedOpError) as info:
            check_support(quantise, backend)
        assert_at(info.value, "float4-store", f"parameter 'B' is float4_e2m1fn, which backend "
                  f"'{backend.name}' does not compute (it offers "
                  f"{', '.join(sorted(backend.capabilities.dtypes))})")
