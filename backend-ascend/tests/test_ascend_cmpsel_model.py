"""The emulator's Compare, Compares and Select (csrc/kernel_operator.h) against the vendor's
documentation (docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/Compare.md, Compares.md,
Select.md) and A2 implementation (impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h,
kernel_operator_vec_cmpsel_impl.h): the documentation's examples, the bit order of the mask,
the count rule, the dtypes and the scratch at TMP_UB_OFFSET."""

import pytest
import tilewright
import tilewright_ascend.language as T
import torch
from tilewright_ascend.executor import EmulatorError, compile_and_run_source

# Compare.md: src0 [2 3 5 7 11 13 17 19 ...], src1 [2 4 6 8 10 12 14 16 ...]
_SRC0 = [2, 3, 5, 7, 11, 13, 17, 19]
_SRC1 = [2, 4, 6, 8, 10, 12, 14, 16]
# Select.md, mode 2: the first 16 elements of its src0, src1, output and its selMask [60, 32, ...]
_SEL0 = [-80.4933, 52.2499, -50.6124, -72.3737, -33.7107, -83.4001, 34.3954, 61.3188, 96.5484,
         27.1321, -56.8153, 9.80549, 9.11199, -53.1848, -77.2548, -0.0681466]
_SEL1 = [35.8789, 44.0334, 54.9997, 44.8567, -30.8579, -53.714, -59.8013, 71.1663, 46.3484,
         8.56818, -59.4716, 6.07412, -39.0137, 64.5595, 17.0849, 45.2641]
_SELOUT = [35.8789, 44.0334, -50.6124, -72.3737, -33.7107, -83.4001, -59.8013, 71.1663,
           46.3484, 8.56818, -59.4716, 6.07412, -39.0137, -53.1848, 17.0849, 45.2641]


def _kernel(n, dtype):
    """A (1, n) and B copied into UB tiles a, b; one placeholder vector line; c and the uint8
    mask tile m copied out (the test puts the instructions under test in its place)."""

    @T.prim_func
    def main(A: T.Tensor((1, n), dtype), B: T.Tensor((1, n), dtype), C: T.Tensor((1, n), dtype),
             M: T.Tensor((1, 32), "uint8")):
        with T.Kernel(1, is_npu=True) as (cid, vid):
            a = T.alloc_ub((1, n), dtype)
            b = T.alloc_ub((1, n), dtype)
            c = T.alloc_ub((1, n), dtype)
            m = T.alloc_ub((1, 32), "uint8")
            with T.Scope("V"):
                if vid == 0:
                    T.copy(A[0, 0], a)
                    T.copy(B[0, 0], b)
                    T.barrier_all()
                    T.tile.add(c, a, b)
                    T.barrier_all()
                    T.copy(c, C[0, 0])
                    T.copy(m, M[0, 0])

    return main


def _run(tmp_path, code, a, b, n=64, dtype="float32", name="k"):
    low = tilewright.lower(_kernel(n, dtype), target="ascend")
    text = low.source.text
    placeholder = f"Add(c, a, b, {n});"
    assert placeholder in text
    text = text.replace(placeholder, code)
    c = torch.zeros(1, n, dtype=a.dtype)
    m = torch.zeros(1, 32, dtype=torch.uint8)
    work = tmp_path / name
    work.mkdir()
    compile_and_run_source(text, low.source.payload, (a, b, c, m), work)
    return c[0], m[0]


def _pairs(values, n=64, dtype=torch.float32):
    return torch.tensor([values[i % len(values)] for i in range(n)], dtype=dtype)[None]


@pytest.mark.parametrize("mode,byte", [("GT", 0b11110000), ("GE", 0b11110001),
                                       ("LE", 0b00001111), ("EQ", 0b00000001),
                                       ("NE", 0b11111110), ("LT", 0b00001110)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_compare_bits_follow_the_documentation(tmp_path, mode, byte, dtype):
    """Compare.md's results for [2 3 5 7 11 13 17 19] against [2 4 6 8 10 12 14 16], as the
    page writes them in binary: GT 0b11110000, GE 0b11110001, LE 0b00001111, EQ 0b00000001,
    NE 0b11111110 (its decimal "126" disagrees with its own binary); element i is bit i % 8
    of byte i // 8. LT, which the page shows only for another layout, is GE's complement."""
    n = 64 if dtype == "float32" else 128  # one 256-byte repeat
    t = getattr(torch, dtype)
    _, m = _run(tmp_path, f"Compare(m, a, b, CMPMODE::{mode}, {n});", _pairs(_SRC0, n, t),
                _pairs(_SRC1, n, t), n, dtype)
    assert m[:n // 8].tolist() == [byte] * (n // 8)


def test_compares_compares_with_a_scalar(tmp_path):
    a = _pairs(_SRC0)
    _, m = _run(tmp_path, "Compares(m, a, (float)7, CMPMODE::GE, 64);", a, a)
    assert m[:8].tolist() == [0b11111000] * 8


def test_compare_count_must_cover_whole_repeats(tmp_path):
    """Compare.md: count elements must fill whole 256-byte repeats."""
    with pytest.raises(EmulatorError, match=r"Compare of 32 elements .*256-byte repeats"):
        _run(tmp_path, "Compare(m, a, b, CMPMODE::LT, 32);", _pairs(_SRC0), _pairs(_SRC1))


def test_select_tensor_tensor_follows_the_documentation(tmp_path):
    a, b = _pairs(_SEL0 + [0.0] * 48), _pairs(_SEL1 + [0.0] * 48)
    code = ("Duplicate(m.ReinterpretCast<int16_t>(), (int16_t)(60 | 32 << 8), 16);\n"
            "PipeBarrier<PIPE_V>();\n"
            "Select(c, m, a, b, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);")
    c, _ = _run(tmp_path, code, a, b)
    torch.testing.assert_close(c[:16], torch.tensor(_SELOUT))


def test_select_tensor_scalar_and_the_reused_mask_of_mode_0(tmp_path):
    """Mode 1 takes the scalar where a bit is 0; mode 0 reads the first 256 / sizeof(T) bits
    of selMask for every repeat (Select.md, 模式0)."""
    a = torch.arange(128, dtype=torch.float32)[None]
    code = ("Duplicate(m.ReinterpretCast<int16_t>(), (int16_t)0x00FF, 16);\n"
            "PipeBarrier<PIPE_V>();\n"
            "Select(c, m, a, (float)-1, SELMODE::VSEL_TENSOR_SCALAR_MODE, 128);")
    c, _ = _run(tmp_path, code, a, a, 128, name="mode1")
    expect = torch.where((torch.arange(128) % 16) < 8, torch.arange(128.0), -1.0)
    torch.testing.assert_close(c, expect)
    code = ("Duplicate(m.ReinterpretCast<int16_t>(), (int16_t)0x00FF, 16);\n"
            "Muls(b, a, (float)-1, 128);\n"
            "PipeBarrier<PIPE_V>();\n"
            "Select(c, m, a, b, SELMODE::VSEL_CMPMASK_SPR, 128);")
    c, _ = _run(tmp_path, code, a, a, 128, name="mode0")
    index = torch.arange(128)
    torch.testing.assert_close(c, torch.where((index % 64) % 16 < 8, index * 1.0, -index * 1.0))


def test_select_scratch_at_tmp_ub_offset_clobbers_a_tile_there(tmp_path):
    """Select.md: modes 1 and 2 need 8 KiB of UB kept free; the A2 implementation writes its
    scratch at TMP_UB_OFFSET (184 KiB). A tile there, read by MTE3 without a flag, races."""
    low = tilewright.lower(_kernel(64, "float32"), target="ascend")
    text = low.source.text.replace("GetWithOffset<float>(64, 512)",
                                   "GetWithOffset<float>(64, 188416)")
    text = text.replace("Add(c, a, b, 64);",
                        "Add(c, a, b, 64);\n"
                        "Select(b, m, a, (float)0, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);")
    assert "188416" in text and "Select(" in text
    work = tmp_path / "k"
    work.mkdir()
    a = torch.ones(1, 64)
    with pytest.raises(EmulatorError, match=r"race"):
        compile_and_run_source(text, low.source.payload, (a, a, torch.zeros(1, 64),
                                                          torch.zeros(1, 32, dtype=torch.uint8)),
                               work)
