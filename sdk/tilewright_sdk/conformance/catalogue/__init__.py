"""The catalogue of portable kernels every backend is checked against: one table of rows
(:class:`Kernel`), each a kernel with the public names of ``tilewright.language`` it exercises,
the dtypes it applies to, its shape variants and a torch reference computed in float64.

:func:`cases` expands the table over dtypes and shape variants: ``full`` (whole tiles),
``partial`` (sizes that leave partial tiles at the edges) and ``dynamic`` (sizes read from the
arguments at every call). :func:`uncovered_names` lists the exports of the language no row
exercises; the SDK's tests require it to be empty. Shapes are small: the suite checks
semantics, not speed, and must stay quick on an interpreter.
"""

from . import access, control, low_precision, reductions, rng, scalar, tiles, warp
from .model import ALL_DTYPES, FLOATS, Case, Kernel, eager, rand
from .tiles import probe_kernel

DTYPES = FLOATS

# Exports that are types, not operations: kernels use them through the operations that make
# them (DType through the dtype names, TileBuffer and VarHandle through the allocations, Macro
# through T.macro).
NOT_COMPUTING = {
    "DType": "the class of the dtype names; each dtype name has cases",
    "TileBuffer": "the class of allocated tiles; each allocation has cases",
    "VarHandle": "the class T.alloc_var returns; T.alloc_var has cases",
    "Macro": "the class T.macro returns; T.macro has cases",
    "dtype": "TileLang's name of the DType class",
    "Var": "TVM's variable type (what T.dynamic returns), for isinstance checks; T.dynamic "
           "has cases",
    "sblock": "a lexical scope (TVM script's block) around statements that have cases "
              "(tests/language/test_script_blocks.py)",
    "reads": "TVM script's access hint inside a T.sblock: checked and dropped",
    "writes": "TVM script's access hint inside a T.sblock: checked and dropped",
    "axis": "TVM script's block iteration variables: refused at the user's line",
    "block_attr": "TVM script's block attributes: refused at the user's line",
    "sblock_attr": "TVM script's block attributes: refused at the user's line",
    "init": "TVM script's block initialisation: refused at the user's line",
    "where": "TVM script's block predicate: refused at the user's line",
    "int4": "held one value a byte in int8 by the language and packed two a byte at the call "
            "by the core (tests/language/test_int4_tensors.py): backends compute int8",
    "uint4": "no backend computes unsigned 4-bit elements: a kernel using uint4 is refused naming "
             "the backend (the contract's unsupported-dtype check)",
    "handle": "pointers (T.ptr tables) are held in int64 by the language: backends compute int64",
    "FragmentBuffer": "an annotation of a T.macro's tile parameter, as T.SharedBuffer (which "
                      "the named_value row uses): it documents the parameter",
    "LocalBuffer": "an annotation of a T.macro's tile parameter, as T.SharedBuffer",
    "CUDASourceCodeKernel": "a launch of the user's CUDA source, which only CUDA compiles (the "
                            "feature cuda_source_kernels); the others refuse it at its line: "
                            "tests/language/test_source_kernels.py, run in the host "
                            "emulation and built by NVRTC in "
                            "backend-cuda/tests/test_cuda_source_kernels.py",
}

CATALOGUE: tuple[Kernel, ...] = (*tiles.ROWS, *scalar.ROWS, *reductions.ROWS, *control.ROWS,
                                 *low_precision.ROWS, *rng.ROWS, *access.ROWS,
                                 *warp.ROWS)


def cases(names=None) -> list[Case]:
    """Every catalogue kernel at every dtype and shape variant (``names`` filters kernels)."""
    out = []
    for kernel in CATALOGUE:
        if names is not None and kernel.name not in names:
            continue
        for dtype in kernel.dtypes:
            for variant, dims in kernel.shapes.items():
                out.append(Case(kernel, dtype, variant, dict(dims)))
    return out


def covered_ops() -> set[str]:
    """The tile ops the catalogue exercises."""
    return {op for kernel in CATALOGUE for op in kernel.ops}


def covered_names() -> set[str]:
    """The names of ``tilewright.language`` the catalogue exercises."""
    return {name for kernel in CATALOGUE for name in kernel.names}


def uncovered_names() -> list[str]:
    """Exports of ``tilewright.language`` that compute but that no row exercises."""
    import tilewright.language as T

    covered = covered_names()
    # a dtype alias (T.float, T.half, ...) is covered where the dtype it names is
    aliases = {name for name in T.__all__
               if isinstance(getattr(T, name), T.DType) and str(getattr(T, name)) in covered}
    return sorted(set(T.__all__) - set(NOT_COMPUTING) - covered - aliases)


__all__ = ["ALL_DTYPES", "CATALOGUE", "DTYPES", "NOT_COMPUTING", "Case", "Kernel", "cases",
           "covered_names", "covered_ops", "eager", "probe_kernel", "rand", "uncovered_names"]

# Kernel factories other packages' tests and benchmarks build on (backend-ascend's split and
# vector tests, bench/tolerance_model.py), under the names they import.
_attention, _attention_ref, _gemm = tiles.attention_kernel, tiles.attention_reference, \
    tiles.gemm_kernel
