"""Vector dtypes as TileLang has them (``T.float32x2``, ``T.bfloat16x2``, ``T.uint32x4`` ...):
values of several lanes built with ``T.float32x2(a, b)`` (or one value broadcast), held in
``T.alloc_var``, read lane by lane with ``T.extract_lane``, reinterpreted bit for bit, stored
into ``y[i:i + n]``; and the 64-, 128- and 256-bit word accesses ``T.ldg64`` ... ``T.stg256``,
``T.lds64`` / ``T.sts128``, whose values are ``uint32x2`` / ``uint32x4`` / ``uint32x8``. Checked
on the CPU backend and the interpreter against torch (TileLang's ``test_tilelang_language_ldg``,
``_ldst`` and ``_extract_lane`` kernels among them)."""

import runpy

import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.errors import KernelError, UnsupportedOpError

TARGETS = ["cpu", "interp"]


def packed_lanes(dtype, vector):
    """TileLang's extract-lane kernel: two elements packed into one vector variable, read
    back lane by lane."""
    @T.prim_func
    def kernel(A: T.Tensor((2,), dtype), B: T.Tensor((2,), dtype)):
        with T.Kernel(1, threads=32):
            packed = T.alloc_var(vector)
            packed = vector(A[0], A[1])
            B[0] = T.extract_lane(packed, 0)
            B[1] = T.extract_lane(packed, 1)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int8"])
def test_lanes_pack_and_extract(target, dtype):
    kernel = tilewright.compile(packed_lanes(T.dtype(dtype), T.dtype(f"{dtype}x2")),
                                out_idx=-1, target=target)
    x = torch.tensor([1.25, -2.5]).to(getattr(torch, dtype)) if dtype != "int8" else \
        torch.tensor([7, -100], dtype=torch.int8)
    assert torch.equal(kernel(x), x)


def wide_words(dtype, words, n_rows=3, row_words=16):
    """Each row's words moved ``words`` at a time: global -> global (ldg/stg), global ->
    shared -> global (sts/lds, at most 128 bits), the first lane's word as an int32, and a
    predicated copy of the even groups only."""
    per_word = 32 // torch.tensor([], dtype=getattr(torch, dtype)).element_size() // 8
    width = 32 * words
    group = per_word * words
    groups = row_words // words
    cols = row_words * per_word
    ldg, stg = getattr(T, f"ldg{width}"), getattr(T, f"stg{width}")
    shared = width <= 128
    lds, sts = (getattr(T, f"lds{width}"), getattr(T, f"sts{width}")) if shared else (None, None)

    @T.prim_func
    def main(X: T.Tensor((n_rows, cols), dtype), Y: T.Tensor((n_rows, cols), dtype),
             Z: T.Tensor((n_rows, cols), dtype), P: T.Tensor((n_rows, cols), dtype),
             F: T.Tensor((n_rows, groups), "int32")):
        with T.Kernel(n_rows, threads=32) as r:
            S = T.alloc_shared((cols,), dtype)
            for g in T.Parallel(groups):
                stg(Y[r, g * group:g * group + group], ldg(X[r, g * group:g * group + group]))
                stg(P[r, g * group:g * group + group],
                    ldg(X[r, g * group:g * group + group], pred=g % 2 == 0))
                F[r, g] = T.reinterpret(T.extract_lane(ldg(X[r, g * group]), 0), "int32")
                if shared:
                    sts(S[g * group:g * group + group], ldg(X[r, g * group]))
            for g in T.Parallel(groups):
                if shared:
                    stg(Z[r, g * group], lds(S[g * group:g * group + group]))
                else:
                    stg(Z[r, g * group], ldg(X[r, g * group]))

    return main, group


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8"])
@pytest.mark.parametrize("words", [2, 4, 8])
def test_wide_word_accesses(target, dtype, words):
    kernel, group = wide_words(dtype, words)
    compiled = tilewright.compile(kernel, out_idx=[1, 2, 3, 4], target=target)
    x = (torch.randn(3, 16 * (32 // 8 // torch.tensor([], dtype=getattr(torch, dtype))
                              .element_size())) * 50).to(getattr(torch, dtype))
    y, z, p, first = compiled(x)
    assert torch.equal(y, x) and torch.equal(z, x)
    even = (torch.arange(x.shape[1]) // group % 2 == 0)
    assert torch.equal(p, torch.where(even, x, torch.zeros((), dtype=x.dtype)))
    assert torch.equal(first, x.view(torch.int32)[:, ::words])


def tilelang_ldg_forms(N=128):
    """TileLang's ldg64 / ldg128 tests: a word pair read as float32x2 stored into a slice of
    two; four words of float32 as float32x4."""
    @T.prim_func
    def main(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32),
             Z: T.Tensor((N,), T.float32)):
        with T.Kernel(N // 4, threads=32) as pid:
            Y[pid * 4:pid * 4 + 2] = T.reinterpret(T.ldg64(X[pid * 4:pid * 4 + 2]), T.float32x2)
            Y[pid * 4 + 2:pid * 4 + 4] = T.reinterpret(T.ldg64(X[pid * 4 + 2:pid * 4 + 4]),
                                                       T.float32x2)
            Z[pid * 4:pid * 4 + 4] = T.reinterpret(T.ldg128(X[pid * 4:pid * 4 + 4]),
                                                   T.float32x4)

    return main


def vector_arithmetic(N=64):
    """Lane-wise arithmetic on float32x2 values, a broadcast, min/max and a select."""
    @T.prim_func
    def main(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(N // 2, threads=32) as pid:
            v = T.reinterpret(T.ldg64(X[pid * 2:pid * 2 + 2]), T.float32x2)
            w = v * T.float32x2(2.0) + T.float32x2(1.0, -1.0)
            Y[pid * 2:pid * 2 + 2] = T.max(w, T.float32x2(0.0))

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_vector_values_store_into_slices(target):
    x = torch.randn(128)
    y, z = tilewright.compile(tilelang_ldg_forms(), out_idx=[1, 2], target=target)(x)
    assert torch.equal(y, x) and torch.equal(z, x)
    x = torch.randn(64)
    y = tilewright.compile(vector_arithmetic(), out_idx=[1], target=target)(x)
    want = (x * 2 + torch.tensor([1.0, -1.0]).repeat(32)).clamp(min=0)
    assert torch.equal(y, want)


def narrow_lanes(dtype, lanes, N=64):
    """Each group of ``lanes`` elements of X, Y, Z computed as vectors of ``dtype``: products,
    sums, differences, min / max and a math function, each rounded to ``dtype`` as the scalar
    operation is; a conversion to float32 lanes and back; a lane read with extract_lane."""
    vec, wide = T.dtype(f"{dtype}x{lanes}"), T.dtype(f"float32x{lanes}")
    ldg = getattr(T, f"ldg{16 * lanes}")

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype),
             A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype),
             D: T.Tensor((N // lanes,), dtype)):
        with T.Kernel(N // lanes, threads=32) as g:
            x = T.reinterpret(ldg(X[g * lanes:g * lanes + lanes]), vec)
            y = T.reinterpret(ldg(Y[g * lanes:g * lanes + lanes]), vec)
            z = T.reinterpret(ldg(Z[g * lanes:g * lanes + lanes]), vec)
            A[g * lanes:g * lanes + lanes] = x * y + z
            B[g * lanes:g * lanes + lanes] = T.max(x - y, z) * (x + z)
            C[g * lanes:g * lanes + lanes] = T.Cast(vec, T.Cast(wide, x) * T.Cast(wide, y))
            D[g] = T.extract_lane(x * y + z, 1)

    return main


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_narrow_float_lanes_round_after_each_operation(target, dtype, lanes):
    """A bfloat16 / float16 vector's lane rounds after each operation, as the scalar does and
    as a GPU's ``__hmul2`` / ``__hfma2``-free code does. Before: the CPU and the interpreter kept
    float32 between a bfloat16 vector's operations (``x * y + z`` off by 0.0625 at 10), and the
    CPU could not build a rounded product of a tensor's lanes ("BF16 needs to be storaged
    lowered first")."""
    torch.manual_seed(lanes)
    tdt = getattr(torch, dtype)
    x, y, z = ((torch.randn(64) * 4).to(tdt) for _ in range(3))
    outs = [torch.zeros(64, dtype=tdt) for _ in range(3)] + [torch.zeros(64 // lanes, dtype=tdt)]
    tilewright.compile(narrow_lanes(dtype, lanes), target=target)(x, y, z, *outs)
    assert torch.equal(outs[0], x * y + z)
    assert torch.equal(outs[1], torch.maximum(x - y, z) * (x + z))
    assert torch.equal(outs[2], (x.float() * y.float()).to(tdt))
    assert torch.equal(outs[3], (x * y + z)[1::lanes])


def slice_to_slice():
    """TVM script's vector load of a slice stored into a slice (TileLang's
    ``test_let_vectorize_load``: ``b = A[0, 0:4]; A[0, 4:8] = b``), also overlapping its
    source (all lanes are read before any is stored)."""
    @T.prim_func
    def main(A: T.Tensor((16, 16), T.float32), B: T.Tensor((16, 8), T.bfloat16)):
        with T.Kernel(1, threads=32):
            b = A[0, 0:4]
            A[0, 4:8] = b
            A[1, 1:5] = A[1, 0:4]
            B[2, 0:4] = A[2, 8:12]  # converted lane by lane

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_a_slice_stores_into_a_slice_as_a_vector(target):
    """Before: "store to 'A' needs one index per dimension"."""
    a = torch.arange(256.0).reshape(16, 16)
    b = torch.zeros(16, 8, dtype=torch.bfloat16)
    want = a.clone()
    want[0, 4:8] = want[0, 0:4].clone()
    want[1, 1:5] = want[1, 0:4].clone()
    tilewright.compile(slice_to_slice(), target=target)(a, b)
    assert torch.equal(a, want) and torch.equal(b[2, :4], want[2, 8:12].bfloat16())


def test_a_region_stored_into_a_slice_is_refused_at_the_line():
    with pytest.raises(KernelError, match=r"region A\[2, 2\] into 'A': a region is stored "
                                          r"as a vector only when") as err:
        @T.prim_func
        def main(A: T.Tensor((16, 16), T.float32)):
            with T.Kernel(1, threads=32):
                A[0, 0:4] = A[0:2, 4:6]  # a 2-D region

    assert "A[0, 0:4] = A[0:2, 4:6]" in str(err.value)


@pytest.mark.parametrize("expr", ["X[0:4] * 2.0", "2.0 - X[i, 0:4]", "T.exp(X[0:4])",
                                  "-X[0:2, 0:4]", "X[0:4] < 1.0"])
def test_arithmetic_on_a_region_is_refused_at_the_line(expr, tmp_path):
    """Before: Python's "unsupported operand type(s) for *: 'BufferSlice' and 'float'", or a
    TVM error, with no line."""
    source = f"""
import tilewright.language as T

@T.prim_func
def main(X: T.Tensor((4, 8), T.float32), Y: T.Tensor((4, 8), T.float32)):
    with T.Kernel(1, threads=32):
        i = 1
        Y[0, 0] = {expr}
"""
    path = tmp_path / "kernel.py"
    path.write_text(source)
    with pytest.raises(KernelError, match=r"the region X\[[0-9i:, ]*\] is not a value: "
                                          r"arithmetic and math take elements") as err:
        runpy.run_path(str(path))
    assert f"Y[0, 0] = {expr}" in str(err.value)


def test_vector_dtype_names():
    assert (T.float32x2.lanes, T.float32x2.scalar, T.float32x2.bits) == (2, "float32", 32)
    assert T.dtype("bfloat16x8") == T.bfloat16x8 and T.uint8x32.lanes == 32
    assert (T.float32.lanes, T.float8_e8m0fnu.lanes) == (1, 1)
    for name in ("float32x3", "float32x16", "float64x2"):
        with pytest.raises(KernelError, match=rf"unknown dtype '{name}': a vector dtype is "
                                              r"<element>x<lanes> .* 256 bits at most"):
            T.dtype(name)


def test_extract_lane_refuses_what_tilelang_refuses():
    from tvm import tirx

    vector = tirx.Var("vector", "bfloat16x2")
    assert str(T.extract_lane(vector, tirx.IntImm("int32", 1)).ty) == "bfloat16"
    with pytest.raises(TypeError, match="expects a PrimExpr"):
        T.extract_lane(1, 0)
    with pytest.raises(ValueError, match="expects a vector expression"):
        T.extract_lane(tirx.Var("scalar", "bfloat16"), 0)
    with pytest.raises(TypeError, match="compile-time integer"):
        T.extract_lane(vector, tirx.Var("lane", "int32"))
    for lane in (-1, 2):
        with pytest.raises(IndexError, match="out of bounds"):
            T.extract_lane(vector, lane)


def test_misuse_is_refused_at_the_line():
    with pytest.raises(KernelError, match=r"store of a float32x2 value \(2 lanes\) to 'Y'\[4\]"):
        @T.prim_func
        def wrong_slice(X: T.Tensor((8,), T.float32), Y: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                Y[0:4] = T.reinterpret(T.ldg64(X[0:2]), T.float32x2)

    with pytest.raises(KernelError, match=r"T.ldg64: 64 bits are 4 float16 element\(s\)"):
        @T.prim_func
        def wrong_words(X: T.Tensor((8,), T.float16), Y: T.Tensor((8,), T.float16)):
            with T.Kernel(1, threads=32):
                T.stg64(Y[0:4], T.ldg64(X[0:2]))

    with pytest.raises(KernelError, match=r"T.stg128 stores 128 bits \(uint32x4"):
        @T.prim_func
        def wrong_value(X: T.Tensor((8,), T.float32), Y: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                T.stg128(Y[0:4], T.ldg64(X[0:2]))

    with pytest.raises(KernelError, match=r"widths differ \(64 and 128 bits\)"):
        @T.prim_func
        def wrong_width(X: T.Tensor((8,), T.float32), Y: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                Y[0:4] = T.reinterpret(T.ldg64(X[0:2]), T.float32x4)


def test_a_backend_without_vector_dtypes_refuses_them_at_the_line():
    with pytest.raises(UnsupportedOpError, match=r"a value is uint32x2, which backend 'ascend' "
                                                 r"does not compute.*\n.*T.ldg64"):
        tilewright.lower(tilelang_ldg_forms(), "ascend")


def test_tensors_and_tiles_hold_scalars():
    with pytest.raises(KernelError, match=r"T.Tensor of float32x2: tensors and tiles hold "
                                          r"scalars; declare them of float32 with the 2 lanes"):
        @T.prim_func
        def vector_tensor(A: T.Tensor((8,), T.float32x2), B: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                B[0] = T.extract_lane(A[0], 0)

    with pytest.raises(KernelError, match=r"T.alloc_shared of bfloat16x8.*T.ldg128"):
        @T.prim_func
        def vector_tile(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                T.alloc_shared((4,), T.bfloat16x8)
