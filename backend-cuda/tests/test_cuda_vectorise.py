"""Elementwise ``T.Parallel`` nests move their elements by 16-byte vectors
(transforms/distribute.py): a nest of one element type of plain arithmetic as TVM's vector
code (float4, or uint4 read as half2 / bfloat162 pairs), and a nest that converts, calls math
or mixes types through registers (``Distribute._staged``): its moving loads by vectors, the
values lane by lane, one vector store. Checked in the host emulation against torch and in the
SASS of NVRTC's build for sm_80 and sm_90a (128- or 64-bit global accesses, no local memory);
nests whose loads are conditional or whose calls have effects keep their element accesses."""

import collections

import hostemu
import pytest
import sass
import tilewright
import tilewright_cuda.language as T
import torch

M, N, BLOCK_M, BLOCK_N = 16, 1024, 8, 512


def elementwise(din, dout, body, threads=128):
    """C = body(A, row scale S) over [M, N] in blocks of 8 x 512."""
    @T.prim_func
    def kernel(A: T.Tensor((M, N), din), S: T.Tensor((M,), "float32"),
               C: T.Tensor((M, N), dout)):
        with T.Kernel(N // BLOCK_N, M // BLOCK_M, threads=threads) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r, c = by * BLOCK_M + i, bx * BLOCK_N + j
                C[r, c] = body(A[r, c], S[r], dout)

    return kernel


def _f32(x):
    return T.Cast("float32", x)


BODIES = {
    # name: (kernel body, torch reference on float32 values)
    "silu": (lambda a, s, d: T.Cast(d, _f32(a) / (1 + T.exp(-_f32(a)))),
             lambda a, s: a / (1 + torch.exp(-a))),
    "row_scale": (lambda a, s, d: T.Cast(d, _f32(a) * s), lambda a, s: a * s[:, None]),
    "relu": (lambda a, s, d: T.Cast(d, T.max(_f32(a), 0.0)), lambda a, s: a.clamp(min=0)),
}
TYPES = [("float16", "float16", "uint4"), ("bfloat16", "bfloat16", "uint4"),
         ("float16", "float32", "float4"), ("float32", "bfloat16", "nv_bfloat164"),
         ("int8", "float32", "float4"), ("float32", "float32", "float4")]


def _inputs(din, dout):
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(M, N, generator=gen) * 3).to(getattr(torch, din))
    s = torch.rand(M, generator=gen)
    c = torch.full((M, N), float("nan")).to(getattr(torch, dout))
    return a, s, c


@pytest.mark.emulator
@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize(("din", "dout", "vector"), TYPES)
def test_converting_nests_move_vectors_and_match_torch(tmp_path, body, din, dout, vector):
    make, reference = BODIES[body]
    a, s, c = _inputs(din, dout)
    lowered = tilewright.lower(elementwise(din, dout, make), "cuda -arch=sm_90a")
    assert f"*({vector}*)(C_ptr + " in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, s, c)
    want = reference(a.float(), s).to(c.dtype)
    # one rounding of float32 math: expf's last bit may differ from torch's
    torch.testing.assert_close(c.float(), want.float(), rtol=1e-6, atol=1e-6)


def _global_accesses(func, arch):
    kernel = tilewright.compile(func, target=f"cuda -arch={arch}")
    ops = [op for _, op, _ in sass.instructions(sass.dump(kernel.executable.cubin))]
    return collections.Counter(op.split(".CONSTANT")[0] for op in ops
                               if op.startswith(("LDG", "STG", "LDL", "STL")))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(("din", "dout", "loads", "stores"), [
    ("float16", "float16", "LDG.E.128", "STG.E.128"),   # 8 lanes
    ("bfloat16", "bfloat16", "LDG.E.128", "STG.E.128"),
    ("float16", "float32", "LDG.E.64", "STG.E.128"),    # 4 lanes: 8 bytes in, 16 out
    ("int8", "float32", "LDG.E", "STG.E.128")])         # 4 lanes: 4 bytes in
def test_converting_nests_are_vector_accesses_in_sass(arch, din, dout, loads, stores):
    """Before: one 8- or 16-bit load and one store an element (LDG.E.U16 / STG.E.U16); the
    registers the lanes pass through stay registers (no LDL / STL)."""
    found = _global_accesses(elementwise(din, dout, BODIES["silu"][0]), arch)
    assert set(found) == {loads, stores}, found


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_16_bit_arithmetic_nests_are_128_bit_accesses_in_sass(dtype, arch):
    """Sums, products, differences and negations of one 16-bit type: TVM's vector code
    (before, one 16-bit access an element)."""
    found = _global_accesses(elementwise(
        dtype, dtype, lambda a, s, d: a * a * 2 - (-a)), arch)
    assert set(found) == {"LDG.E.128", "STG.E.128"}, found


@pytest.mark.emulator
def test_a_conditional_load_is_not_hoisted(tmp_path):
    """``T.if_then_else(c, A[...], 0)`` reads A only where c holds (here: never past the
    columns it covers); its nest keeps element accesses, so no vector load reads the rest."""
    a, s, c = _inputs("float16", "float32")
    func = elementwise("float16", "float32", lambda a, s, d: T.if_then_else(
        s > 0.5, T.Cast(d, a), T.Cast(d, 0)))
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert "*(half4*)(A_ptr" not in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, s, c)
    want = torch.where(s[:, None] > 0.5, a.float(), torch.zeros(()))
    torch.testing.assert_close(c, want)


@pytest.mark.emulator
def test_a_nest_reading_what_it_wrote_sees_its_store(tmp_path):
    """Two stores in one nest, the second reading the first's element: each store's loads
    are made after the stores before it."""
    @T.prim_func
    def kernel(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32"),
               C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // BLOCK_N, M // BLOCK_M, threads=128) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r, c = by * BLOCK_M + i, bx * BLOCK_N + j
                B[r, c] = T.Cast("float32", A[r, c]) * 2
                C[r, c] = T.Cast("float16", B[r, c] + 1)

    a, _, _ = _inputs("float16", "float16")
    b = torch.full((M, N), float("nan"))
    c = torch.full((M, N), float("nan")).half()
    lowered = tilewright.lower(kernel, "cuda -arch=sm_90a")
    assert "*(float4*)(B_ptr + " in lowered.source.text
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    torch.testing.assert_close(b, a.float() * 2)
    torch.testing.assert_close(c, (a.float() * 2 + 1).half())


def guarded(dtype, N, by_row_only=False):
    """SiLU of a [M, N] tensor with M a T.dynamic size: tiles of 8 x 512 under the bounds
    guard TileLang kernels write (``if r < M and c < N``)."""
    M = T.dynamic("M")

    @T.prim_func
    def kernel(A: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, BLOCK_N), T.ceildiv(M, BLOCK_M), threads=128) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r, c = by * BLOCK_M + i, bx * BLOCK_N + j
                if by_row_only:
                    if r < M:
                        C[r, c] = BODIES["silu"][0](A[r, c], None, dtype)
                elif r < M and c < N:
                    C[r, c] = BODIES["silu"][0](A[r, c], None, dtype)

    return kernel


@pytest.mark.emulator
@pytest.mark.parametrize(("N", "vector"), [(1000, True), (1001, False), (512, True)],
                         ids=["N=1000", "N=1001", "rows-only"])
def test_a_nest_under_a_bounds_guard_moves_vectors(tmp_path, N, vector):
    """The guard is tested once a vector where it has one value for a vector's elements: a
    row bound, and a column bound ``c < N`` with N a multiple of the vector's 8 elements
    (1000; the last tile's vectors past N are skipped whole). N = 1001 splits a vector: the
    nest keeps its element accesses."""
    M = 13  # the second row of tiles is partial
    func = guarded("float16", N, by_row_only=N == 512)
    lowered = tilewright.lower(func, "cuda -arch=sm_90a")
    assert ("*(uint4*)(C_ptr + " in lowered.source.text) == vector
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(M, N, generator=gen).half()
    c = torch.full((M, N), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, c)
    torch.testing.assert_close(c, torch.nn.functional.silu(a.float()).half())


def eight_lanes(dtype):
    """A vector of eight 16-bit floats built from a fragment's elements (the differential
    fuzzer's ``T.float16x8(t[0], ..., t[7])``), added to itself and read back lane by lane."""
    vec = T.dtype(f"{dtype}x8")

    @T.prim_func
    def main(X: T.Tensor((8,), dtype), Y: T.Tensor((8,), dtype)):
        with T.Kernel(1, threads=32):
            t = T.alloc_fragment((8,), dtype)
            T.copy(X, t)
            for _i in T.Parallel(1):
                w = vec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7])
                w = w + w * w
                Y[0], Y[1] = T.extract_lane(w, 0), T.extract_lane(w, 1)
                Y[2], Y[3] = T.extract_lane(w, 2), T.extract_lane(w, 3)
                Y[4], Y[5] = T.extract_lane(w, 4), T.extract_lane(w, 5)
                Y[6], Y[7] = T.extract_lane(w, 6), T.extract_lane(w, 7)

    return main


@pytest.mark.emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_eight_16_bit_float_lanes_build_from_their_values(tmp_path, dtype):
    """Before: TVM printed ``make_uint4`` of the eight halves, which no compiler takes ("too
    many arguments to function 'uint4 make_uint4(...)'"); the lanes are packed into four
    32-bit words now. Checked in the host emulation against torch and built by NVRTC."""
    x = torch.randn(8).to(getattr(torch, dtype))
    y = torch.zeros(8, dtype=x.dtype)
    lowered = tilewright.lower(eight_lanes(dtype), "cuda -arch=sm_80")
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    assert torch.equal(y, x + x * x)
    tilewright.compile(eight_lanes(dtype), target="cuda -arch=sm_90a")
