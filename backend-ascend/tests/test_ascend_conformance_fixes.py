"""Fixes of conformance rows that Ascend used to fail, checked on the IR and the source
(the conformance suite runs the kernels on the emulator)."""

import pytest
import tilewright
import tilewright.language as T
from tilewright.errors import KernelError
from tilewright.ir import Region, make_call
from tilewright_ascend.analysis.accesses import accesses
from tilewright_ascend.facts.ops import VREDUCE
from tilewright_sdk.conformance.catalogue import cases
from tvm import tirx


def _source(case_id: str) -> str:
    case = next(c for c in cases() if c.id == case_id)
    return tilewright.lower(case.kernel.make(case.dtype, **case.dims), target="ascend").source.text


def test_a_reductions_work_tile_counts_as_written():
    """The sync analysis takes a vector op's effects from its schema: a reduction writes its
    work tile (the Abs of reduce_absmax), so a copy out of bytes it reuses is waited for."""
    tiles = [tirx.decl_buffer((8,), "float32", n, scope="ascend.ub") for n in "dsw"]
    dst, src, work = (Region.full(t) for t in tiles)
    call = make_call(VREDUCE.name, {"dst": dst, "src": src, "work": work},
                     {"kind": "absmax", "dim": 1, "clear": False})
    found = {(a.buffer.name, a.write) for a in accesses(call)}
    assert found == {("d", True), ("d", False), ("s", False), ("w", True)}


def test_a_3d_tile_copy_is_a_loop_of_2d_copies():
    text = _source("copy_3d-float32-partial")
    assert "for (int32_t p = 0; p < 2; ++p)" in text
    assert "S[(p * 64)]" in text


def test_an_8_bit_fill_duplicates_int16_pairs():
    text = _source("int_arith-int8-partial")
    assert "Duplicate(x[r * 32].ReinterpretCast<int16_t>(), " in text
    assert "Duplicate(x[r * 32], " not in text


def test_views_of_a_tile_are_accesses_of_the_tile():
    """T.reshape / T.view alias the tile's UB bytes: an element of the flat view is the tile's
    element at the same row-major position, T.reinterpret of it a bit cast."""
    text = _source("views-float32-partial")
    assert "flat" not in text and "same" not in text
    assert "x.SetValue(k, TW_CAST(float, TW_BITCAST(float, uint32_t, (TW_BITCAST(uint32_t, " \
           "float, x.GetValue(" in text
    assert "Adds(x[(i * 8)], x[(i * 8)], " in text


def test_a_tile_op_on_a_reshaped_view_is_refused_at_its_line():
    @T.prim_func
    def flat_copy(X: T.Tensor((64,), "float32"), Y: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_shared((8, 8), "float32")
            T.copy(X[bx * 64], T.reshape(x, (64,)))
            T.copy(x, Y[0, 0])

    with pytest.raises(KernelError, match=r"T.copy of view 'x_view' \(64,\) float32: backend "
                                          r"'ascend' takes a view of tile 'x' \(8, 8\) float32 "
                                          r"in element accesses only") as info:
        tilewright.lower(flat_copy, target="ascend")
    assert "T.copy(X[bx * 64], T.reshape(x, (64,)))" in str(info.value)
