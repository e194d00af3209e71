"""``T.im2col``: TileLang's image-to-column gather for convolutions as GEMMs.

It is written here as the ``T.Parallel`` loop nest TileLang lowers it to (one element of the
column tile per iteration), so every backend runs it as it runs any element-wise loop.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import kernel_error
from . import builder as B
from .buffer import TileBuffer, region_of, resolve, to_expr
from .frames import LOOP_KIND_KEY


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad,
           eviction_policy=None):
    """Gather tile ``(nhw_step, c_step)`` of the im2col matrix of ``img`` into ``col``.

    ``img`` is an (N, H, W, C) tensor; the matrix has one row per output pixel (``n``, ``oh``,
    ``ow`` flattened) and one column per (``kh``, ``kw``, ``c``), for a ``kernel`` x ``kernel``
    window with ``stride``, ``dilation`` and zero padding ``pad``. ``col``'s last two
    dimensions are the tile (block_M, block_K); rows and columns past the matrix and pixels
    in the padding read zero. ``eviction_policy`` is a cache hint, ignored here.
    """
    del eviction_policy  # a GPU cache hint
    builder = B.require_kernel("T.im2col")
    if builder.enclosing("parallel") is not None:
        raise kernel_error("T.im2col is a tile operation and cannot be used inside a "
                           "T.Parallel loop; call it outside the loop")
    if not isinstance(img, TileBuffer) or img.ndim != 4:
        raise kernel_error("T.im2col: the image must be a whole 4-D (N, H, W, C) tensor, got "
                           f"{img!r:.60}")
    dst = resolve(region_of(col, "T.im2col destination"), None, "T.im2col")
    if len(dst.extents) < 2:
        raise kernel_error(f"T.im2col: the column tile {dst.buffer.name!r} needs at least 2 "
                           "dimensions")
    if str(dst.buffer.dtype) != img.dtype:
        raise kernel_error(f"T.im2col: image {img.name!r} is {img.dtype} but the column tile "
                           f"{dst.buffer.name!r} is {dst.buffer.dtype}")
    n, h, w, c = (to_expr(s) for s in img.buffer.shape)
    k, s, d, p = (to_expr(v) for v in (kernel, stride, dilation, pad))
    out_h = tirx.floordiv(h + 2 * p - (k - 1) * d - 1, s) + 1
    out_w = tirx.floordiv(w + 2 * p - (k - 1) * d - 1, s) + 1
    block_m, block_k = (to_expr(e) for e in dst.extents[-2:])
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    row = to_expr(nhw_step) * block_m + i
    column = to_expr(c_step) * block_k + j
    pixel = tirx.floormod(row, out_h * out_w)
    ih = tirx.floordiv(pixel, out_w) * s + tirx.floordiv(column, k * c) * d - p
    iw = tirx.floormod(row, out_w) * s + tirx.floormod(tirx.floordiv(column, c), k) * d - p
    inside = tirx.all(row < n * out_h * out_w, column < k * k * c, ih >= 0, ih < h, iw >= 0,
                      iw < w)
    load = tirx.BufferLoad(img.buffer, [tirx.floordiv(row, out_h * out_w), ih, iw,
                                        tirx.floormod(column, c)])
    value = tirx.if_then_else(inside, load, tirx.const(0, img.dtype))
    index = [to_expr(start) for start in dst.starts]
    index[-2], index[-1] = index[-2] + i, index[-1] + j
    span = B.here()
    body = tirx.BufferStore(dst.buffer, value, index, span=span)
    for var, extent in ((j, block_k), (i, block_m)):
        body = tirx.For(var, 0, extent, tirx.ForKind.SERIAL, body,
                        annotations={LOOP_KIND_KEY: "parallel"}, span=span)
    builder.emit(body)


c2d_im2col = im2col  # TileLang's former name
