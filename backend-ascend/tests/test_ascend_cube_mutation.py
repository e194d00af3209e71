"""Mutations of the fractal parameters in generated cube code: each gives wrong numbers or an
emulator report, so the emulator's formats (Nd2Nz NZ, LoadData ZZ/ZN, Mmad, Fixpipe NZ -> ND)
pin down the generated parameters."""

import ascend_kernels as K
import tilewright
import torch
from test_ascend_cube import _gemm
from tilewright_ascend.executor import EmulatorError, compile_and_run_source

# (what, generated text, its wrong variant, the instruction a report about it names, or None
# where only wrong numbers are expected)
MUTATIONS = [
    # A's column blocks run into B_L1: the two MTE2 copies write the same bytes unordered
    ("Nd2Nz column-block stride of A", "Nd2NzParams(1, 64, 128, 0, 128, 64, 1, 0)",
     "Nd2NzParams(1, 64, 128, 0, 128, 80, 1, 0)", "DataCopy(Nd2Nz)"),
    ("LoadData of B without the fractal transpose", "LoadData2DParams{0, 4, 8, 0, 0, true, 0}",
     "LoadData2DParams{0, 4, 8, 0, 0, false, 0}", None),
    ("LoadData source stride of A", "LoadData2DParams{0, 4, 4, 0, 0, false, 0}",
     "LoadData2DParams{0, 4, 1, 0, 0, false, 0}", None),
    ("Fixpipe source stride", "fp.srcStride = 64;", "fp.srcStride = 80;", "Fixpipe"),
    ("Fixpipe without conversion", "QuantMode_t::F322F16", "QuantMode_t::NoQuant", "Fixpipe"),
]


def test_wrong_fractal_parameters_give_wrong_numbers_or_a_report(tmp_path):
    low = tilewright.lower(K.gemm(64, 64, 128, 64, 64, 128, kL0Size=64), target="ascend")
    text = low.source.text
    a, b = torch.randn(64, 128).half(), torch.randn(128, 64).half()
    ref = a.float() @ b.float()
    out = torch.empty(64, 64).half()
    for n in range(len(MUTATIONS) + 1):
        (tmp_path / f"m{n}").mkdir()
    compile_and_run_source(text, low.source.payload, (a, b, out), tmp_path / f"m{len(MUTATIONS)}")
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    for n, (what, good, bad, reported) in enumerate(MUTATIONS):
        assert good in text, what
        out = torch.zeros(64, 64).half()
        try:
            compile_and_run_source(text.replace(good, bad), low.source.payload, (a, b, out),
                                   tmp_path / f"m{n}")
        except EmulatorError as exc:
            assert reported and reported in str(exc), (what, str(exc))
            continue
        assert not torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2), what


def test_partial_tile_without_zero_padding_is_wrong(tmp_path):
    """Without the InitConstValue before each L1 load, the K padding of the last partial tile
    holds whatever L1 held (NaN bytes on the emulator) and the result is wrong."""
    low = tilewright.lower(_gemm(40, 24, 72, False, False, "float16"), target="ascend")
    text = "\n".join(line for line in low.source.text.splitlines()
                     if "InitConstValue(" not in line)
    a, b = torch.randn(40, 72).half(), torch.randn(72, 24).half()
    out = torch.zeros(40, 24).half()
    compile_and_run_source(text, low.source.payload, (a, b, out), tmp_path)
    assert not torch.allclose(out.float(), a.float() @ b.float(), rtol=1e-2, atol=5e-2)
