"""The portable expression intrinsics on CUDA: TileLang's fast math is CUDA's float32
intrinsic (``__expf`` ...: one ``MUFU`` instruction) and the precise function of the other
dtypes; ``T.__ldg`` is ``__ldg`` (a load through the read-only cache, ``LDG.E.CONSTANT``)
where CUDA's ``__ldg`` takes the element type, a plain load otherwise. The conformance rows
run in the host emulation against their references (the emulation's intrinsics are the
precise functions: the accuracy of the GPU's is CUDA's to keep)."""

import re

import hostemu
import pytest
import sass
import tilewright
import tilewright.language as T
from tilewright.ir import FAST_MATH_FUNCTIONS
from tilewright_cuda import arch, executor
from tilewright_sdk.conformance.catalogue import cases

TARGET = "cuda -arch=sm_90a"


def fast(dtype, N=256, block=128, prefix="__"):
    """Every fast-math function of X (``prefix=""``: the precise ones) into a row of Y."""

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((len(FAST_MATH_FUNCTIONS), N), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                n = bx * block + i
                for k, fn in enumerate(FAST_MATH_FUNCTIONS):
                    Y[k, n] = getattr(T, f"{prefix}{fn}")(X[n])

    return main


def read_only(dtype, N=256, block=128):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = T.__ldg(X[bx * block + i])

    return main


def _body(func) -> str:
    text = tilewright.lower(func, TARGET).source.text
    return text[text.index('extern "C"'):]


def test_fast_math_of_float32_calls_the_intrinsics():
    body = _body(fast("float32"))
    for fn in FAST_MATH_FUNCTIONS:
        assert f"__{fn}f(" in body, fn


@pytest.mark.parametrize("dtype, call", [("float64", "exp("), ("float16", "hexp("),
                                         ("bfloat16", "hexp(")])
def test_fast_math_of_other_dtypes_is_the_precise_function(dtype, call):
    body = _body(fast(dtype))
    assert call in body and "__expf" not in body


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint64"])
def test_read_only_load_calls_ldg(dtype):
    assert "__ldg((&(X_ptr[" in _body(read_only(dtype))


@pytest.mark.parametrize("dtype", ["bool", "float8_e4m3fn"])
def test_read_only_load_without_an_ldg_overload_is_a_load(dtype):
    body = _body(read_only(dtype))
    assert "__ldg" not in body and "X_ptr[" in body


@pytest.mark.nvcc
@pytest.mark.sass
def test_machine_code(tmp_path):
    def code(func, name):
        source = tilewright.lower(func, TARGET).source.text
        (tmp_path / name).mkdir()
        cubin, _ = executor.nvcc_compile(source, arch.get("sm_90a"), tmp_path / name)
        return sass.dump(cubin)

    # the multi-function unit's exp2, log2, sin and cos (nvcc shares one log2 among log,
    # log2 and log10 of one value), not the precise functions' range reductions and
    # polynomials
    fast_code, precise_code = code(fast("float32"), "fast"), code(fast("float32", prefix=""),
                                                                 "precise")
    for unit in ("MUFU.EX2", "MUFU.LG2", "MUFU.SIN", "MUFU.COS"):
        assert unit in fast_code, unit
    assert 3 * len(sass.instructions(fast_code)) < len(sass.instructions(precise_code))
    for dtype in ("float32", "float16"):  # LDG.E.CONSTANT, LDG.E.U16.CONSTANT
        assert re.search(r"LDG\.E[.\w]*\.CONSTANT", code(read_only(dtype), f"ldg_{dtype}"))


CASES = [c for c in cases(["fast_math", "fast_libm", "read_only_load", "word_access"])
         if c.variant != "dynamic"]


@pytest.mark.emulator
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rows_in_host_emulation(case, tmp_path):
    hostemu.run_case(case, TARGET, tmp_path)
