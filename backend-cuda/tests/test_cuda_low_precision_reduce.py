"""Every reduction kind into a float16/bfloat16 buffer lowers for CUDA (TVM has no bfloat16
infinity: the max/min identities are float32's, converted), builds with NVRTC, and computes
what torch computes in the host emulation: the shuffle reduction (fragments, rows shared by
lanes) and the serial one (thread-local operands), with the accumulator in the low-precision
type or only the destination in it."""

from __future__ import annotations

import hostemu
import pytest
import tilewright
import tilewright.language as T
import torch
from tilewright.testing import assert_close, float64_reference

KINDS = ("sum", "max", "min", "abssum", "absmax")
REFERENCE = {
    "sum": lambda x: x.sum(dim=1),
    "max": lambda x: x.amax(dim=1),
    "min": lambda x: x.amin(dim=1),
    "abssum": lambda x: x.abs().sum(dim=1),
    "absmax": lambda x: x.abs().amax(dim=1),
}
M, N, BM = 8, 40, 4  # 40 columns: a partial last step of the strided lane partials


def every_kind(dtype: str, acc: str, local: bool = False):
    """Y[k, i] = reduce_KINDS[k](X[i, :]): ``x`` in ``acc``, the results in ``dtype``; with
    ``local`` the operands are thread-local (every thread reduces every row)."""
    alloc = T.alloc_local if local else T.alloc_fragment

    @T.prim_func
    def reduce_all(X: T.Tensor((M, N), dtype), Y: T.Tensor((len(KINDS), M), dtype)):
        with T.Kernel(T.ceildiv(M, BM), threads=128) as bx:
            x = alloc((BM, N), acc)
            T.copy(X[bx * BM, 0], x)
            for k, kind in enumerate(KINDS):
                y = alloc((BM,), dtype)
                getattr(T, f"reduce_{kind}")(x, y, dim=1)
                T.copy(y, Y[k, bx * BM])

    return reduce_all


FORMS = [(dtype, acc, local) for dtype in ("bfloat16", "float16")
         for acc, local in ((dtype, False), ("float32", False), (dtype, True))]


def _id(form) -> str:
    dtype, acc, local = form
    return f"{dtype}-acc_{acc}{'-local' if local else ''}"


@pytest.mark.parametrize("form", FORMS, ids=[_id(f) for f in FORMS])
def test_every_reduction_kind_lowers_into_low_precision(form):
    source = tilewright.lower(every_kind(*form), "cuda -arch=sm_90a").source.text
    assert "__shfl_xor_sync" in source or form[2]  # the fragment form reduces across lanes


@pytest.mark.nvrtc
def test_low_precision_reductions_build_with_nvrtc():
    kernel = tilewright.compile(every_kind("bfloat16", "bfloat16"), target="cuda -arch=sm_90a",
                                execution_backend="nvrtc")
    assert kernel.get_kernel_source()


@pytest.mark.emulator
@pytest.mark.parametrize("form", FORMS, ids=[_id(f) for f in FORMS])
def test_low_precision_reductions_match_torch(form, tmp_path):
    dtype = form[0]
    lowered = tilewright.lower(every_kind(*form), "cuda -arch=sm_90a")
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    y = torch.full((len(KINDS), M), float("nan"), dtype=x.dtype)
    hostemu.run(lowered.source.text, lowered.source.payload, tmp_path, x, y)
    for k, kind in enumerate(KINDS):
        (want,) = float64_reference(lambda t, kind=kind: [REFERENCE[kind](t)], x)
        assert_close(y[k], want, dtype=dtype, reduction_length=N, name=f"reduce_{kind}")
