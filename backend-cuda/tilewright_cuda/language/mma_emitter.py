"""Warp-level tensor-core GEMM written by hand, with TileLang's public names: the
``TensorCoreIntrinEmitter`` of ``tilelang.cuda.intrinsics.macro.mma_macro_generator`` and the
``get_swizzle_layout`` / ``make_mma_swizzle_layout`` of ``tilelang.cuda.intrinsics``, so a
kernel that uses them ports by changing its imports (the port tool's ``--dialect cuda`` maps
them here).

The emitter describes how a block's warps split a ``block_row_warps * warp_row_tiles`` x
``block_col_warps * warp_col_tiles`` tile and writes, inside the kernel, the per-thread code
of one step: ``ldmatrix_a`` / ``ldmatrix_b`` fill each thread's fragments from shared tiles
(``T.ptx_ldmatrix``, or element loads where ldmatrix cannot transpose 8-bit elements or a
row is not 16-byte aligned), ``mma`` issues the warp's ``T.ptx_mma`` instructions, ``stmatrix``
stores the accumulators to a shared or global tile. ``INT4TensorCoreIntrinEmitter`` reads the
int8 fragments as pairs of int4 values. The fragments are the thread-local arrays the kernel
allocates (``T.alloc_local``): per 16-row tile ``local_size_a`` A elements, per
``micro_size_y``-column tile ``local_size_b`` B elements, per pair ``local_size_out``
accumulators, in the PTX
``mma.m16n8k16`` / ``m16n8k32`` fragment layouts (an n16 tile is two n8 instructions, its
second half of B registers and of accumulators the second's).

Warps: warp ``w`` of the block is ``(warp_m, warp_n) = (w % block_row_warps, w //
block_row_warps)`` (``is_m_first=True``: ``(w // block_col_warps, w % block_col_warps)``), and
owns rows ``warp_m * warp_row_tiles`` and columns ``warp_n * warp_col_tiles`` of the block's
tile.
"""

from __future__ import annotations

from tilewright.language import Layout
from tilewright.language import builder as B
from tilewright.language.buffer import BufferSlice, TileBuffer, as_int, to_expr
from tilewright.language.dtypes import DType
from tvm import tirx

from ..keys import OWN_ELEMENTS
from .dialect import access_ptr as _access_ptr
from .dialect import error, get_thread_binding, ptx_ldmatrix, ptx_mma, span

# operand type -> (PTX name, k of one instruction, accumulator types it takes)
FORMS = {
    "float16": ("fp16", 16, ("float32", "float16")),
    "bfloat16": ("bf16", 16, ("float32",)),
    "int8": ("int8", 32, ("int32",)),
}
PTX_NAMES = {"float32": "fp32", "float16": "fp16", "int32": "int32"}
WARP = 32


def _name(dtype) -> str:
    return str(DType(dtype))


class TensorCoreIntrinEmitter:
    """``TensorCoreIntrinEmitter(a_dtype, b_dtype, accum_dtype, a_transposed, b_transposed,
    block_row_warps, block_col_warps, warp_row_tiles, warp_col_tiles, chunk)``: the warp tiling
    of a hand-written mma.sync GEMM (see the module). A is stored ``[M][K]`` (``[K][M]`` when
    ``a_transposed``), B ``[K][N]`` (``[N][K]`` when ``b_transposed``). Operand types:
    float16 (into float32 or float16), bfloat16 (into float32), int8 (into int32); A and B of
    one type. ``warp_row_tiles`` a multiple of 16, ``warp_col_tiles`` of 8, ``chunk`` (the K
    of a block step) of the instruction's k (16, int8: 32); anything else is refused here, at
    the line that makes the emitter."""

    M_DIM = 16
    WARP_SIZE = WARP

    def __init__(self, a_dtype="float16", b_dtype="float16", accum_dtype="float16",
                 a_transposed=False, b_transposed=False, block_row_warps=2, block_col_warps=2,
                 warp_row_tiles=8, warp_col_tiles=8, chunk=16, reduce_k=1,
                 num_elems_per_byte=1, is_m_first=False, thread_var=None):
        self.a_dtype, self.b_dtype = _name(a_dtype), _name(b_dtype)
        self.accum_dtype = _name(accum_dtype)
        if self.a_dtype != self.b_dtype or self.a_dtype not in FORMS or \
                self.accum_dtype not in FORMS[self.a_dtype][2]:
            forms = "; ".join(f"{t} x {t} -> {' or '.join(acc)}"
                              for t, (_, _, acc) in FORMS.items())
            raise error(f"TensorCoreIntrinEmitter: {self.a_dtype} x {self.b_dtype} -> "
                        f"{self.accum_dtype} has no mma.sync form in the CUDA dialect "
                        f"(it has {forms})")
        self.a_transposed, self.b_transposed = bool(a_transposed), bool(b_transposed)
        self.block_row_warps, self.block_col_warps = block_row_warps, block_col_warps
        self.warp_row_tiles, self.warp_col_tiles = warp_row_tiles, warp_col_tiles
        self.chunk, self.reduce_k = chunk, reduce_k
        self.num_elems_per_byte = num_elems_per_byte
        self.is_m_first = bool(is_m_first)
        self.thread_var = thread_var
        ptx, k, _ = FORMS[self.a_dtype]
        for what, value, unit in (("warp_row_tiles", warp_row_tiles, 16),
                                  ("warp_col_tiles", warp_col_tiles, 8), ("chunk", chunk, k)):
            if not isinstance(value, int) or value <= 0 or value % unit:
                raise error(f"TensorCoreIntrinEmitter: {what}={value!r} is not a positive "
                            f"multiple of {unit} (the {'m16n8k' + str(k)} instruction's "
                            f"{dict(warp_row_tiles='m', warp_col_tiles='n', chunk='k')[what]})")
        for what, value in (("block_row_warps", block_row_warps),
                            ("block_col_warps", block_col_warps)):
            if not isinstance(value, int) or value <= 0:
                raise error(f"TensorCoreIntrinEmitter: {what} must be a positive int, got "
                            f"{value!r}")
        if reduce_k != 1:
            raise error(f"TensorCoreIntrinEmitter: reduce_k={reduce_k!r} (warps splitting K, "
                        "their partial sums reduced by the user) is not supported; use 1")
        self.a_dtype_abbrv = self.b_dtype_abbrv = ptx
        self.accum_dtype_abbrv = PTX_NAMES[self.accum_dtype]
        self.k_dim = self.micro_size_k = k
        self.mma_prefix = f"m16n8k{k}"
        self.n_dim = self.micro_size_y = 16 if warp_col_tiles % 16 == 0 else 8
        self.micro_size_x = self.M_DIM
        self.warp_rows = warp_row_tiles // self.M_DIM
        self.warp_cols = warp_col_tiles // self.n_dim
        self.local_size_a = self.M_DIM * k // WARP
        self.local_size_b = self.n_dim * k // WARP
        self.local_size_out = self.M_DIM * self.n_dim // WARP
        self.threads = WARP * block_row_warps * block_col_warps * reduce_k

    # -- threads -----------------------------------------------------------------------------
    def get_thread_binding(self):
        """The calling thread's index in the block (``thread_var`` when one was given). The
        block must have the emitter's ``threads``: other warps would repeat a warp's tile."""
        threads = 1
        for t in B.current("TensorCoreIntrinEmitter").threads or (1,):
            threads *= t
        if threads != self.threads:
            raise error(f"TensorCoreIntrinEmitter: the kernel has threads={threads}; its "
                        f"{self.block_row_warps} x {self.block_col_warps} warps need "
                        f"threads={self.threads}")
        return self.thread_var if self.thread_var is not None else get_thread_binding()

    def extract_thread_binding(self, thread_id, is_m_first=None):
        """``(lane, warp_n, warp_m)`` of the thread ``thread_id``."""
        m_first = self.is_m_first if is_m_first is None else is_m_first
        lane, warp = thread_id % WARP, thread_id // WARP
        if m_first:
            return (lane, warp % self.block_col_warps,
                    (warp // self.block_col_warps) % self.block_row_warps)
        return (lane, (warp // self.block_row_warps) % self.block_col_warps,
                warp % self.block_row_warps)

    # -- fragments ---------------------------------------------------------------------------
    def _per_register(self) -> tuple[int, int]:
        """(elements a 32-bit register holds, elements in 16 bytes)."""
        bits = DType(self.a_dtype).bits
        return 32 // bits, 128 // bits

    def _fragment_a(self, lane, j):
        """(row, k) of element ``j`` of a thread's A fragment (16 x k)."""
        e, h = self._per_register()
        reg = j // e
        return lane // 4 + 8 * (reg % 2), (lane % 4) * e + j % e + h * (reg // 2)

    def _fragment_b(self, lane, j):
        """(k, column) of element ``j`` of a thread's B fragment (k x n_dim)."""
        e, h = self._per_register()
        half = self.local_size_b // (self.n_dim // 8)  # elements of one n8 tile
        tile, j = j // half, j % half
        reg = j // e
        return (lane % 4) * e + j % e + h * reg, 8 * tile + lane // 4

    @staticmethod
    def _rows_aligned(buf, base) -> bool:
        """Whether every row of the tile ldmatrix would read starts on 16 bytes."""
        itemsize = DType(buf.dtype).bits // 8
        base = as_int(base)
        return isinstance(buf.shape[-1], int) and buf.shape[-1] * itemsize % 16 == 0 and \
            isinstance(base, int) and base * itemsize % 16 == 0

    @staticmethod
    def _tile(buf, what: str):
        """(buffer, base index of its last two dimensions, leading indices) of a shared tile or
        a region of one."""
        if isinstance(buf, TileBuffer):
            lead = [0] * (buf.ndim - 2)
            return buf, 0, 0, lead
        if isinstance(buf, BufferSlice):
            starts = list(buf.starts)
            return TileBuffer(buf.buffer), starts[-2], starts[-1], starts[:-2]
        raise error(f"TensorCoreIntrinEmitter.{what} takes a shared tile or a region of one, "
                    f"got {type(buf).__name__}")

    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0):  # noqa: N803 - TileLang's names
        """The thread's ``warp_rows`` A fragments of k step ``ki`` (of block step ``rk``) from
        the shared tile into ``A_local_buf`` (``local_size_a`` elements each)."""
        buf, base0, base1, lead = self._tile(A_shared_buf, "ldmatrix_a")
        lane, _, warp_m = self.extract_thread_binding(self.get_thread_binding())
        _, h = self._per_register()
        wk = rk * self.chunk + ki * self.k_dim
        use_ldmatrix = (DType(self.a_dtype).bits == 16 or not self.a_transposed) and \
            self._rows_aligned(buf, base1)
        for i in range(self.warp_rows):
            wi = warp_m * self.warp_row_tiles + i * self.M_DIM
            if use_ldmatrix:
                mat, r = lane // 8, lane % 8
                if self.a_transposed:  # stored [K][M]: rows along k, transposed
                    at = (base0 + wk + (mat // 2) * 8 + r, base1 + wi + (mat % 2) * 8)
                else:
                    at = (base0 + wi + (mat % 2) * 8 + r, base1 + wk + (mat // 2) * h)
                ptx_ldmatrix(self.a_transposed, 4, _access_ptr(buf[(*lead, *at)], "r", 8),
                             _access_ptr(A_local_buf[i * self.local_size_a], "w", 8))
            else:
                for j in range(self.local_size_a):
                    row, k = self._fragment_a(lane, j)
                    at = (wk + k, wi + row) if self.a_transposed else (wi + row, wk + k)
                    A_local_buf[i * self.local_size_a + j] = \
                        buf[(*lead, base0 + at[0], base1 + at[1])]

    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0):  # noqa: N803 - TileLang's names
        """The thread's ``warp_cols`` B fragments of k step ``ki`` from the shared tile into
        ``B_local_buf`` (``local_size_b`` elements each)."""
        buf, base0, base1, lead = self._tile(B_shared_buf, "ldmatrix_b")
        lane, warp_n, _ = self.extract_thread_binding(self.get_thread_binding())
        _, h = self._per_register()
        wk = rk * self.chunk + ki * self.k_dim
        use_ldmatrix = (DType(self.b_dtype).bits == 16 or self.b_transposed) and \
            self._rows_aligned(buf, base1)
        tiles = self.n_dim // 8
        for i in range(self.warp_cols):
            wi = warp_n * self.warp_col_tiles + i * self.n_dim
            if use_ldmatrix:
                mat, r = (lane // 8) % (2 * tiles), lane % 8
                if self.b_transposed:  # stored [N][K]
                    at = (base0 + wi + (mat // 2) * 8 + r, base1 + wk + (mat % 2) * h)
                else:  # stored [K][N]: rows along k, transposed
                    at = (base0 + wk + (mat % 2) * 8 + r, base1 + wi + (mat // 2) * 8)
                ptx_ldmatrix(not self.b_transposed, 2 * tiles,
                             _access_ptr(buf[(*lead, *at)], "r", 8),
                             _access_ptr(B_local_buf[i * self.local_size_b], "w", 4 * tiles))
            else:
                for j in range(self.local_size_b):
                    k, col = self._fragment_b(lane, j)
                    at = (wi + col, wk + k) if self.b_transposed else (wk + k, wi + col)
                    B_local_buf[i * self.local_size_b + j] = \
                        buf[(*lead, base0 + at[0], base1 + at[1])]

    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0):  # noqa: N803
        """The warp's ``warp_rows x warp_cols`` tiles: C tile (i, j) += A fragment i times B
        fragment j (:meth:`mma_atom` of each)."""
        for i in range(self.warp_rows):
            for j in range(self.warp_cols):
                self.mma_atom(A_local_buf, B_local_buf, C_local_buf, i, j, k_inner)

    @property
    def mma_num_inst_m(self) -> int:
        """Tiles of 16 rows a warp holds (``mma_atom``'s ``inst_m_idx`` range)."""
        return self.warp_rows

    @property
    def mma_num_inst_n(self) -> int:
        """Tiles of ``n_dim`` columns a warp holds (``mma_atom``'s ``inst_n_idx`` range)."""
        return self.warp_cols

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx,  # noqa: N803
                 k_inner=0):
        """C tile (inst_m_idx, inst_n_idx) += A fragment inst_m_idx times B fragment
        inst_n_idx: one mma.sync, two for an n16 tile (its halves of B's registers and of the
        accumulators). ``k_inner`` is TileLang's offset into fragment-scope operands, which
        thread-local arrays do not have: ignored, as TileLang ignores it for them."""
        halves = self.n_dim // 8
        for h in range(halves):
            ptx_mma(self.accum_dtype, self.mma_prefix, "row", "col",
                    self.a_dtype_abbrv, self.b_dtype_abbrv, self.accum_dtype_abbrv,
                    A_local_buf.data, inst_m_idx * self.local_size_a,
                    B_local_buf.data,
                    inst_n_idx * self.local_size_b + h * self.local_size_b // halves,
                    C_local_buf.data,
                    (inst_m_idx * self.warp_cols + inst_n_idx) * self.local_size_out +
                    h * self.local_size_out // halves, False)

    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None):  # noqa: N803
        """Each thread stores its accumulators: into a 2-D tile ``[M][N]`` of the block, or a
        4-D one ``[M / 16][N / n][16][n]`` (TileLang's ``C_shared``); with ``pid_m`` and
        ``pid_n``, into the global matrix at block ``(pid_m, pid_n)``."""
        dims = len(C_buf.shape)
        if dims not in (2, 4) or (pid_m is not None and dims != 2):
            raise error(f"TensorCoreIntrinEmitter.stmatrix stores into a 2-D or 4-D tile (a 2-D "
                        f"one with pid_m, pid_n), got shape {tuple(C_buf.shape)}")
        lane, warp_n, warp_m = self.extract_thread_binding(self.get_thread_binding())
        rows, cols = self.block_row_warps * self.warp_rows, self.block_col_warps * self.warp_cols
        # one loop over the thread's accumulators: register r of tile (i, j), its q-th
        r = tirx.Var("r", "int32")
        per_tile = self.local_size_out
        i, j, q = r // (self.warp_cols * per_tile), (r // per_tile) % self.warp_cols, r % per_tile
        tile_m, tile_n = warp_m * self.warp_rows + i, warp_n * self.warp_cols + j
        if pid_m is not None:
            tile_m, tile_n = pid_m * rows + tile_m, pid_n * cols + tile_n
        row = lane // 4 + 8 * ((q % 4) // 2)
        col = 8 * (q // 4) + 2 * (lane % 4) + q % 2
        index = [tile_m, tile_n, row, col] if dims == 4 else \
            [tile_m * self.M_DIM + row, tile_n * self.n_dim + col]
        target = C_buf.buffer
        value = tirx.BufferLoad(C_local_buf.buffer, [r])
        if str(value.ty) != str(target.dtype):
            value = tirx.Cast(str(target.dtype), value)
        store = tirx.BufferStore(target, value, [to_expr(e, "int32") for e in index])
        # each element of the block's tile is one thread's register, stored once: no barrier
        # between the stores (keys.OWN_ELEMENTS)
        B.current("TensorCoreIntrinEmitter.stmatrix").emit(tirx.For(
            r, 0, self.warp_rows * self.warp_cols * per_tile, tirx.ForKind.UNROLLED, store,
            annotations={OWN_ELEMENTS: 1}, span=span()))


class INT4TensorCoreIntrinEmitter(TensorCoreIntrinEmitter):
    """The emitter on int8 arrays that hold two signed 4-bit values a byte (the first in the
    low bits): the fragments are loaded as the int8 emitter's (``a_dtype=b_dtype="int8"``,
    ``accum_dtype="int32"``, ``warp_col_tiles`` a multiple of 16), and ``mma`` issues
    ``mma.sync.m16n8k32.s32.s4.s4.s32``, four per 16x16 tile (each byte half of the k32 int8
    step): C[m, n] += the sum over the bytes k and their two halves of A[m, k] B[n, k]. The
    name of TileLang's former class (its bitnet example imports it; upstream removed it with
    its int4 ``T.gemm``, commit 99ee74b34)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if (self.a_dtype, self.accum_dtype, self.n_dim) != ("int8", "int32", 16):
            raise error(f"INT4TensorCoreIntrinEmitter takes int8 arrays of int4 pairs into int32 "
                        f"with warp_col_tiles a multiple of 16, got {self.a_dtype} -> "
                        f"{self.accum_dtype}, warp_col_tiles={self.warp_col_tiles}")

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx,  # noqa: N803
                 k_inner=0):
        """16x16 tile (inst_m_idx, inst_n_idx): the A registers' halves (bytes 0-15, 16-31 of
        the k step) times B's matching registers of each n8 half."""
        la, lb, lo = self.local_size_a, self.local_size_b, self.local_size_out
        # (A register pair, B register, C half) of each instruction, in 32-bit registers
        for a_reg, b_reg, half in ((0, 0, 0), (0, 2, 1), (2, 1, 0), (2, 3, 1)):
            ptx_mma("int32", "m16n8k32", "row", "col", "int4", "int4", "int32",
                    A_local_buf.data, inst_m_idx * la + 4 * a_reg,
                    B_local_buf.data, inst_n_idx * lb + 4 * b_reg,
                    C_local_buf.data, (inst_m_idx * self.warp_cols + inst_n_idx) * lo +
                    half * lo // 2, False)


def get_swizzle_layout(row_idx, col_idx, row_size, dtype, swizzle_bytes=None):
    """Where element ``(row_idx, col_idx)`` of a shared tile whose rows hold ``row_size``
    elements of ``dtype`` goes in TileLang's mma swizzle: ``(column block, row, column)``,
    column blocks of ``swizzle_bytes`` (default: the row's bytes, at most 128), inside which
    the 16-byte chunk ``c`` of row ``r`` moves to ``c ^ (r % 8 // (8 / chunks))``."""
    bits = DType(_name(dtype)).bits
    row_bytes = bits * as_int(row_size) // 8
    if row_bytes % 32:
        raise error(f"get_swizzle_layout: a row of {row_size} {_name(dtype)} is {row_bytes} "
                    "bytes, not a multiple of 32")
    width = min(128, row_bytes) if swizzle_bytes is None else int(swizzle_bytes)
    per_chunk, chunks = 128 // bits, width // 16
    chunk = col_idx // per_chunk
    flipped = (chunk % chunks) ^ ((row_idx % 8) // (8 // chunks))
    return chunk // chunks, row_idx, flipped * per_chunk + col_idx % per_chunk


def make_mma_swizzle_layout(shared_buf, is_smooth: bool = False):
    """``T.Layout`` of a shared tile in the swizzle above (its last two dimensions), or the
    identity when ``is_smooth`` or its rows are not a multiple of 64 bytes."""
    shape = tuple(shared_buf.shape)
    bits = DType(shared_buf.dtype).bits
    if is_smooth or not isinstance(shape[-1], int) or shape[-1] * bits % 512:
        return Layout(shape, lambda *index: index)

    def forward(*index):
        return [*index[:-2], *get_swizzle_layout(index[-2], index[-1], shape[-1],
                                                 shared_buf.dtype)]

    return Layout(shape, forward)


__all__ = ["INT4TensorCoreIntrinEmitter", "TensorCoreIntrinEmitter", "get_swizzle_layout",
           "make_mma_swizzle_layout"]
