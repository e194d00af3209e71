"""The swizzled shared layout of gemm operand tiles (tilewright_cuda/layout.py): the formula,
its bank-conflict freedom for ldmatrix and 16-byte copies, the TIR form place_memory uses,
and which buffers layout inference chooses."""

from __future__ import annotations

import cuda_cases as kernels
import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
import tvm
from test_cuda_store_vectors import staged_gemm
from tilewright_cuda import keys, layout
from tvm import tirx

# (rows, cols) of the operand tiles of the standard GEMM, FlashAttention and the transposes
TILES = [(128, 32), (32, 128), (64, 64), (128, 64), (64, 128), (128, 16), (32, 256)]


def _group(offset: int) -> int:
    """The 16-byte bank group (of the eight in a 128-byte line) of a byte offset."""
    return offset // 16 % 8


@pytest.mark.parametrize("rows, cols", TILES)
def test_every_ldmatrix_read_hits_eight_bank_groups(rows, cols):
    width, bits = layout.params(rows, cols)
    # each 8x8 matrix of an ldmatrix reads 8 rows of 16 bytes: rows r0..r0+7, columns c0..c0+7
    for r0 in range(0, rows - 7):
        for c0 in range(0, cols, 8):
            groups = {_group(layout.byte_offset(r0 + i, c0, rows, width, bits))
                      for i in range(8)}
            assert len(groups) == 8, (r0, c0, groups)


@pytest.mark.parametrize("rows, cols", TILES)
def test_sixteen_byte_copies_of_eight_threads_hit_eight_bank_groups(rows, cols):
    width, bits = layout.params(rows, cols)
    chunks = [(r, c) for r in range(rows) for c in range(0, cols, 8)]  # thread t: chunk t
    for first in range(0, len(chunks), 8):
        groups = {_group(layout.byte_offset(r, c, rows, width, bits))
                  for r, c in chunks[first:first + 8]}
        assert len(groups) == 8


@pytest.mark.parametrize("rows, cols", TILES)
def test_layout_is_a_permutation_keeping_chunks_whole(rows, cols):
    width, bits = layout.params(rows, cols)
    offsets = {}
    for r in range(rows):
        for c in range(cols):
            o = layout.byte_offset(r, c, rows, width, bits)
            offsets[o] = (r, c)
            if c % 8:  # a chunk of 8 elements stays contiguous
                assert o == layout.byte_offset(r, c - c % 8, rows, width, bits) + 2 * (c % 8)
    assert sorted(offsets) == list(range(0, rows * cols * 2, 2))


def test_contract_parameters():
    assert layout.params(128, 32) == (64, 2)
    assert layout.params(32, 128) == (128, 3)
    assert layout.params(64, 256) == (128, 3)  # two column blocks of 128 bytes
    assert layout.params(64, 16) == (32, 1)
    assert layout.params(64, 8) is None  # 16-byte rows: nothing to swizzle
    assert layout.params(64, 96) is None  # 192-byte rows do not split into 128-byte blocks
    assert layout.params(64, 64, "float32") is None
    # block 1 of a 256-column tile starts rows x 128 bytes after block 0
    assert layout.byte_offset(0, 64, 64, 128, 3) == 64 * 128
    # the XOR flips 16-byte chunks by the row within the 1024-byte period
    assert layout.byte_offset(3, 0, 32, 128, 3) == 3 * 128 + 3 * 16


def test_tir_index_matches_the_formula():
    analyzer = tvm.sym.Analyzer()
    for rows, cols in [(128, 32), (32, 256)]:
        width, bits = layout.params(rows, cols)
        buf = layout.attach(tirx.decl_buffer((3, rows, cols), "float16", "t",
                                             scope="shared.dyn"), layout.Swizzled(width, bits))
        assert layout.of(buf) == layout.Swizzled(width, bits)
        for v, r, c in [(0, 0, 0), (1, 5, 8), (2, rows - 1, cols - 1), (0, 7, 17)]:
            e = analyzer.simplify(layout.element_index(buf, [tirx.const(x, "int32")
                                                              for x in (v, r, c)]))
            assert int(e.value) == v * rows * cols + \
                layout.byte_offset(r, c, rows, width, bits) // 2


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", "float8_e5m2"])
def test_one_byte_tiles_share_the_byte_layout_of_two_byte_ones(dtype):
    # the contract is one of bytes: a [R, 2C] tile of 1-byte elements is laid out as a
    # [R, C] tile of 2-byte ones, each element pair in its 2-byte slot (wgmma's 8-bit K-major
    # SW128/SW64/SW32 layouts), and the TIR index follows the formula
    analyzer = tvm.sym.Analyzer()
    assert layout.params(64, 64, dtype) == (64, 2) == layout.params(64, 32)
    assert layout.params(128, 128, dtype) == (128, 3) and layout.params(64, 16, dtype) is None
    for rows, cols in [(64, 64), (128, 128), (32, 256), (64, 32)]:
        width, bits = layout.params(rows, cols, dtype)
        buf = layout.attach(tirx.decl_buffer((2, rows, cols), dtype, "t", scope="shared.dyn"),
                            layout.Swizzled(width, bits))
        assert layout.of(buf) == layout.Swizzled(width, bits)
        offsets = set()
        for r in range(rows):
            for c in range(cols):
                o = layout.byte_offset(r, c, rows, width, bits, size=1)
                assert o == layout.byte_offset(r, c // 2, rows, width, bits) + c % 2
                offsets.add(o)
        assert offsets == set(range(rows * cols))
        for v, r, c in [(0, 0, 0), (1, 5, 16), (1, rows - 1, cols - 1), (0, 7, 33 % cols)]:
            e = analyzer.simplify(layout.element_index(buf, [tirx.const(x, "int32")
                                                              for x in (v, r, c)]))
            assert int(e.value) == v * rows * cols + \
                layout.byte_offset(r, c, rows, width, bits, size=1)


def _layouts(func, target="cuda -arch=sm_80"):
    """The swizzle choices layout inference records for ``func`` (name -> [W, B]), and the
    lowered kernel."""
    seen = {}

    def listen(event):
        if event.kind == "pass_end" and event.data.get("name") == "CUDAInferLayout":
            (f,) = event.data["mod"].functions.values()
            seen.update({str(k): [int(x) for x in v]
                         for k, v in dict(f.attrs.get(keys.SMEM_LAYOUT, {})).items()})

    from tilewright.engine import events

    events.subscribe(listen)
    try:
        lowered = tilewright.lower(func, target)
    finally:
        events.unsubscribe(listen)
    return seen, lowered


def _layout_attr(name):
    return _layouts(kernels.func(name))[0]


def test_layout_inference_records_the_operand_layouts():
    assert _layout_attr("gemm") == {"A_shared": [64, 2], "B_shared": [128, 3]}
    # FlashAttention: Q, K, V and the float16 copy of the scores feed mma gemms whole
    assert _layout_attr("flash_attention_f16") == {
        name: [128, 3] for name in ("Q_shared", "K_shared", "V_shared", "acc_s_cast")}
    assert _layout_attr("gemm_dynamic") == {}  # float32: the thread gemm, no swizzle


@pytest.mark.emulator
@pytest.mark.parametrize("arch, scale", [("sm_80", 0.5), ("sm_90a", None)])
def test_an_epilogue_tile_written_from_the_accumulator_is_swizzled(arch, scale, tmp_path):
    M, N, K = 256, 256, 96
    seen, lowered = _layouts(staged_gemm(M, N, K, bm=128, bn=128, scale=scale),
                             f"cuda -arch={arch}")
    # 256-byte rows: row-major, a warp's pair stores (eight rows, one column) would all fall
    # in one bank group; swizzled they take eight (test_every_ldmatrix_read_... above)
    assert seen["C_s"] == [128, 3]
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(shape, generator=g).half() for shape in ((M, K), (K, N)))
    c = torch.full((M, N), float("nan")).half()
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, a, b, c)
    ref = (a.double() @ b.double()).half().double() * (1.0 if scale is None else scale)
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=8e-2)


def test_an_epilogue_tile_read_in_part_off_the_swizzle_atom_is_not_swizzled():
    # the tile is also an operand the mma.sync gemm reads in part from column 32, inside a
    # 64-column block: ldmatrix addressing reads a part from its first element only where it
    # starts on a swizzle atom (gemm_fit.atom_misfit), so it keeps the row-major layout; A_s,
    # read in part from column 0, is swizzled
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((64, 64), "float16")
            S = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            out = T.alloc_fragment((64, 32), "float32")
            T.copy(A, A_s)
            T.clear(acc)
            T.gemm(A_s, A_s, acc)
            T.copy(acc, S)
            T.clear(out)
            T.gemm(S, A_s[:, 0:32], out)
            T.gemm(A_s[:, 0:32], S[0:32, 32:64], out)
            T.copy(out, C)

    assert "S" not in _layouts(main)[0] and "A_s" in _layouts(main)[0]


# (rows, cols, element bytes) of the device header's check: the TILES, 1-byte tiles, and a
# tile of column blocks of 12 rows (not whole swizzle periods: a column step is no constant)
HEADER_TILES = [(r, c, 2) for r, c in TILES] + [(64, 64, 1), (64, 32, 1), (32, 256, 1),
                                                 (12, 128, 2)]


def test_device_layout_matches_the_formula_and_its_constant_steps(tmp_path):
    """include/tw_mma.h's ``swizzled::at`` gives the contract's offset of every element, and
    the step ``ldmatrix_at`` splits (a constant part of whole periods as the immediate
    offset, the rest through ``at``) lands on the element ``at`` gives for the whole step,
    for every lane position and every step inside the tile (g++ on the header's layouts)."""
    import subprocess
    from pathlib import Path

    import tilewright_cuda

    header = (Path(tilewright_cuda.__file__).parent / "include" / "tw_mma.h").read_text()
    start = header.index("template <int LD, bool LDSM>")
    end = header.index("};", header.index("struct swizzled")) + 2
    checks = []
    for rows, cols, size in HEADER_TILES:
        width, bits = layout.params(rows, cols, {2: "float16", 1: "int8"}[size])
        checks.append(f"  check<tw::swizzled<{rows}, {width}, {bits}, {size}>>({rows}, {cols});")
    source = "\n".join([
        "#include <cstdio>", "#define __device__", "#define __forceinline__ inline",
        "namespace tw {", header[start:end], "}",
        "template <class L> void check(int R, int C) {",
        "  long bad = 0;",
        "  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) std::printf(\"%d \", "
        "L::at(r, c));",
        "  std::printf(\"\\n\");",
        "  for (int r = 0; r < R; ++r) for (int c = 0; c < C; c += 8)",
        "    for (int dr = 0; r + dr < R; ++dr) for (int dc = 0; c + dc < C; dc += 8) {",
        "      int lr = dr % L::ROW_PERIOD, lc = L::COL_ADD ? dc % L::COL_PERIOD : dc;",
        "      bad += L::at(r + lr, c + lc) + L::offset(dr - lr, dc - lc) != "
        "L::at(r + dr, c + dc);",
        "    }",
        "  std::printf(\"%ld\\n\", bad);",
        "}",
        "int main() {", *checks, "}"])
    (tmp_path / "layouts.cpp").write_text(source)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "layouts"),
                    str(tmp_path / "layouts.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "layouts")], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    for (rows, cols, size), offsets, bad in zip(HEADER_TILES, out[::2], out[1::2]):
        width, bits = layout.params(rows, cols, {2: "float16", 1: "int8"}[size])
        want = [layout.byte_offset(r, c, rows, width, bits, size) // size
                for r in range(rows) for c in range(cols)]
        assert [int(x) for x in offsets.split()] == want, (rows, cols, size)
        assert bad == "0", (rows, cols, size)
