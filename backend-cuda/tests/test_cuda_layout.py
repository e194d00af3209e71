"""Layouts are values attached to buffers (tilewright_cuda/layout.py): what layout inference
attaches, every later pass reads back, also from a buffer rebuilt with another shape or as a
plain copy of its scope; a buffer's alignment says nothing about its layout."""

import pytest
from tilewright_cuda import layout
from tvm import tirx

KINDS = [layout.Swizzled(128, 3), layout.Accumulator("square"), layout.Accumulator("rows"),
         layout.Accumulator("wgmma"), layout.RowVector()]


def _buffer(kind):
    shape = (128,) if isinstance(kind, layout.RowVector) else (64, 64)
    dtype = "float16" if isinstance(kind, layout.Swizzled) else "float32"
    scope = "shared.dyn" if isinstance(kind, layout.Swizzled) else "local.fragment"
    return tirx.decl_buffer(shape, dtype, "t", scope=scope)


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_a_layout_survives_rebuilding_the_buffer(kind):
    buf = layout.attach(_buffer(kind), kind)
    assert layout.of(buf) == kind
    versions = layout.reshaped(buf, (3, *buf.shape))  # pipeline versions
    copy = tirx.decl_buffer(buf.shape, buf.dtype, buf.name, scope=str(buf.scope()))
    if isinstance(kind, layout.Swizzled):
        assert layout.of(versions) == kind and layout.memory(versions) == "shared.dyn"
    assert layout.of(copy) == kind


def test_alignment_is_not_a_layout():
    buf = tirx.decl_buffer((64, 64), "float16", "t", scope="shared.dyn", data_alignment=1024)
    assert layout.of(buf) is None and layout.memory(buf) == "shared.dyn"


def test_a_swizzled_fragment_stays_a_shared_fragment():
    frag = layout.attach(tirx.decl_buffer((64, 64), "float16", "p", scope="local.fragment"),
                         layout.Swizzled(128, 3))
    assert layout.memory(frag) == "local.fragment" and not layout.is_thread_local(frag)
    wgmma_a = layout.attach(frag, layout.Accumulator("wgmma"))
    assert layout.is_register_a(wgmma_a) and layout.swizzle_of(wgmma_a) is None


def test_an_unknown_accumulator_grid_is_an_error():
    with pytest.raises(ValueError, match="unknown accumulator grid"):
        layout.Accumulator("diagonal")
