"""Which gemm instruction fits a ``T.gemm``: ``wgmma.mma_async`` (sm_90a, ``WGMMA_FORMS``:
m64nNk16 for float16/bfloat16, m64nNk32 for int8 into int32 and float8_e4m3fn/float8_e5m2),
then ``mma.sync`` over warp tiles (``MMA_FORMS``: m16n8k16 for float16/bfloat16 on sm_80+,
m16n8k32 for int8 on sm_80+ and float8 on sm_89+; before sm_89 float8 takes the float16
instruction on operands widened in registers, ``WIDENED_MMA_FORMS``), else a gemm spread over
the threads. :func:`mma_form` says which form an architecture takes. Each predicate says why
its instruction does not fit (None when it does); layout inference and the gemm rules ask the
same ones."""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.ir import TileOpCall, matrix_dims
from tilewright.transform.lowering_utils import non_unit
from tvm import sym as arith
from tvm import tirx

from .. import layout
from ..keys import WARP, WARPGROUP
from .ir import const, full


@dataclass(frozen=True)
class MmaForm:
    """One ``mma.sync`` form: the K of one step over the operands' fragments (dense columns),
    the oldest architecture that has it, its PTX operand type and instruction
    (include/tw_mma.h issues it). ``widened``: the float8 type whose fragments are widened to
    float16 in registers, each k32 step two m16n8k16 .f16 (include/tw_mma_widen.h)."""

    k: int
    min_sm: int
    ptx: str
    op: str = "mma.sync"
    widened: str | None = None

    @property
    def instruction(self) -> str:
        if self.widened is not None:
            return f"{self.op} m16n8k16 .{self.ptx} on {self.widened} widened to {self.ptx}"
        return f"{self.op} m16n8k{self.k} .{self.ptx}"


# (A, B, C) dtypes -> the mma.sync form that computes them
MMA_FORMS = {
    ("float16", "float16", "float32"): MmaForm(16, 80, "f16"),
    ("bfloat16", "bfloat16", "float32"): MmaForm(16, 80, "bf16"),
    ("int8", "int8", "int32"): MmaForm(32, 80, "s8"),
    ("float8_e4m3fn", "float8_e4m3fn", "float32"): MmaForm(32, 89, "e4m3"),
    ("float8_e5m2", "float8_e5m2", "float32"): MmaForm(32, 89, "e5m2"),
}
# (A, B, C) dtypes -> the form of an architecture older than the MMA_FORMS one: every e4m3 and
# e5m2 value is a float16 value, so the float16 instruction on the widened fragments computes
# the same exact products into float32 (summed in another order)
WIDENED_MMA_FORMS = {
    ("float8_e4m3fn", "float8_e4m3fn", "float32"): MmaForm(32, 80, "f16", widened="e4m3"),
    ("float8_e5m2", "float8_e5m2", "float32"): MmaForm(32, 80, "f16", widened="e5m2"),
}
# (A, B, C) dtypes -> the form of a T.gemm_sp (A 2:4 sparse: the kept values and metadata)
SPARSE_MMA_FORMS = {
    ("float16", "float16", "float32"): MmaForm(32, 80, "f16", "mma.sp::ordered_metadata"),
    ("bfloat16", "bfloat16", "float32"): MmaForm(32, 80, "bf16", "mma.sp::ordered_metadata"),
}


@dataclass(frozen=True)
class WgmmaForm:
    """One ``wgmma.mma_async`` form: its PTX operand type, the K of one instruction (32 bytes
    of either element size) and whether its operands may be stored MN-major (only the 16-bit
    forms have the transpose operands). ``code`` names it in include/tw_wgmma.h."""

    ptx: str
    k: int
    mn_major: bool

    @property
    def code(self) -> str:
        return f"TW_WGMMA_{self.ptx.upper()}"


# (A, B, C) dtypes -> the wgmma form that computes them
WGMMA_FORMS = {
    ("float16", "float16", "float32"): WgmmaForm("f16", 16, True),
    ("bfloat16", "bfloat16", "float32"): WgmmaForm("bf16", 16, True),
    ("int8", "int8", "int32"): WgmmaForm("s8", 32, False),
    ("float8_e4m3fn", "float8_e4m3fn", "float32"): WgmmaForm("e4m3", 32, False),
    ("float8_e5m2", "float8_e5m2", "float32"): WgmmaForm("e5m2", 32, False),
}
# (A, B, C) dtypes -> the form of a T.gemm_sp on wgmma (``wgmma.mma_async.sp``: K counts the
# dense columns of one instruction, 16 kept values of A a row)
SPARSE_WGMMA_FORMS = {
    ("float16", "float16", "float32"): WgmmaForm("f16", 32, True),
    ("bfloat16", "bfloat16", "float32"): WgmmaForm("bf16", 32, True),
}


def dtypes_of(call: TileOpCall) -> tuple[str, str, str]:
    """The (A, B, C) dtypes of a gemm."""
    return tuple(str(call.operands[k].buffer.dtype) for k in ("A", "B", "C"))


def wgmma_form(call: TileOpCall) -> WgmmaForm | None:
    """The ``wgmma.mma_async`` (``.sp`` for T.gemm_sp) form of a gemm's dtypes, or None."""
    return (SPARSE_WGMMA_FORMS if call.name == "gemm_sp" else WGMMA_FORMS).get(dtypes_of(call))


def mma_form(call: TileOpCall, arch) -> MmaForm | None:
    """The ``mma.sync`` (``mma.sp`` for T.gemm_sp) form ``arch`` takes for a gemm's dtypes, or
    None (:func:`dense_form` for T.gemm)."""
    if call.name == "gemm_sp":
        return SPARSE_MMA_FORMS.get(dtypes_of(call))
    return dense_form(dtypes_of(call), arch)


def dense_form(dtypes: tuple[str, str, str], arch) -> MmaForm | None:
    """The ``MMA_FORMS`` form of ``dtypes``, or on an architecture older than it the
    ``WIDENED_MMA_FORMS`` one where there is one; None when the dtypes have neither."""
    form = MMA_FORMS.get(dtypes)
    if form is not None and arch is not None and arch.sm < form.min_sm:
        return WIDENED_MMA_FORMS.get(dtypes, form)
    return form


def dense_k(call: TileOpCall) -> int | None:
    """K of a gemm: op(A)'s columns, twice the kept values' of a T.gemm_sp."""
    a = call.operands["A"]
    adims = matrix_dims(a.extents)
    k = const(a.extents[adims[0]] if call.attrs["transpose_A"] else a.extents[adims[1]])
    return k * 2 if k is not None and call.name == "gemm_sp" else k


def forms_on(arch) -> str:
    """The (A, B) -> C dtypes the mma.sync forms of ``arch`` compute, for messages."""
    forms = {dtypes: dense_form(dtypes, arch) for dtypes in MMA_FORMS}
    return ", ".join(f"{a} -> {c}" + ("" if form.widened is None else
                                       f" (widened to {form.ptx})")
                     for (a, _, c), form in forms.items()
                     if arch is not None and arch.sm >= form.min_sm)


def leading_dim(region) -> int | None:
    """The constant row length of a region's buffer when the region is a 2-D tile of it: of a
    2-D buffer, or of one stage ``[s, :, :]`` of a ``[P, R, C]`` one; else None."""
    shape = region.buffer.shape
    if len(shape) == 2 or (len(shape) == 3 and const(region.extents[0]) == 1):
        return const(shape[-1])
    return None


def atom_misfit(region, name: str) -> str | None:
    """Why the tile of a gemm operand ``region`` (named ``name``) that does not cover its
    buffer cannot be read from its first element as a swizzled tile by a wgmma descriptor or
    ``ldmatrix`` (the contract of ``layout.py``), or None. Such a region must start on a
    swizzle atom, 8 rows of one W-byte column block: its rows at a multiple of 8, its columns
    at a multiple of the column block (a K or N offset that moves the descriptor's start by
    whole blocks), a stage index of a ``[P, R, C]`` buffer anywhere (a whole-tile offset, R a
    multiple of 8). There the swizzled address of its first element is the unswizzled one,
    and the tile from there is laid out as the whole tile is."""
    buf = region.buffer
    shape = [const(e) for e in buf.shape]
    what = f"{name} reads part of {buf.name!r}"
    if leading_dim(region) is None or None in shape:
        return f"{what} that is not a 2-D tile of a 2-D buffer or of one stage of a " \
               "[stages, rows, columns] one with a constant shape"
    found = layout.params(shape[-2], shape[-1], str(buf.dtype))
    if found is None:
        return f"{what}, whose {shape[-2]} x {shape[-1]} {buf.dtype} tile has no swizzled " \
               "layout (rows of 1- or 2-byte elements, a multiple of 128 bytes or shorter)"
    width = found[0]
    block = width // layout.SWIZZLE_DTYPES[str(buf.dtype)]
    analyzer = arith.Analyzer()
    *stage, row, col = region.starts
    if not analyzer.can_prove(tirx.floormod(col, block) == 0):
        return f"{what} from column {col}, not a multiple of the {block}-column ({width}-byte) " \
               "block of its swizzle: a wgmma descriptor starts on a swizzle atom (8 rows of " \
               "one column block); slice K (or N) at multiples of that block"
    if not analyzer.can_prove(tirx.floormod(row, 8) == 0):
        return f"{what} from row {row}, not a multiple of 8: a wgmma descriptor starts on a " \
               "swizzle atom (8 rows of one column block)"
    if stage and shape[-2] % 8 and not analyzer.can_prove(stage[0] == 0):
        return f"{what} at stage {stage[0]} of tiles of {shape[-2]} rows, not a multiple of " \
               "8: a stage would not start on a swizzle atom"
    return None


def mma_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why ``mma.sync.m16n8k16`` cannot run this gemm on ``threads`` threads, or None."""
    return mma_not_asked(call, arch) or mma_shape_misfit(call, arch, threads)


def mma_not_asked(call: TileOpCall, arch) -> str | None:
    """Why the gemm does not ask for tensor cores (arch, dtypes, operand memory), or None."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    form = mma_form(call, arch)
    if form is None:
        return f"operand dtypes {dtypes_of(call)} have no mma.sync form"
    if arch is None or arch.sm < form.min_sm:
        return f"{form.instruction} needs sm_{form.min_sm} or newer"
    for name, region in (("A", a), ("B", b), ("C", c)):
        if (layout.is_thread_local(region.buffer) and not
                layout.is_accumulator(region.buffer)) or \
                layout.memory(region.buffer) == "global":
            return f"{name} is not in shared memory or a fragment"
        if leading_dim(region) is None:
            return f"{name} is not a 2-D tile of a 2-D buffer with a constant row length"
        if len(non_unit(region)) != 2:
            return f"{name} is one row or column wide (a GEMV): the thread gemm computes it " \
                   "without tensor cores"
    return _sparse_misfit(call) if call.name == "gemm_sp" else None


def _sparse_misfit(call: TileOpCall) -> str | None:
    """Why a T.gemm_sp's values and metadata are not as mma.sp reads them, or None: values
    [M, K / 2] and metadata rows in shared memory, whose 16-bit halves start on even bytes."""
    if call.attrs["transpose_A"] or call.attrs["transpose_E"]:
        return "A_sparse or E is transposed (mma.sp reads them [M, K / 2] and [M, K / e])"
    e = call.operands["E"]
    size = e.buffer.dtype.bits // 8
    start = const(e.starts[-1])
    if layout.memory(e.buffer) not in ("shared", "shared.dyn") or len(e.buffer.shape) != 2 or \
            leading_dim(e) is None or start is None or (leading_dim(e) * size) % 2 or \
            (start * size) % 2:
        return "E is not a 2-D shared tile whose rows start on even bytes"
    return None


def mma_shape_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why the tile shape or the warps do not fit the gemm's ``mma.sync`` form, or None."""
    c = call.operands["C"]
    cdims = non_unit(c)
    m, n = const(c.extents[cdims[0]]), const(c.extents[cdims[1]])
    k = dense_k(call)
    ik = mma_form(call, arch).k
    if None in (m, n, k) or m % 16 or n % 8 or k % ik:
        return f"tile {m}x{n}x{k} is not a multiple of the 16x8x{ik} instruction"
    if threads % WARP:
        return f"it runs on whole warps of {WARP} threads, and {partial_warp(threads)}"
    if (m // 16) * (n // 8) % (threads // WARP):
        return f"{(m // 16) * (n // 8)} 16x8 output tiles do not split evenly over " \
               f"{threads // WARP} warps"
    return None


def partial_warp(threads: int) -> str:
    """What a block of ``threads`` threads lacks for a warp-wide instruction (mma.sync,
    ldmatrix, setmaxnreg: every lane of the warp takes part), and what to do."""
    lanes = threads % WARP
    return f"threads={threads} leaves a partial warp of {lanes} thread" \
        f"{'' if lanes == 1 else 's'}: use a multiple of {WARP} threads"


PADDED_ROWS = range(2, 16)


def mma_rows_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why the gemm cannot take ``mma.sync`` with op(A)'s rows padded to the instruction's 16
    (``tw_gemm_mma_rows``), or None. The rule: a tile of 2..15 rows (``PADDED_ROWS``: a decode
    GEMV of a few tokens) whose N and K fit the instruction, C in shared memory, N split
    evenly over the warps. One row (M = 1) keeps the thread gemm: the GEMV is bound by
    reading B (one multiply-add per element of B loaded), the padded instruction would use
    1/16 of its rows, and the thread gemm needs no zero fragments nor a warp-wide exchange;
    from 2 rows on, the thread gemm loads each element of A and B from shared memory once per
    multiply-add while mma.sync reuses a B fragment for every row. On sm_90a too: a wgmma
    would pad to 64 rows per warpgroup."""
    asked = mma_not_asked(call, arch)
    if asked is not None:
        return asked
    a, c = call.operands["A"], call.operands["C"]
    if layout.is_accumulator(c.buffer):
        return "C is a register accumulator (the padded form keeps C in shared memory)"
    cdims = non_unit(c)
    m, n = const(c.extents[cdims[0]]), const(c.extents[cdims[1]])
    k, ik, warps = dense_k(call), mma_form(call, arch).k, threads // WARP
    if call.name != "gemm" or m not in PADDED_ROWS:
        return f"M = {m} is not a T.gemm tile of {PADDED_ROWS.start}..{PADDED_ROWS.stop - 1} rows"
    if threads % WARP:
        return f"it runs on whole warps of {WARP} threads, and {partial_warp(threads)}"
    if None in (n, k) or n % (8 * warps) or k % ik:
        return f"tile N x K = {n} x {k} does not give each of {warps} warps whole 8-column " \
               f"tiles and whole k{ik} steps"
    if leading_dim(a) is None:
        return "A is not a 2-D tile with a constant row length"
    return None


def mma_policy_error(call: TileOpCall, arch, threads: int) -> str | None:
    """Why a gemm that asks for tensor cores cannot have them, or None. A gemm asks for them
    when its dtypes have an mma.sync form (``MMA_FORMS``) and it reads shared memory or
    fragments; a form newer than sm_80 that ``arch`` lacks, with no widened form for it
    (:func:`dense_form`), is an error naming what ``arch`` has; on one that has it, the tile
    must be a multiple of the instruction and its 16x8 output tiles must split evenly over the
    warps. Other gemms take the thread gemm quietly."""
    form = mma_form(call, arch)
    if form is not None and (arch is None or arch.sm < form.min_sm) and \
            form.min_sm > 80:
        name = "no architecture" if arch is None else arch.name
        return (f"T.gemm of {' x '.join(dtypes_of(call)[:2])} into {dtypes_of(call)[2]} on "
                f"backend 'cuda' ({name}) needs {form.instruction}, which sm_{form.min_sm} and "
                f"newer have; {name} computes gemm on tensor cores for "
                f"{forms_on(arch) or 'no dtypes'}: target 'cuda -arch=sm_{form.min_sm}' or "
                "newer, or convert the operands")
    if mma_not_asked(call, arch) is not None:
        return None
    misfit = mma_shape_misfit(call, arch, threads)
    if misfit is None or mma_rows_misfit(call, arch, threads) is None:
        return None
    a, c = call.operands["A"], call.operands["C"]
    m, n = (const(c.extents[d]) for d in non_unit(c))
    k = dense_k(call)
    what = (f"T.{call.name} of {a.buffer.dtype} into {c.buffer.dtype} accumulators on backend "
            f"'cuda' ({arch.name}) uses the tensor-core instruction {form.instruction}")
    if misfit.startswith("tile "):
        padded = f" (a tile of {m} rows would take it padded to 16 rows, but its " \
                 f"{mma_rows_misfit(call, arch, threads)})" if m in PADDED_ROWS else ""
        return (f"{what}, but its tile M x N x K = {m} x {n} x {k} is not a multiple of the "
                f"instruction shape 16 x 8 x {form.k}{padded}: make block M a multiple of 16, "
                f"K of {form.k} and block N a multiple of 8")
    if "split evenly" not in misfit:
        return f"{what}, but {misfit}"
    tiles, warps = (m // 16) * (n // 8), threads // WARP
    fits = [w * WARP for w in range(1, tiles + 1) if tiles % w == 0 and w * WARP <= 1024][-4:]
    return (f"{what}, but threads={threads} gives {warps} warps and the {m} x {n} "
            f"accumulator has {tiles} output tiles of 16 x 8 ({m // 16} x {n // 8}), which do "
            f"not split evenly over {warps} warps: use threads in "
            f"{{{', '.join(map(str, fits))}}} or a tile with a multiple of {warps} 16 x 8 tiles")


def wgmma_chunk(n: int, block: int) -> int | None:
    """The N of one wgmma: all of ``n`` up to 256, else the largest multiple of the B tile's
    column block (``block`` elements) that divides ``n``."""
    if n <= 256:
        return n
    for nc in range(256, 7, -8):
        if n % nc == 0 and nc % block == 0:
            return nc
    return None


def wgmma_shape_misfit(call: TileOpCall, arch, threads: int, a_in_registers: bool = False
                       ) -> str | None:
    """Why the gemm cannot be a wgmma, the accumulator's layout aside; None when it can. With
    ``a_in_registers`` A is the 2-D register fragment the register-A form reads (whole,
    [M, K]) instead of a swizzled shared tile."""
    a, b, c = (call.operands[k] for k in ("A", "B", "C"))
    if arch is None or arch.name != "sm_90a":
        return "wgmma needs sm_90a"
    form = wgmma_form(call)
    if form is None:
        table = SPARSE_WGMMA_FORMS if call.name == "gemm_sp" else WGMMA_FORMS
        return f"operand dtypes {dtypes_of(call)} have no wgmma form (" + \
            ", ".join(f"{a} -> {c}" for a, _, c in table) + ")"
    if call.name == "gemm_sp" and _sparse_misfit(call) is not None:
        return _sparse_misfit(call)
    if call.attrs["transpose_A"]:
        return "A in registers must be [M, K]" if a_in_registers else \
            "A must be stored [M, K] (K-major) for the wgmma descriptor"
    if not form.mn_major and not call.attrs["transpose_B"]:
        return f"B must be stored [N, K] (transpose_B=True): the {form.ptx} wgmma reads " \
               "8-bit operands K-major only"
    for name, region in ((("B", b),) if a_in_registers else (("A", a), ("B", b))):
        part = None if full(region) else atom_misfit(region, name)
        if part is not None:
            return part
        if layout.swizzle_of(region.buffer) is None or leading_dim(region) is None:
            return f"{name} is not a swizzled 2-D shared tile (layout.Swizzled) nor one stage " \
                   "of a swizzled [stages, rows, columns] one"
    if a_in_registers and (not all(const(s) == 0 for s in a.starts) or [
            const(e) for e in a.extents] != [const(e) for e in a.buffer.shape]):
        return "A is read in part"
    if not layout.is_accumulator(c.buffer) or len(non_unit(c)) != 2:
        return "C is not a 2-D register accumulator (layout.Accumulator)"
    m, n = (const(e) for e in c.extents)
    k = dense_k(call)
    if threads % WARPGROUP or m != 64 * (threads // WARPGROUP) or \
            (a_in_registers and const(a.extents[0]) != m):
        return f"M = {m} is not 64 rows per warpgroup of the {threads} threads"
    width_b = layout.swizzle_of(b.buffer)[0]
    block_b = width_b // layout.SWIZZLE_DTYPES[str(b.buffer.dtype)]
    if None in (n, k) or k % form.k or n % 8 or wgmma_chunk(n, block_b) is None:
        return f"tile N x K = {n} x {k} does not split into m64nNk{form.k} instructions"
    return None


def wgmma_misfit(call: TileOpCall, arch, threads: int) -> str | None:
    """Why the gemm cannot be a wgmma with C in the wgmma accumulator layout; a gemm reading
    a register A operand that does not fit is an error (layout inference checked it: no
    other variant reads such an A)."""
    a_in_registers = layout.is_register_a(call.operands["A"].buffer)
    problem = wgmma_shape_misfit(call, arch, threads, a_in_registers)
    if problem is None and layout.of(call.operands["C"].buffer) != layout.Accumulator("wgmma"):
        problem = "C does not have the wgmma accumulator layout"
    return problem
