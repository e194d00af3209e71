"""The device functions generated code calls (``include/*.h`` and CUDA's own), in one table:
which header defines each, what each of its pointer arguments does to the memory it points
to, and its role in the analyses (a 16-byte copy, a cp.async group operation, a tensor-core
gemm, a TMA load, ...). Barrier insertion, software pipelining, fence removal and codegen read
their effects and headers from here, never from the spelling of a name. The builders below
make the calls.

Effects of a pointer argument (``address_of(x[i])`` or ``tw.cuda.shared_addr(x[i])``):

- ``read``, ``write``, ``readwrite``: the call reads or writes the memory, visible to other
  threads after the next block barrier;
- ``atomic``: an atomic read-modify-write of the element (atomicAdd, atomicMax, ...): it reads
  and writes the memory, but atomics of the same function commute, so two calls of one atomic
  function on the same memory need no barrier between their threads; a plain read or write of
  that memory, or another function's atomic, does;
- ``async``: a ``cp.async`` write, visible after a ``cp.async.wait_group`` and a barrier;
- ``""``: not a pointer.

A call with no declared effects (a TMA load, an mbarrier operation) is read element by element
by the analyses: an address it takes counts as written, an element it names otherwise as read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tvm
from tilewright.errors import KernelError
from tilewright.ir import ATOMIC_KINDS, BITWISE_ATOMIC_KINDS, FAST_MATH_FUNCTIONS, MEMORY_ORDERS
from tvm import tirx

from . import ops

CUDA, BASE, COPY, MMA, HOPPER, WGMMA, FP4, FP8 = (None, "tw_cuda.h", "tw_copy.h", "tw_mma.h",
                                                  "tw_hopper.h", "tw_wgmma.h", "tw_fp4.h",
                                                  "tw_fp8.h")
MMA_WIDEN = "tw_mma_widen.h"
GRID = "tw_grid.h"
FENCE = "tw_fence.h"
PDL = "tw_pdl.h"
DEQUANT = "tw_dequant.h"
E8M0 = "tw_e8m0.h"
ATOMICS = "tw_atomics.h"
# a header -> the header it builds on (pasted before it)
BUILDS_ON = {MMA_WIDEN: MMA}
# the headers a kernel that uses them gets after BASE (always there), in this order (tw_hopper.h
# goes with the kernels' tensor maps, codegen)
PASTED = (COPY, MMA, MMA_WIDEN, FP4, E8M0, FP8, GRID, FENCE, DEQUANT, PDL, ATOMICS)


@dataclass(frozen=True)
class Intrinsic:
    """One device function. ``role``: ``copy16`` (a 16-byte copy), ``group`` (cp.async commit
    or wait), ``lands`` (a cp.async wait: issued copies have landed), ``gemm`` (mma.sync),
    ``wgmma`` (a wgmma gemm: operands A, B, C), ``wgmma_wait``, ``tma_load`` (completes on the
    mbarrier argument 1, writes the shared destination argument 2 through the async proxy),
    ``fence_async`` (orders generic-proxy shared writes before async-proxy reads),
    ``mbar_wait``, ``grid_sync`` (a barrier of the whole grid: the kernel needs a cooperative
    launch), ``pdl_sync`` (waits for the kernels before it on the stream: the kernel is
    launched to start before they finish), ``setmaxnreg`` (changes the warpgroup's register
    count: the count at entry must be fixed), ``placeholder`` (replaced before codegen), or
    ``""``. ``in_flight``: the
    shared memory it touches is read or written after it returns (cp.async, TMA loads and
    stores, wgmma); ``completes``: it waits for such operations (cp.async and wgmma group
    waits, mbarrier waits, the TMA store wait). ``multicast``: the name of the function that
    issues the same TMA load into every block of a cluster (a mask after the shared
    destination), "" when there is none. ``dtypes``: for a typed function (the atomics), each
    element type it takes with the oldest architecture (``sm`` number) that has it.
    ``own_registers``: a wgmma gemm that builds registers of its own which its group reads
    until it retires (wgmma.mma_async.sp's metadata, loaded from shared memory inside the
    helper): they die when the call returns, so its group may not stay in flight past the
    call. A pipelined loop retires it with ``wait_group 0``, or, to leave the group in flight
    (``wait_group 1``), gives it registers of the loop's (``hold_sparse_metadata``).
    ``ticket``: it returns the previous value of the element its pointer (argument 1) names
    and adds its value (argument 2) to it; a call adding a positive integer constant is a
    *step*, and the steps of any threads on one element return distinct values (tickets)
    while nothing else changes the element (:func:`ticket_step`)."""

    name: str
    header: str | None  # include/ file defining it (None: CUDA's own)
    args: tuple[str, ...] = ()  # the effect of each argument, see the module docstring
    role: str = ""
    lands: bool = False  # a cp.async wait_group
    local: bool = False  # registers only, see above
    in_flight: bool = False
    completes: bool = False
    multicast: str = ""
    dtypes: tuple[tuple[str, int], ...] = ()
    ticket: bool = False
    own_registers: bool = False


def _table(*entries: Intrinsic) -> dict[str, Intrinsic]:
    return {e.name: e for e in entries}


_GEMM_ARGS = ("read", "read", "readwrite", "")  # A, B, C (, C's row length)
# what atomicAdd/Max/Min (and include/tw_cuda.h's compare-and-swap loops) take: sm_70 is the
# oldest architecture of the backend; atomicAdd of a bfloat16 is sm_80's (CUDA's programming
# guide); 16-bit float max/min are tw_cuda.h's atomicCAS loops on an unsigned short, 8- and
# 16-bit integers its loops on the 32-bit word that holds the element (sm_70)
_WORDS = (("int32", 70), ("uint32", 70), ("int64", 70), ("uint64", 70), ("float32", 70),
          ("float64", 70), ("float16", 70), ("int8", 70), ("uint8", 70), ("int16", 70),
          ("uint16", 70))
ATOMIC_FUNCTIONS = {kind: f"tw_atomic_{kind}" for kind in ATOMIC_KINDS}
# the same with a memory order (a third argument; tw_atomics.h's fences around the call)
ORDERED_ATOMIC_FUNCTIONS = {kind: f"{name}_ordered" for kind, name in ATOMIC_FUNCTIONS.items()}
# the bitwise kinds: atomicOr/And/Xor's integers, tw_cuda.h's loops for 8- and 16-bit ones
_INTEGER_WORDS = tuple((d, sm) for d, sm in _WORDS if d.startswith(("int", "uint")))
_ATOMIC_DTYPES = {"add": (*_WORDS, ("bfloat16", 80)), "max": (*_WORDS, ("bfloat16", 70)),
                  "min": (*_WORDS, ("bfloat16", 70)),
                  **dict.fromkeys(BITWISE_ATOMIC_KINDS, _INTEGER_WORDS)}
# T.atomic_load / T.atomic_store (tw_cuda.h): volatile accesses of an element's 1 to 8 bytes
_LOAD_STORE_DTYPES = (*_WORDS, ("bfloat16", 70), ("float8_e4m3fn", 70), ("float8_e5m2", 70),
                      ("float8_e8m0fnu", 70))
TABLE = _table(
    Intrinsic("tw_cp_async16", COPY, ("async", "read", ""), "copy16", in_flight=True),
    Intrinsic("tw_copy16", COPY, ("write", "read", ""), "copy16"),
    Intrinsic("tw_cp_async_commit", COPY, (), "group"),
    Intrinsic("tw_cp_async_wait", COPY, (), "group", lands=True, completes=True),
    Intrinsic("tw_gemm_mma", MMA, _GEMM_ARGS, "gemm"),
    Intrinsic("tw_gemm_mma_rf", MMA, _GEMM_ARGS, "gemm"),
    Intrinsic("tw_gemm_mma_rows", MMA, _GEMM_ARGS, "gemm"),
    Intrinsic("tw_gemm_mma_sp_rf", MMA, ("read", "read", "read", "readwrite"), "gemm"),
    Intrinsic("tw_gemm_mma_widened", MMA_WIDEN, _GEMM_ARGS, "gemm"),
    Intrinsic("tw_gemm_mma_rf_widened", MMA_WIDEN, _GEMM_ARGS, "gemm"),
    Intrinsic("tw_gemm_mma_rows_widened", MMA_WIDEN, _GEMM_ARGS, "gemm"),
    Intrinsic("tw::store_pair", MMA, ("write", "", "")),
    # T.ptx_ldmatrix (destination registers, the lane's shared row: a warp-collective read of
    # the rows every lane of the warp names) and T.ptx_mma (C, A, B: registers only)
    Intrinsic("tw_ldmatrix", MMA, ("write", "read")),
    Intrinsic("tw_mma_sync", MMA, ("readwrite", "read", "read"), "gemm", local=True),
    Intrinsic("tw_mma_sync_s4", MMA, ("readwrite", "read", "read"), "gemm", local=True),
    Intrinsic("tw_gemm_wgmma", WGMMA, _GEMM_ARGS, "wgmma", in_flight=True),
    Intrinsic("tw_gemm_wgmma_rs", WGMMA, _GEMM_ARGS, "wgmma", in_flight=True),
    # A (kept values), B, C, the warpgroup, the metadata E (read by ordinary loads at issue
    # into the metadata registers the wgmma.sp reads until its group retires)
    Intrinsic("tw_gemm_wgmma_sp", WGMMA, ("read", "read", "readwrite", "", "read"), "wgmma",
              in_flight=True, own_registers=True),
    # the same with the metadata in the caller's registers (two sets, even and odd, then the
    # parity that picks the one it writes and the wgmma.sp reads): its group may stay in
    # flight while tw_wgmma_keep(even, odd) after each wait keeps both sets live
    Intrinsic("tw_gemm_wgmma_sp_kept", WGMMA,
              ("read", "read", "readwrite", "", "read", "readwrite", "readwrite", ""), "wgmma",
              in_flight=True),
    Intrinsic("tw_wgmma_keep", WGMMA, ("read", "read"), local=True),
    Intrinsic("tw_wgmma_wait", WGMMA, (), "wgmma_wait", completes=True),
    Intrinsic("tw_wgmma_pack", WGMMA, ("write", "", ""), local=True),
    *(Intrinsic(name, BASE if kind not in BITWISE_ATOMIC_KINDS else ATOMICS,
                ("atomic", ""), dtypes=_ATOMIC_DTYPES[kind], ticket=kind == "add")
      for kind, name in ATOMIC_FUNCTIONS.items()),
    *(Intrinsic(name, ATOMICS, ("atomic", "", ""), dtypes=_ATOMIC_DTYPES[kind],
                ticket=kind == "add")
      for kind, name in ORDERED_ATOMIC_FUNCTIONS.items()),
    Intrinsic("tw_atomic_load", ATOMICS, ("read", ""), dtypes=_LOAD_STORE_DTYPES),
    Intrinsic("tw_atomic_store", ATOMICS, ("write", "", ""), dtypes=_LOAD_STORE_DTYPES),
    Intrinsic("tw_fence_proxy_async", HOPPER, (), "fence_async"),
    Intrinsic("tw_fence_gpu", FENCE),
    Intrinsic("tw_fence_barrier_init", HOPPER),
    Intrinsic("tw_mbar_init", HOPPER),
    Intrinsic("tw_mbar_arrive", HOPPER),
    Intrinsic("tw_mbar_arrive_cluster", HOPPER),
    Intrinsic("tw_mbar_expect_tx", HOPPER),
    Intrinsic("tw_mbar_wait", HOPPER, (), "mbar_wait", completes=True),
    # T.ptx_cp_async: lands at the mbarrier phase of the thread's noinc arrival
    Intrinsic("tw_cp_async_bytes", HOPPER, ("async", "read"), in_flight=True),
    Intrinsic("tw_cp_async_mbar_arrive_noinc", HOPPER),
    Intrinsic("tw_named_barrier_sync", HOPPER),
    Intrinsic("tw_named_barrier_arrive", HOPPER),
    # T.sync_threads(id, count): the user's named barrier (ids 1-15; insert_sync keeps the
    # roles' own ids apart from it)
    Intrinsic("tw_bar_sync", HOPPER, (), "named_barrier"),
    Intrinsic("tw_setmaxnreg_inc", HOPPER, (), "setmaxnreg"),
    Intrinsic("tw_setmaxnreg_dec", HOPPER, (), "setmaxnreg"),
    Intrinsic("tw_cluster_sync", HOPPER),
    Intrinsic("tw_grid_sync", GRID, (), "grid_sync", completes=True),
    Intrinsic("tw_pdl_trigger", PDL),
    Intrinsic("tw_pdl_sync", PDL, (), "pdl_sync"),
    Intrinsic("tw_cluster_ctarank", HOPPER),
    Intrinsic("tw_offset_bytes", HOPPER),
    Intrinsic("TW_TMAP", HOPPER),
    *(Intrinsic(f"tw_tma_load_{r}d", HOPPER, (), "tma_load", in_flight=True,
                multicast=f"tw_tma_load_multicast_{r}d") for r in range(1, 6)),
    *(Intrinsic(f"tw_tma_load_multicast_{r}d", HOPPER, (), "tma_load", in_flight=True)
      for r in range(1, 6)),
    *(Intrinsic(f"tw_tma_store_{r}d", HOPPER, in_flight=True) for r in range(1, 6)),
    Intrinsic("tw_tma_store_commit", HOPPER),
    Intrinsic("tw_tma_store_wait", HOPPER, completes=True),
    Intrinsic("tw_tma_choice", None, (), "placeholder"),
    Intrinsic("tw_stage_barrier", None, (), "placeholder"),
    Intrinsic("tw_fp4_encode", FP4),
    Intrinsic("tw_fp4_decode", FP4),
    Intrinsic("tw_e8m0_encode", E8M0),
    Intrinsic("tw_e8m0_decode", E8M0),
    Intrinsic("tw_fp8_e5m2", FP8),
    # eight 4-bit codes (the 32-bit word at argument 2) to eight float16 (code - zero) * scale
    # (16 bytes at argument 1); zero and scale are values
    Intrinsic("tw_dequant_u4x8_f16", DEQUANT, ("write", "read", "", "")),
    # eight codes (nibble b + 4 h of the word) into registers 4 b + h from argument 1 of a
    # wgmma register A operand
    Intrinsic("tw_dequant_u4x8_f16_a", DEQUANT, ("write", "read", "", "")),
    Intrinsic("__shfl_xor_sync", CUDA, local=True),
    Intrinsic("__shfl_sync", CUDA, local=True),
    Intrinsic("__syncwarp", CUDA),
    # the warp primitives (rules.warp)
    *(Intrinsic(name, CUDA, local=True) for name in (
        "__shfl_down_sync", "__shfl_up_sync", "__any_sync", "__all_sync", "__ballot_sync",
        "__activemask", "__match_any_sync", "__syncthreads_count", "__syncthreads_and",
        "__syncthreads_or")),
    Intrinsic("tw_match_all_sync", BASE, local=True),
    Intrinsic("__nanosleep", CUDA),  # a pause of the calling thread (sm_70)
    Intrinsic("__trap", CUDA),
    Intrinsic("__float2bfloat16_rn", CUDA, local=True),
    Intrinsic("printf", CUDA),
    # T.__ldg: a read of the element through the read-only data cache
    Intrinsic("__ldg", CUDA, ("read",)),
    # TileLang's fast-math functions of float32 (rules.expressions)
    *(Intrinsic(f"__{fn}f", CUDA, local=True) for fn in FAST_MATH_FUNCTIONS),
)


def extern_name(node) -> str | None:
    """The function name of a ``call_extern`` (with its template arguments), else None."""
    if isinstance(node, tirx.Evaluate):
        node = node.value
    if isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op) and \
            node.op.name in ("tirx.call_extern", "tirx.call_pure_extern"):
        return str(node.args[0].value)
    return None


def lookup(name: str) -> Intrinsic | None:
    """The table entry of the function ``name`` (template arguments ignored), None when the
    table has none (CUDA's math functions TVM's codegen calls, say)."""
    return TABLE.get(name.split("<", 1)[0])


def named(name: str) -> Intrinsic:
    """The table entry of the function ``name`` (template arguments ignored). A name the table
    does not know is an error: its effects would be guessed."""
    entry = lookup(name)
    if entry is None:
        base = name.split("<", 1)[0]
        raise KeyError(f"the CUDA backend's intrinsics table has no {base!r}")
    return entry


def of(node) -> Intrinsic | None:
    """The table entry of a ``call_extern`` (or an ``Evaluate`` of one); None for anything
    else."""
    name = extern_name(node)
    return None if name is None else named(name)


def groups_left(node) -> int | None:
    """What a wait (an intrinsic that ``completes``: the cp.async and wgmma group waits, the
    TMA store wait, an mbarrier wait) leaves in flight: its one template argument, the groups
    still pending, or 0 for a wait that takes none; None for any other node."""
    entry = of(node)
    if entry is None or not entry.completes:
        return None
    _, bracket, pending = extern_name(node).partition("<")
    return int(pending.rstrip(">")) if bracket else 0


def waits_all(node, role: str | None = None) -> bool:
    """Whether ``node`` is a wait (of ``role``, when given) that leaves nothing in flight."""
    return groups_left(node) == 0 and (role is None or of(node).role == role)


def role(node) -> str | None:
    """The role of the intrinsic ``node`` calls, None when it calls none."""
    entry = of(node)
    return entry.role if entry is not None else None


def is_address_of(e) -> bool:
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and \
        e.op.name == "tirx.address_of"


def is_shared_addr(e) -> bool:
    return isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and \
        e.op.name == ops.SHARED_ADDR


def writes(effect: str) -> bool:
    """Whether a pointer argument of ``effect`` may change the memory it points to."""
    return effect in ("write", "readwrite", "atomic", "async")


def pointer_effects(call) -> list[tuple]:
    """``(element load, effect)`` of each pointer argument the table declares an effect for."""
    entry = of(call)
    if entry is None:
        return []
    out = []
    for arg, effect in zip(call.args[1:], entry.args):
        if effect and (is_address_of(arg) or is_shared_addr(arg)) and \
                isinstance(arg.args[0], tvm.ir.TensorLoad):
            out.append((arg.args[0], effect))
    return out


def ticket_step(call):
    """The element a step of a ``ticket`` function (an add of a positive integer constant,
    returning the element's previous value) takes its ticket from, None when ``call`` is no
    such step."""
    entry = of(call) if isinstance(call, tvm.ir.Call) else None
    if entry is None or not entry.ticket or len(call.args) not in (3, 4):  # a memory order
        return None
    pointer, value = call.args[1], call.args[2]
    if not (isinstance(value, tirx.IntImm) and int(value.value) > 0 and
            is_address_of(pointer) and isinstance(pointer.args[0], tvm.ir.TensorLoad)):
        return None
    return pointer.args[0]


# -- builders ----------------------------------------------------------------------------------
def call(name: str, *args) -> tirx.Stmt:
    """``name(args...);`` as a statement."""
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def sync() -> tirx.Stmt:
    """``__syncthreads()``."""
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync",
                                          tvm.ir.StringImm("shared")))


def is_sync(stmt) -> bool:
    """Whether ``stmt`` is a :func:`sync` (``__syncthreads``)."""
    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
        isinstance(stmt.value.op, tvm.ir.Op) and stmt.value.op.name == "tirx.tvm_storage_sync"


def _typed(what: str, entry: Intrinsic, load, sm: int | None) -> str:
    """The element type of ``load``, checked against what ``entry`` takes on ``sm``."""
    dtype = str(load.source.dtype)
    oldest = dict(entry.dtypes)
    if dtype not in oldest:
        raise KernelError(f"{what} on {dtype} is not supported by backend 'cuda' "
                          f"(supported: {', '.join(oldest)})")
    if sm is not None and sm < oldest[dtype]:
        raise KernelError(f"{what} on {dtype} needs sm_{oldest[dtype]} or newer "
                          f"(CUDA's atomic for {dtype}); the target is sm_{sm}: use a newer "
                          "-arch or another element type")
    return dtype


def atomic(kind: str, load, value, sm: int | None = None, order: int = 0) -> tvm.ir.Call:
    """``tw_atomic_<kind>(&load, value)``: one atomic of the calling thread on the element
    ``load`` (add, max, min, or, and, xor), returning the element's previous value; with a
    memory ``order`` other than relaxed (its id, ``tilewright.ir.MEMORY_ORDERS``)
    ``tw_atomic_<kind>_ordered(&load, value, order)``. An element type the table does not list
    for the function, or lists for a newer architecture than ``sm`` (None: not checked), is a
    KernelError."""
    relaxed = order == MEMORY_ORDERS["relaxed"]
    entry = named((ATOMIC_FUNCTIONS if relaxed else ORDERED_ATOMIC_FUNCTIONS)[kind])
    dtype = _typed(f"T.atomic_{kind}", entry, load, sm)
    if str(value.ty) != dtype:
        value = tirx.Cast(dtype, value)
    return tirx.call_extern(dtype, entry.name, tirx.address_of(load), value,
                            *(() if relaxed else (tirx.const(order, "int32"),)))


def atomic_load(load, order: int) -> tvm.ir.Call:
    """``tw_atomic_load(&load, order)``: the element read whole with the memory order."""
    dtype = _typed("T.atomic_load", named("tw_atomic_load"), load, None)
    return tirx.call_extern(dtype, "tw_atomic_load", tirx.address_of(load),
                            tirx.const(order, "int32"))


def atomic_store(load, value, order: int) -> tvm.ir.Call:
    """``tw_atomic_store(&load, value, order)``: the element written whole with the order."""
    dtype = _typed("T.atomic_store", named("tw_atomic_store"), load, None)
    if str(value.ty) != dtype:
        value = tirx.Cast(dtype, value)
    return tirx.call_extern("void", "tw_atomic_store", tirx.address_of(load), value,
                            tirx.const(order, "int32"))


def cp_async_commit() -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("int32", "tw_cp_async_commit"))


def cp_async_wait(groups: int) -> tirx.Stmt:
    """Wait until at most ``groups`` committed cp.async groups are in flight."""
    return tirx.Evaluate(tirx.call_extern("int32", f"tw_cp_async_wait<{groups}>"))


def wgmma_wait(groups: int) -> tirx.Stmt:
    """Retire this warpgroup's wgmma groups until at most ``groups`` are in flight."""
    return tirx.Evaluate(tirx.call_extern("void", f"tw_wgmma_wait<{groups}>"))


@dataclass(frozen=True)
class WgmmaGemm:
    """A wgmma gemm call's function and template arguments (include/tw_wgmma.h), the one place
    that spells its name and reads it back: ``form`` the function (``tw_gemm_wgmma``, ``_rs``
    A in registers, ``_sp`` 2:4 sparse A with its metadata rows, ``_sp_kept`` the same on the
    caller's metadata registers), N and K of a warpgroup's gemm (K in dense columns), NC the
    columns of one instruction, TY the operand type (the header's ``tw_wgmma_type``), B_MN
    whether B is MN-major, then ``operands``: each shared operand's rows and swizzle width (A's
    only in shared memory: RA, WA, RB, WB or RB, WB) and, for the sparse forms, the metadata
    row's bytes (LDE)."""

    form: str
    n: int
    k: int
    nc: int
    ty: str
    b_mn: bool
    operands: tuple[int, ...]

    @property
    def name(self) -> str:
        args = (self.n, self.k, self.nc, self.ty, str(self.b_mn).lower(), *self.operands)
        return f"{self.form}<{', '.join(map(str, args))}>"

    @property
    def metadata_steps(self) -> int:
        """The metadata registers a sparse form's group reads: one a k32 step."""
        return self.k // 32

    @classmethod
    def parse(cls, name: str) -> WgmmaGemm | None:
        """The call named ``name``, None for a name of another function."""
        form, bracket, args = name.partition("<")
        if not bracket or form not in WGMMA_GEMMS:
            return None
        n, k, nc, ty, b_mn, *operands = (a.strip() for a in args.rstrip(">").split(","))
        return cls(form, int(n), int(k), int(nc), ty, b_mn == "true",
                   tuple(int(o) for o in operands))


WGMMA_GEMMS = ("tw_gemm_wgmma", "tw_gemm_wgmma_rs", "tw_gemm_wgmma_sp", "tw_gemm_wgmma_sp_kept")


def sparse_metadata_steps(call) -> int:
    """The metadata registers a ``tw_gemm_wgmma_sp`` call's group reads."""
    return WgmmaGemm.parse(str(call.args[0].value)).metadata_steps


def hold_sparse_metadata(call, even, odd, parity) -> tvm.ir.Call:
    """``call`` (a ``tw_gemm_wgmma_sp``) as ``tw_gemm_wgmma_sp_kept``: its metadata in the
    registers ``even`` or ``odd`` (one-dimensional local buffers) as ``parity`` says."""
    gemm = WgmmaGemm.parse(str(call.args[0].value))
    name = dataclasses.replace(gemm, form="tw_gemm_wgmma_sp_kept").name
    a, b, c, wg, e, *scale = call.args[1:]
    return tirx.call_extern("void", name, a, b, c, wg, e, *(
        tirx.address_of(tirx.BufferLoad(buf, [tirx.const(0, "int32")])) for buf in (even, odd)),
        parity, *scale)


def keep_sparse_metadata(even, odd) -> tirx.Stmt:
    """Keeps the registers of ``hold_sparse_metadata`` live up to this point."""
    steps = int(even.shape[0])
    return tirx.Evaluate(tirx.call_extern("void", f"tw_wgmma_keep<{steps}>", *(
        tirx.address_of(tirx.BufferLoad(buf, [tirx.const(0, "int32")])) for buf in (even, odd))))


def fence_proxy_async() -> tirx.Stmt:
    return call("tw_fence_proxy_async")


def shared_addr(load) -> tvm.ir.Call:
    """The address of a shared-memory element, kept apart from ``address_of`` until the pool
    is placed (``address_of`` is a write to the analyses)."""
    return tirx.call_intrin("handle", ops.SHARED_ADDR, load)


def user_call(dtype: str, name: str, *args) -> tvm.ir.Call:
    """``name(args...)``, a device function of the user's (``T.call_extern``): not in the
    table, its effects unknown; ``call_extern`` once the kernel is finished."""
    return tirx.call_intrin(dtype, ops.USER_CALL, tvm.ir.StringImm(name), *args)


def tma_choice():
    """The condition of a copy's choice between its TMA and cp.async forms (resolved by the
    pipeline phase)."""
    return tirx.call_extern("bool", "tw_tma_choice")


def stage_barrier():
    """The mbarrier of a TMA copy's pipeline stage (set by the pipeline phase)."""
    return tirx.call_extern("handle", "tw_stage_barrier")
