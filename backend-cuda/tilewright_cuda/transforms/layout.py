"""Layout inference (the ``infer_layout`` phase): the choices of ``analysis.layouts`` attached
to the buffers as ``layout`` values (README, "Fragments").

- a fragment whose every use fits an mma accumulator layout becomes registers
  (:class:`~tilewright_cuda.layout.Accumulator`); its row statistics too
  (:class:`~tilewright_cuda.layout.RowVector`);
- a fragment whose every element only its owner thread touches is spread over the threads in
  registers (:class:`~tilewright_cuda.layout.Spread`); every other fragment stays a shared
  array visible to the whole block;
- shared gemm operands and epilogue tiles get the swizzled layout
  (:class:`~tilewright_cuda.layout.Swizzled`), also recorded in the function attribute
  ``keys.SMEM_LAYOUT`` (name -> [W, B]) for the debug tools;
- then accumulators that only wgmma gemms write take the wgmma layout, and 16-bit fragments
  that only carry a wgmma accumulator into wgmma's A operand stay in registers in it.
"""

from __future__ import annotations

import tvm_ffi
from tilewright.transform import prim_func_pass
from tvm import tirx

from .. import keys, layout
from ..analysis import layouts
from ..analysis.ir import find_thread, threads_of


def _attach(func, chosen: dict):
    """``func`` with each buffer of ``chosen`` (buffer -> layout) replaced by a copy carrying
    its layout."""
    remap = {buf: layout.attach(buf, kind) for buf, kind in chosen.items()}
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Buffer,
                                                             lambda b: remap.get(b, b))))


def infer_layout(options):
    """Accumulators, row vectors, spread fragments and swizzled tiles (the module
    docstring)."""

    def run(func):
        threads = threads_of(func)
        chosen = layouts.accumulators(func, options.arch, threads)
        swizzled = layouts.swizzled(func, options.arch, threads, chosen)
        vectors = layouts.row_vectors(func, chosen, threads)
        placed = {**chosen, **{v: layout.RowVector() for v in vectors}, **swizzled}
        placed.update({f: layout.Spread() for f in layouts.spread(func, threads, placed)})
        if not placed:
            return func
        func = _attach(func, placed)
        if swizzled:
            func = func.with_attr(keys.SMEM_LAYOUT, {b.name: [s.width, s.bits]
                                                     for b, s in swizzled.items()})
        return func

    return prim_func_pass("CUDAInferLayout", run)


def mark_wgmma_accumulators(options):
    """Register accumulators that only gemms fitting wgmma write get the wgmma layout."""

    def run(func):
        block = int(find_thread(func).extent.value)
        chosen = layouts.wgmma_accumulators(func, options.arch, block)
        if not chosen:
            return func
        return _attach(func, {buf: layout.Accumulator("wgmma") for buf in chosen})

    return prim_func_pass("CUDAMarkWgmmaAccumulators", run)


def keep_a_in_registers(options):
    """16-bit fragments that only carry a wgmma accumulator into the A operand of register-A
    wgmma gemms (``analysis.layouts.register_a``) become registers in the accumulator's
    layout; they are no longer shared tiles."""

    def run(func):
        block = int(find_thread(func).extent.value)
        chosen = layouts.register_a(func, options.arch, block)
        if not chosen:
            return func
        func = _attach(func, {f: layout.Accumulator("wgmma") for f in chosen})
        if func.attrs is not None and keys.SMEM_LAYOUT in func.attrs:
            names = {str(f.name) for f in chosen}
            func = func.with_attr(keys.SMEM_LAYOUT, {
                k: v for k, v in func.attrs[keys.SMEM_LAYOUT].items() if str(k) not in names})
        return func

    return prim_func_pass("CUDAWgmmaRegisterA", run)
