"""``import tilewright_ascend.language.mainline as T``: TileLang mainline's Ascend dialect.

The names of TileLang mainline's ``tilelang.ascend.language`` (the seed's "M tree", written for
Ascend 950 and compiled for the target ``ascend-950``), over the portable language:

- ``with T.Kernel(n) as bx``: ``n`` blocks on the AI core groups; the compiler assigns the
  cube and vector cores, inserts the synchronisation and versions buffers (the portable
  phase, the automatic sync of :mod:`..transforms.sync`);
- ``T.alloc_shared`` is a tile in UB; ``T.alloc_l1``, ``T.alloc_l0a``, ``T.alloc_l0b``,
  ``T.alloc_l0c`` tiles in the cube's memories;
- ``T.annotate_buffer_versions({buf: spec})`` sets the versions of buffers in a
  ``T.Pipelined`` loop (:func:`annotate_buffer_versions`);
- ``T.ascend_pipe_barrier``, ``T.ascend_set_flag``, ``T.ascend_wait_flag`` for manual work (a
  kernel with any of them keeps exactly its own intra-core synchronisation);
- ``T.SimtVF(threads=N)`` with ``T.get_thread_binding()``, and ``T.SimdVF()`` with
  ``T.simd.*`` (:mod:`.vf`);
- ``with T.MixedKernel(n, sids=2) as (bx, sid)``: cube and vector work of one AI core group,
  the vector code run by each sub-core on its own tiles, which ``T.dual_copy`` fills with
  its half of a tile (lowered by :mod:`..transforms.split`).

Names of the adapter tree (``T.alloc_L1``, ``T.Scope`` ...) raise an ``AttributeError`` that
names the mainline equivalent; using both trees in one kernel is an error naming both names.
"""

import builtins as _py

# the portable language is re-exported whole (its dtypes shadow int and bool here: _py.int is
# Python's); its names are spelled out in __all__ via _PORTABLE
from tilewright.language import *  # noqa: F403
from tilewright.language import Kernel as _PortableKernel
from tilewright.language import __all__ as _PORTABLE
from tilewright.language import builder as _B
from tilewright.language.buffer import as_int as _as_int
from tilewright.language.buffer import region_of as _region_of
from tilewright.language.buffer import resolve as _resolve
from tvm import tirx as _tirx

from ..facts.events import PIPES as _PIPES
from ..facts.keys import BUFFER_VERSIONS_KEY as _VERSIONS_KEY
from ..facts.keys import MIXED_KEY as _MIXED_KEY
from ..facts.ops import DUAL_COPY as _DUAL_COPY
from ..facts.paths import DUAL_COPY_PATHS
from . import dialect as _dialect
from ._emit import emit as _emit
from ._emit import error as _error
from ._emit import span as _span
from .trees import ADAPTER as _ADAPTER
from .trees import MAINLINE as _MAINLINE
from .trees import claim as _claim
from .trees import foreign_name as _foreign_name
from .vf import SimdVF, SimtVF, get_thread_binding, simd

VERSION_MODES = ("auto", "iteration", "counter")


class Kernel(_PortableKernel):
    """``with T.Kernel(n) as bx:`` ``n`` blocks; the compiler assigns each block's cube and
    vector work to the cores of an AI core group (``threads=`` is accepted and has no effect on
    Ascend, as in TileLang mainline)."""

    KEYWORDS = ("threads", "prelude", "is_npu")

    def __init__(self, *grid, threads=None, is_npu=None, **options):
        if is_npu is not None:
            raise _error("T.Kernel(..., is_npu=True) as (cid, vid) is the adapter tree's "
                         f"kernel ({_ADAPTER.describe()}); in {_MAINLINE.describe()} write "
                         "'with T.Kernel(n) as bx' and the compiler assigns the cores")
        super().__init__(*grid, threads=threads or 1, **options)

    def __enter__(self):
        out = super().__enter__()
        self._span = _span()  # the user's line, not this module's
        _claim(_MAINLINE, "Kernel")
        return out


def _alloc(shape, dtype, scope: str, name: str, given):
    _claim(_MAINLINE, name)
    return _dialect.allocate(shape, dtype, scope, f"T.{name}", given)


def alloc_shared(shape, dtype, name=None):
    """A tile in the vector core's unified buffer (UB), as ``T.alloc_shared`` means on Ascend."""
    return _alloc(shape, dtype, "ascend.ub", "alloc_shared", name)


def alloc_l1(shape, dtype, name=None):
    """A tile in L1, the cube core's staging memory."""
    return _alloc(shape, dtype, "ascend.l1", "alloc_l1", name)


def alloc_l0a(shape, dtype, name=None):
    """A tile in L0A, the cube's left operand memory, filled by ``T.copy`` from L1 in the
    layout an untransposed ``T.gemm`` reads."""
    return _alloc(shape, dtype, "ascend.l0a", "alloc_l0a", name)


def alloc_l0b(shape, dtype, name=None):
    """A tile in L0B, the cube's right operand memory, filled by ``T.copy`` from L1 in the
    layout an untransposed ``T.gemm`` reads."""
    return _alloc(shape, dtype, "ascend.l0b", "alloc_l0b", name)


def alloc_l0c(shape, dtype, name=None):
    """A tile in L0C, the cube's accumulator memory (the accumulator layout is applied by the
    compiler)."""
    return _alloc(shape, dtype, "ascend.l0c", "alloc_l0c", name)


def _version_spec(buf, spec):
    """``n``, ``(n, mode)`` or ``mode`` as ``[n, mode]`` (0: the compiler's count)."""
    count, mode = (spec if isinstance(spec, tuple) and len(spec) == 2 else
                   (0, spec) if isinstance(spec, str) else (spec, "auto"))
    if isinstance(spec, tuple) and len(spec) != 2:
        raise _error(f"T.annotate_buffer_versions: a tuple is (num_versions, mode), got {spec!r} "
                     f"for {buf.name!r}")
    if not isinstance(count, _py.int) or isinstance(count, _py.bool) or count < 0 or \
            (count == 0 and not isinstance(spec, str)):
        raise _error(f"T.annotate_buffer_versions: the number of versions of {buf.name!r} must "
                     f"be a positive int, got {count!r}")
    if mode not in VERSION_MODES:
        raise _error(f"T.annotate_buffer_versions: the mode of {buf.name!r} is one of "
                     f"{', '.join(VERSION_MODES)}, got {mode!r}")
    return [count, mode]


def annotate_buffer_versions(buffer_versions_map: dict):
    """``T.annotate_buffer_versions({a: 2, b: (3, "iteration"), c: "auto"})``: how many
    versions each on-chip buffer used in a ``T.Pipelined`` loop gets, and how a version is
    chosen. A count of 1 keeps one version; a mode alone leaves the count to the loop's
    ``num_stages``. ``iteration`` selects the version by the loop's iteration; ``counter`` by
    a counter that advances only in iterations that use the buffer; ``auto`` takes
    ``iteration`` where every iteration uses the buffer and ``counter`` where a guard skips
    it (see :mod:`..transforms.multibuffer`)."""
    builder = _B.current("T.annotate_buffer_versions")
    if not builder.in_kernel():
        raise _error("T.annotate_buffer_versions must be used inside 'with T.Kernel(...)'")
    _claim(_MAINLINE, "annotate_buffer_versions")
    if not isinstance(buffer_versions_map, dict):
        raise _error("T.annotate_buffer_versions takes a dict {buffer: versions}")
    table = dict(builder.kernel_annotations.get(_VERSIONS_KEY, {}))
    for buf, spec in buffer_versions_map.items():
        if getattr(buf, "scope", "global") == "global":
            raise _error("T.annotate_buffer_versions versions on-chip buffers (T.alloc_shared, "
                         f"T.alloc_l1, ...), got {buf!r}")
        table[buf.name] = _version_spec(buf, spec)
    builder.kernel_annotations[_VERSIONS_KEY] = table


def _pipe_name(pipe_t, what: str) -> str:
    if not isinstance(pipe_t, str):
        raise _error(f"{what} takes the pipe as a string ('PIPE_V', 'PIPE_ALL', ...), got "
                     f"{pipe_t!r}")
    return pipe_t


def ascend_pipe_barrier(pipe_t):
    """``T.ascend_pipe_barrier("PIPE_V")``: order one pipe's instructions; ``"PIPE_ALL"``
    waits for every pipe of the core."""
    _claim(_MAINLINE, "ascend_pipe_barrier")
    pipe = _pipe_name(pipe_t, "T.ascend_pipe_barrier")
    if pipe.upper() == "PIPE_ALL":
        _dialect.emit_barrier_all()
    else:
        _dialect.emit_pipe_barrier(pipe, "T.ascend_pipe_barrier")


def _hard_event(hard_event, what: str):
    if not isinstance(hard_event, str) or hard_event.count("_") != 1:
        raise _error(f"{what} takes a HardEvent name 'SRC_DST' ('MTE2_V', 'V_MTE3', ...), got "
                     f"{hard_event!r}")
    src, dst = hard_event.lower().split("_")
    for pipe in (src, dst):
        if pipe not in _PIPES:
            raise _error(f"{what}: unknown pipe {pipe.upper()!r} in {hard_event!r}; pipes are "
                         f"{', '.join(p.upper() for p in _PIPES)}")
    return src, dst


def ascend_set_flag(hard_event, event_id):
    """``T.ascend_set_flag("MTE2_V", id)``: after the source pipe's earlier work, raise the
    flag of the hardware event."""
    _claim(_MAINLINE, "ascend_set_flag")
    src, dst = _hard_event(hard_event, "T.ascend_set_flag")
    _dialect.emit_flag("set", src, dst, event_id, "T.ascend_set_flag")


def ascend_wait_flag(hard_event, event_id):
    """``T.ascend_wait_flag("MTE2_V", id)``: the destination pipe waits for the flag, then
    clears it."""
    _claim(_MAINLINE, "ascend_wait_flag")
    src, dst = _hard_event(hard_event, "T.ascend_wait_flag")
    _dialect.emit_flag("wait", src, dst, event_id, "T.ascend_wait_flag")


class MixedKernel(Kernel):
    """``with T.MixedKernel(n, sids=2) as (bx, sid):`` ``n`` blocks, each one AI core group
    whose cube work runs on the AIC and whose vector work runs on ``sids`` vector sub-cores
    (``sid`` is the sub-core, 0 or 1). With ``sids=2`` each sub-core runs the vector code on
    its own tiles, which ``T.dual_copy`` fills with its half of a tile; with ``sids=1`` the
    vector code runs on sub-core 0 only."""

    def __init__(self, *grid, sids=2, threads=None, **options):
        if len(grid) != 1:
            raise _error(f"T.MixedKernel takes a 1-D grid, got {len(grid)} dimensions: use "
                         "T.MixedKernel(m * n) and recover 2-D tiles with bx // n and bx % n")
        if sids not in (1, 2) or isinstance(sids, _py.bool):
            raise _error(f"T.MixedKernel: sids= is the number of vector sub-cores, 1 or 2; got "
                         f"{sids!r}")
        super().__init__(*grid, threads=threads, **options)
        self.sids = sids
        self.sid = _tirx.Var("sid", "int32")

    def __enter__(self):
        (bx,) = super().__enter__()
        _claim(_MAINLINE, "MixedKernel")
        _B.current("T.MixedKernel").kernel_annotations[_MIXED_KEY] = [self.sids, self.sid]
        return bx, self.sid


_MEMORY = {"ascend.l0c": "L0C", "ascend.ub": "UB", "global": "GM", "ascend.l1": "L1",
           "ascend.l0a": "L0A", "ascend.l0b": "L0B"}


def _split_axis(full: list, half: list) -> int:
    """The axis of ``full`` that ``half`` halves: of the two trailing ones, the rows
    ([M, N] -> [M/2, N], M-split) or the columns ([M, N] -> [M, N/2], N-split); the only one
    of a 1-D region."""
    if len(full) != len(half) or not full:
        raise _error(f"T.dual_copy: the full tile and its half are regions of the same rank, "
                     f"got {full} and {half}")
    axes = [len(full) - 1] if len(full) == 1 else [len(full) - 2, len(full) - 1]
    for axis in axes:
        whole = full[axis]
        if _py.isinstance(whole, _py.int) and whole % 2 and half[axis] in (whole // 2,
                                                                           whole // 2 + 1):
            raise _error(f"T.dual_copy: extent {whole} of {full} is odd; it is split over two "
                         "vector cores only when even (an odd extent is not rounded)")
    split = [axis for axis in axes if full[axis] == 2 * half[axis] and
             all(full[o] == half[o] for o in range(len(full)) if o != axis)]
    if len(split) != 1:
        raise _error(f"T.dual_copy: exactly one trailing dimension of the half tile is half "
                     f"the full tile's ([M, N] -> [M/2, N] or [M, N/2]), got {full} -> {half}")
    return split[0]


def dual_copy(src, dst, l2_cache_ctrl=None, unit_flag_ctrl=None):
    """``T.dual_copy(src, dst)``: one copy split between the two vector sub-cores of a
    ``T.MixedKernel``: sub-core ``sid`` moves its half of the full tile along the inferred
    axis (M-split: the rows, N-split: the columns). Paths: L0C -> UB and GM -> UB (the full
    tile is the source), UB -> GM and UB -> L1 (the full tile is the destination; into L1 in
    the cube's NZ layout). ``l2_cache_ctrl`` and ``unit_flag_ctrl`` are accepted and have no
    effect here."""
    _claim(_MAINLINE, "dual_copy")
    regions = [_resolve(_region_of(value, "T.dual_copy"), None, "T.dual_copy")
               for value in (src, dst)]
    scopes = tuple(str(r.buffer.scope()) for r in regions)
    if scopes not in DUAL_COPY_PATHS:
        paths = ", ".join(f"{_MEMORY[a]} -> {_MEMORY[b]}" for a, b in DUAL_COPY_PATHS)
        raise _error(f"T.dual_copy moves {paths}; got {_MEMORY.get(scopes[0], scopes[0])} -> "
                     f"{_MEMORY.get(scopes[1], scopes[1])}")
    if scopes[0] == "ascend.l0c" and regions[0].buffer.dtype != regions[1].buffer.dtype:
        raise _error(f"T.dual_copy from L0C converts nothing (the dual-destination copy has no "
                     f"conversion): {regions[0].buffer.dtype} -> {regions[1].buffer.dtype}; "
                     "copy into a UB tile of the accumulator's type and cast it in the vector "
                     "code")
    full_first = DUAL_COPY_PATHS[scopes].full_source
    extents = [[_as_int(e) for e in r.extents] for r in regions]
    full, half = extents if full_first else extents[::-1]
    axis = _split_axis(full, half)
    kernel = _B.current("T.dual_copy").enclosing("kernel")
    mixed = kernel.info.get("kernel") if kernel is not None else None
    if not isinstance(mixed, MixedKernel):
        raise _error("T.dual_copy must be used inside a mixed kernel ('with "
                     "T.MixedKernel(n, sids=2) as (bx, sid)'), with the cube work in the same "
                     "kernel; it does not make a vector-only kernel run on two AIVs")
    if mixed.sids != 2:
        raise _error("T.dual_copy splits a tile over two vector sub-cores, but this "
                     "T.MixedKernel has sids=1; use T.MixedKernel(n, sids=2) or T.copy")
    _emit(_DUAL_COPY.name, {"src": regions[0], "dst": regions[1]}, {"axis": axis},
          "T.dual_copy")


__all__ = [  # noqa: PLE0604 - the portable names (less those redefined here) plus the dialect's
    *(name for name in _PORTABLE if name not in ("Kernel", "alloc_shared")),
    "Kernel", "MixedKernel", "SimdVF", "SimtVF", "alloc_l0a", "alloc_l0b", "alloc_l0c",
    "alloc_l1", "alloc_shared", "annotate_buffer_versions", "ascend_pipe_barrier",
    "ascend_set_flag", "ascend_wait_flag", "dual_copy", "get_thread_binding", "simd",
]


def __getattr__(name):
    raise _foreign_name(_MAINLINE, __name__, name)
