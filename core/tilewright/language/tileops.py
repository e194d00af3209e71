"""Tile ops as the kernel author calls them: ``T.copy``, ``T.fill``, ``T.clear``, ``T.gemm``,
``T.reduce_*``. Each checks its operands here, at the user's line, and emits one IR call."""

from __future__ import annotations

import difflib
import enum
import math
import warnings

import tvm
import tvm_ffi
from tvm import tirx

from .. import sparse as sp
from ..errors import KernelTypeError, KernelValueError, kernel_error, user_location
from ..ir import (
    ATOMIC_KINDS,
    ATOMIC_LOAD,
    ATOMIC_PREV,
    BITWISE_ATOMIC_KINDS,
    INTEGER_REDUCE_KINDS,
    LOAD_ORDERS,
    MEMORY_ORDERS,
    NAN_REDUCE_KINDS,
    REDUCE_KINDS,
    SCAN_KINDS,
    STORE_ORDERS,
    make_call,
    matrix_dims,
    transpose_dims,
)
from ..ir.schema import writes_memory
from . import builder as B
from .annotations import Fragment
from .buffer import (
    BufferSlice,
    TileBuffer,
    as_int,
    dtype_of,
    region_of,
    resolve,
    shape_str,
    squeeze,
    to_expr,
)
from .math import contains


class GemmWarpPolicy(enum.Enum):
    """How a GEMM's warps split the output tile (a hint; backends without warps ignore it)."""

    Square = "square"
    FullRow = "full_row"
    FullCol = "full_col"


def _emit(name: str, operands: dict, attrs: dict | None = None, element_op=False,
          annotations: dict | None = None) -> None:
    builder = B.require_kernel(f"T.{name}")
    if not element_op and builder.enclosing("parallel") is not None:
        raise kernel_error(f"T.{name} is a tile operation and cannot be used inside a "
                           "T.Parallel loop; call it outside the loop")
    builder.emit(make_call(name, operands, attrs, span=B.here(), annotations=annotations))


def _same(a, b) -> bool:
    a, b = as_int(a), as_int(b)
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from tvm import sym as arith

    return arith.Analyzer().can_prove_equal(to_expr(a), to_expr(b))


def _shapes_match(a, b) -> bool:
    a, b = squeeze(a), squeeze(b)
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


# TileLang's T.copy annotations that have a meaning here, checked at the user's line;
# prefer_instruction and parallel_loop_layout are hints that change no result (the backends
# choose TMA, cp.async or plain copies, and the copy loop's layout, by themselves)
_PREFERRED = ("tma", "cp_async", "sync", "ldg", "stg", "auto")
_EVICTION = ("evict_normal", "evict_first", "evict_last")  # TileLang's codes 0, 1, 2
_COPY_KEYS = ("coalesced_width", "disable_tma", "eviction_policy", "prefer_instruction",
              "parallel_loop_layout")


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None,
         loop_layout=None, annotations=None, prefer_instruction=None):
    """Copy a tile from ``src`` to ``dst`` (buffers, slices or a start element).

    ``annotations`` takes TileLang's keys ``coalesced_width``, ``disable_tma``,
    ``eviction_policy`` (a name or TileLang's code 0/1/2), ``prefer_instruction`` (``"tma"``,
    ``"cp_async"``, ``"sync"`` ...) and ``parallel_loop_layout`` (a ``T.Fragment``), which
    take precedence over the arguments of the same meaning and are checked as they are. Any
    other key is kept with its value on the tile op (the call's ``attrs``, printed with the
    program: ``T.Call("tw.copy", [...], attrs={"test.copy": "sync"})``) and changes no code,
    as TileLang keeps it for passes of its own; a key close to a known one
    (``disable_tmaa``) gives a RuntimeWarning naming that one, since it is probably a
    misspelling that does nothing. An element copy inside ``T.Parallel`` is a store, which
    keeps no annotations."""
    if annotations is not None and not isinstance(annotations, dict):
        raise kernel_error(f"T.copy: annotations must be a dict, got "
                           f"{type(annotations).__name__}")
    given = dict(annotations or {})
    coalesced_width = _coalesced_width(given.pop("coalesced_width", coalesced_width))
    disable_tma = _flag("disable_tma", given.pop("disable_tma", disable_tma))
    eviction_policy = _eviction_policy(given.pop("eviction_policy", eviction_policy))
    _choice("prefer_instruction", given.pop("prefer_instruction", prefer_instruction),
            _PREFERRED)
    _loop_layout(given.pop("parallel_loop_layout", loop_layout))
    kept = _kept_annotations("T.copy", given, _COPY_KEYS)
    src_ref, dst_ref = region_of(src, "T.copy source"), region_of(dst, "T.copy destination")
    src_known = all(e is not None for e in src_ref[2])
    dst_known = all(e is not None for e in dst_ref[2])
    if not src_known and not dst_known and \
            B.require_kernel("T.copy").enclosing("parallel") is not None:
        _copy_element(src_ref, dst_ref)
        return
    if not src_known and not dst_known:
        src_r = resolve(src_ref, None, "T.copy")
        dst_r = resolve(dst_ref, None, "T.copy")
    elif src_known:
        src_r = resolve(src_ref, None, "T.copy")
        dst_r = resolve(dst_ref, src_r.extents, "T.copy destination")
    else:
        dst_r = resolve(dst_ref, None, "T.copy")
        src_r = resolve(src_ref, dst_r.extents, "T.copy source")
    if not _shapes_match(src_r.extents, dst_r.extents):
        raise kernel_error(
            f"T.copy shape mismatch: source {src_r.buffer.name!r} region has shape "
            f"{shape_str(src_r.extents)} but destination {dst_r.buffer.name!r} region has "
            f"shape {shape_str(dst_r.extents)}")
    _emit("copy", {"src": src_r, "dst": dst_r},
          {"coalesced_width": coalesced_width, "disable_tma": disable_tma,
           "eviction_policy": eviction_policy}, annotations=kept)


def _flag(key: str, value) -> bool:
    value = as_int(value)
    if not isinstance(value, int):
        raise kernel_error(f"T.copy: {key} must be a bool, got {value!r}")
    return bool(value)


def _coalesced_width(value) -> int:
    if value is None:
        return 0
    value = as_int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise kernel_error(f"T.copy: coalesced_width must be a non-negative int, got {value!r}")
    return value


def _eviction_policy(value) -> str:
    value = as_int(value)
    if value is None or value == "":
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(_EVICTION):
        return _EVICTION[value]
    return _choice("eviction_policy", value, _EVICTION)


def _choice(key: str, value, choices):
    """``value`` of copy annotation ``key``: None or one of ``choices``."""
    if value is not None and value not in choices:
        raise kernel_error(f"T.copy: {key} must be one of {', '.join(map(repr, choices))}, "
                           f"got {value!r}")
    return value


def _loop_layout(value) -> None:
    if value is not None and not isinstance(value, Fragment):
        raise kernel_error(f"T.copy: the loop layout (parallel_loop_layout) must be a "
                           f"T.Fragment, got {type(value).__name__}")


def _kept_annotations(what: str, given: dict, known) -> dict | None:
    """The annotations of ``given``, every key unknown to ``what``, as the attributes an op
    keeps without reading them: keys are strings, values ones the IR holds (strings, numbers,
    expressions, lists and dicts of them). A key close to one of ``known`` is probably its
    misspelling, which would do nothing: a RuntimeWarning at the user's line names that one."""
    for key, value in given.items():
        if not isinstance(key, str):
            raise kernel_error(f"{what}: annotation keys must be strings, got {key!r}")
        if not _holdable(value):
            raise kernel_error(f"{what}: annotation {key!r} is kept on the op, so its value "
                               "must be a string, a number, an expression or a list or dict "
                               f"of them; got {type(value).__name__}")
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        if close:
            _warn_at_user_line(f"{what}: annotation {key!r} is not one this language reads "
                               "(it is kept on the op and changes nothing); did you mean "
                               f"{close[0]!r}?")
    return given or None


def _warn_at_user_line(message: str) -> None:
    where = user_location()
    if where is None:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, RuntimeWarning, where.filename, where.line)


def _holdable(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_holdable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _holdable(v) for k, v in value.items())
    return value is None or isinstance(value, (str, int, float, tvm_ffi.Object))


def _copy_element(src_ref, dst_ref) -> None:
    """``T.copy(A[i, j], B[i, j])`` inside ``T.Parallel`` (TileLang's element copy): each
    iteration's store of its element, converted to ``B``'s dtype."""
    load = _element(src_ref, "T.copy source")
    buffer, first, _ = dst_ref
    store = tirx.BufferStore(buffer, to_expr(load, str(buffer.dtype)),
                             [to_expr(i) for i in first], span=B.here())
    B.require_kernel("T.copy").emit(store)


def transpose(src, dst, annotations=None):
    """``dst[..., j, i] = src[..., i, j]``: a tile (shared, fragment or local; a buffer or a
    slice of one) written transposed into another, converted to ``dst``'s dtype as by
    ``T.copy``. The last two dimensions swap; leading dimensions of extent 1 are left out
    (``T.transpose(A_s[stage, :, :], B_s)`` transposes one stage), the others must match.
    ``dst`` must be ``src``'s shape reversed in its last two dimensions and another tile:
    transposing in place would race. TileLang's ``annotations`` (lowering hints) are accepted
    and change nothing."""
    if annotations is not None and not isinstance(annotations, dict):
        raise kernel_error(f"T.transpose: annotations must be a dict, got "
                           f"{type(annotations).__name__}")
    src_r = resolve(region_of(src, "T.transpose source"), None, "T.transpose")
    dst_r = resolve(region_of(dst, "T.transpose destination"), None, "T.transpose")
    for what, region in (("source", src_r), ("destination", dst_r)):
        if str(region.buffer.scope()) == "global":
            raise kernel_error(f"T.transpose {what} {region.buffer.name!r} is a global tensor; "
                               "it transposes tiles: T.copy the tensor's tile into a shared or "
                               "fragment tile first")
    if src_r.buffer.same_as(dst_r.buffer):
        raise kernel_error(f"T.transpose of {src_r.buffer.name!r} into itself: every element "
                           "would be read and written by different iterations; transpose into "
                           "another tile")
    s_dims, d_dims = transpose_dims(src_r.extents), transpose_dims(dst_r.extents)
    s_ext = [src_r.extents[d] for d in s_dims]
    d_ext = [dst_r.extents[d] for d in d_dims]
    want = [*s_ext[:-2], s_ext[-1], s_ext[-2]] if len(s_ext) >= 2 else None
    if want is None or len(d_ext) != len(want) or \
            not all(_same(a, b) for a, b in zip(d_ext, want)):
        raise KernelValueError(
            f"T.transpose shape mismatch: source {src_r.buffer.name!r} region "
            f"{shape_str(src_r.extents)} transposes to "
            f"{shape_str(want) if want else 'nothing (it needs two dimensions)'}, but "
            f"destination {dst_r.buffer.name!r} region is {shape_str(dst_r.extents)}",
            user_location())
    _emit("transpose", {"src": src_r, "dst": dst_r})


def fill(buffer, value):
    """Set every element of ``buffer`` (or a slice of it) to ``value``; a reducer starts an
    epoch at ``value`` (see :mod:`.reducer`)."""
    if getattr(buffer, "is_reducer", None) is not None:  # a reducer, finalized or not
        buffer.fill(value)
        return
    region = resolve(region_of(buffer, "T.fill"), None, "T.fill")
    _emit("fill", {"dst": region, "value": to_expr(value, str(region.buffer.dtype))})


def clear(buffer):
    """Set every element of ``buffer`` to zero."""
    fill(buffer, 0)


def _matrix(value, what: str, op: str = "T.gemm"):
    """(region, its two dimensions) of a gemm operand (``matrix_dims``: a one-wide tile keeps
    its unit dimension, so a GEMV's row (1, K) of A or column (K, 1) of B is a matrix)."""
    region = resolve(region_of(value, f"{op} {what}"), None, f"{op} {what}")
    dims = matrix_dims(region.extents)
    if dims is None:
        raise kernel_error(f"{op} operand {what} ({region.buffer.name!r}) must be a 2-D tile, "
                           f"got shape {shape_str(region.extents)}")
    return region, tuple(region.extents[d] for d in dims)


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=None,  # noqa: N803
         clear_accum=False, k_pack=1, wg_wait=0):
    """``C += op(A) @ op(B)`` with ``op`` a transpose when requested; every operand may be
    passed by its name (``T.gemm(a, B=b, C=c)``), as in TileLang."""
    a, (a0, a1) = _matrix(A, "A")
    b, (b0, b1) = _matrix(B, "B")
    c, (c0, c1) = _matrix(C, "C")
    m, ka = (a1, a0) if transpose_A else (a0, a1)
    kb, n = (b1, b0) if transpose_B else (b0, b1)
    if not _same(ka, kb):
        raise kernel_error(f"T.gemm K mismatch: A {a.buffer.name!r} gives K = {as_int(ka)} but "
                           f"B {b.buffer.name!r} gives K = {as_int(kb)}")
    if not (_same(m, c0) and _same(n, c1)):
        raise kernel_error(f"T.gemm shape mismatch: op(A) @ op(B) is ({as_int(m)}, {as_int(n)}) "
                           f"but C {c.buffer.name!r} is ({as_int(c0)}, {as_int(c1)})")
    policy_name = policy.value if isinstance(policy, GemmWarpPolicy) else policy or "square"
    clear_accum = _clear_accum(clear_accum, c)
    _emit("gemm", {"A": a, "B": b, "C": c},
          {"transpose_A": transpose_A, "transpose_B": transpose_B, "policy": str(policy_name),
           "clear_accum": clear_accum, "k_pack": k_pack, "wg_wait": wg_wait})


def gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False,  # noqa: N803
            transpose_B=False, policy=None, clear_accum=False, k_pack=1, wg_wait=0):
    """``C += op(A) @ op(B)`` where A is 2:4 structured-sparse along K, given as its kept
    values ``A_sparse`` ``[M, K / 2]`` (``[M, K / 2]`` for float32 too: one of two kept) and
    metadata ``E`` ``[M, K / e_factor]`` (``[K / 2, M]`` and ``[K / e_factor, M]`` when
    transposed), laid out as :mod:`tilewright.sparse` describes and
    :func:`tilewright.utils.sparse.compress` produces."""
    op = "T.gemm_sp"
    a, (a0, a1) = _matrix(A_sparse, "A_sparse", op)
    e, (e0, e1) = _matrix(E, "E", op)
    b, (b0, b1) = _matrix(B, "B", op)
    c, (c0, c1) = _matrix(C, "C", op)
    dtype, meta = str(a.buffer.dtype), str(e.buffer.dtype)
    if dtype not in sp.SPARSE_GROUPS:
        raise kernel_error(f"{op}: A_sparse {a.buffer.name!r} is {dtype}; structured sparsity "
                           f"takes {', '.join(sp.SPARSE_GROUPS)}")
    if meta not in sp.META_BITS:
        raise kernel_error(f"{op}: metadata E {e.buffer.name!r} is {meta}; it must be one of "
                           f"{', '.join(sp.META_BITS)}")
    if str(b.buffer.dtype) != dtype:
        raise kernel_error(f"{op}: B {b.buffer.name!r} is {b.buffer.dtype} but A_sparse "
                           f"{a.buffer.name!r} is {dtype}; both operands take one dtype")
    group = sp.SPARSE_GROUPS[dtype]
    m, ka = (a1, a0) if transpose_A else (a0, a1)
    me, ke = (e1, e0) if transpose_E else (e0, e1)
    kb, n = (b1, b0) if transpose_B else (b0, b1)
    k, dense_ka = as_int(kb), as_int(ka) * (group.group // group.kept)
    if not _same(dense_ka, kb):
        raise kernel_error(f"{op} K mismatch: A_sparse {a.buffer.name!r} keeps {as_int(ka)} "
                           f"columns ({group.kept} of every {group.group}), so K = {dense_ka}, "
                           f"but B {b.buffer.name!r} gives K = {k}")
    factor = sp.e_factor(dtype, meta)
    if isinstance(k, int) and (k % factor or not _same(ke, k // factor)):
        raise kernel_error(f"{op}: metadata E {e.buffer.name!r} has {as_int(ke)} columns along "
                           f"K; {meta} metadata of {dtype} needs K / {factor} = "
                           f"{k / factor:g} (K = {k} must be a multiple of {factor})")
    if not (_same(m, c0) and _same(n, c1) and _same(me, m)):
        raise kernel_error(f"{op} shape mismatch: op(A) @ op(B) is ({as_int(m)}, {as_int(n)}) "
                           f"with {as_int(me)} metadata rows, but C {c.buffer.name!r} is "
                           f"({as_int(c0)}, {as_int(c1)})")
    policy_name = policy.value if isinstance(policy, GemmWarpPolicy) else policy or "square"
    clear_accum = _clear_accum(clear_accum, c)
    _emit("gemm_sp", {"A": a, "E": e, "B": b, "C": c},
          {"transpose_A": transpose_A, "transpose_E": transpose_E, "transpose_B": transpose_B,
           "policy": str(policy_name), "clear_accum": clear_accum, "k_pack": k_pack,
           "wg_wait": wg_wait})


def _clear_accum(flag, c) -> bool:
    """``clear_accum`` as a bool; a condition known only at run time (``k == 0``) becomes an
    IR ``if`` that zeroes C before an accumulating GEMM."""
    if dtype_of(flag) is None:
        return bool(flag)
    cond = to_expr(flag)
    if isinstance(cond, tirx.IntImm):
        return bool(cond.value)
    builder = B.require_kernel("T.gemm")
    zero = make_call("fill", {"dst": c, "value": tirx.const(0, str(c.buffer.dtype))},
                     span=B.here())
    builder.emit(tirx.IfThenElse(cond, zero, None, span=B.here()))
    return False


# TileLang's reduction annotations: hints that change no result, accepted and ignored (every
# backend here reduces without them), as any other key is; nan_propagate changes the result
_REDUCE_HINTS = frozenset({"enable_fadd2"})


def schedule_hints(name: str, batch=1, annotations=None) -> None:
    """TileLang's ``batch`` (outputs per all-reduce call) and ``annotations`` of a reduction,
    a scan or ``T.finalize_reducer``: they schedule its CUDA lowering, not a result; checked at
    the user's line (a batch below 1 is a ValueError, as in TileLang)."""
    if not isinstance(batch, int) or isinstance(batch, bool):
        raise kernel_error(f"T.{name}: batch must be an int, got {batch!r}")
    if batch < 1:
        raise KernelValueError(f"T.{name}: batch must be >= 1, got {batch}", user_location())
    if annotations is not None and not isinstance(annotations, dict):
        raise kernel_error(f"T.{name}: annotations must be a dict, got "
                           f"{type(annotations).__name__}")


def check_batch(name: str, batch: int, shape) -> None:
    """A ``batch`` above 1 groups the outputs of a reduction (a tile of ``shape``) into
    all-reduce calls of ``batch`` each: it must not exceed their count and must divide it
    (TileLang checks so where it lowers the call; a count known only when the kernel runs is
    not checked)."""
    extents = [as_int(e) for e in shape]
    if batch <= 1 or not all(isinstance(e, int) for e in extents):
        return
    outputs = math.prod(extents)
    if batch > outputs:
        raise kernel_error(f"T.{name}: batch ({batch}) exceeds total output elements "
                           f"({outputs}); each all-reduce call covers batch of them")
    if outputs % batch:
        raise kernel_error(f"T.{name}: batch ({batch}) must evenly divide total output "
                           f"elements ({outputs})")


def _reduce_options(name: str, batch, annotations, nan_propagate) -> bool:
    """A reduction's ``batch`` and ``annotations`` (hints that change no result, and
    ``nan_propagate``, also a keyword): whether a NaN element makes the result NaN."""
    schedule_hints(name, batch, annotations)
    given = dict(annotations or {})
    if "nan_propagate" in given:
        nan_propagate = nan_propagate or given.pop("nan_propagate")
    # TileLang's other keys (enable_fadd2, a backend's own hints) change no result here: a
    # key close to a known one warns, as T.copy's
    _kept_annotations(f"T.{name}", given, {"nan_propagate", *_REDUCE_HINTS})
    if not isinstance(nan_propagate, bool) and nan_propagate not in (0, 1):
        raise kernel_error(f"T.{name}: nan_propagate is True or False, got {nan_propagate!r}")
    if nan_propagate and name.removeprefix("reduce_") not in NAN_REDUCE_KINDS:
        raise kernel_error(f"T.{name}: nan_propagate applies to the reductions that compare "
                           f"({', '.join(f'T.reduce_{k}' for k in sorted(NAN_REDUCE_KINDS))}); "
                           "a sum is NaN when an element is")
    return bool(nan_propagate)


def _reduce(kind: str, buffer, out, dim: int = -1, clear: bool = True, batch: int = 1,
            annotations=None, nan_propagate: bool = False):
    name = f"reduce_{kind}"
    nan_propagate = _reduce_options(name, batch, annotations, nan_propagate)
    src = resolve(region_of(buffer, f"T.{name}"), None, f"T.{name}")
    dst = resolve(region_of(out, f"T.{name}"), None, f"T.{name}")
    if kind in INTEGER_REDUCE_KINDS:
        for region in (src, dst):
            if not str(region.buffer.dtype).startswith(("int", "uint")):
                raise kernel_error(f"T.{name} takes integer tiles; {region.buffer.name!r} is "
                                   f"{region.buffer.dtype}")
    rank = len(src.extents)
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise kernel_error(f"T.{name}: dim={dim} is out of range for a tile of rank {rank}")
    kept = [e for i, e in enumerate(src.extents) if i != axis]
    kept_unit = [1 if i == axis else e for i, e in enumerate(src.extents)]
    out_shape = list(dst.extents)
    ok = (len(out_shape) == len(kept) and all(_same(x, y) for x, y in zip(out_shape, kept))) or \
        (len(out_shape) == rank and all(_same(x, y) for x, y in zip(out_shape, kept_unit))) or \
        (not kept and [as_int(e) for e in out_shape] == [1])
    if not ok:
        raise KernelValueError(
            f"T.{name}: output {dst.buffer.name!r} has shape {shape_str(out_shape)} but reducing "
            f"{shape_str(src.extents)} over dim {dim} gives {shape_str(kept or (1,))} (or "
            f"{shape_str(kept_unit)} keeping the dimension)", user_location())
    check_batch(name, batch, out_shape)
    attrs = {"dim": axis, "clear": clear}
    if kind in NAN_REDUCE_KINDS:
        attrs["nan_propagate"] = nan_propagate
    _emit(name, {"src": src, "dst": dst}, attrs)


def _make_reduce(kind: str):
    def reduce_op(buffer, out, dim: int = -1, clear: bool = True, batch: int = 1,
                  annotations=None, nan_propagate: bool = False):
        _reduce(kind, buffer, out, dim, clear, batch, annotations, nan_propagate)

    reduce_op.__name__ = f"reduce_{kind}"
    reduce_op.__qualname__ = f"T.{reduce_op.__name__}"
    reduce_op.__doc__ = f"Reduce ``buffer`` along ``dim`` into ``out``: {REDUCE_KINDS[kind]}." + (
        " A NaN element is ignored (IEEE 754's maxNum / minNum, as CUDA's fmaxf), unless "
        "``nan_propagate=True``, which makes the result NaN." if kind in NAN_REDUCE_KINDS
        else "")
    return reduce_op


REDUCE_OPS = {f"reduce_{kind}": _make_reduce(kind) for kind in REDUCE_KINDS}


def reduce(buffer, out, reduce_type: str, dim: int, clear: bool, batch: int = 1,
           annotations=None, nan_propagate: bool = False):
    """``T.reduce_<reduce_type>`` named by a string (TileLang's ``T.reduce``)."""
    if reduce_type not in REDUCE_KINDS:
        raise kernel_error(f"T.reduce: reduce_type must be one of {', '.join(REDUCE_KINDS)}, "
                           f"got {reduce_type!r}")
    _reduce(reduce_type, buffer, out, dim, clear, batch, annotations, nan_propagate)


def _scan(kind: str, src, dst, dim: int, reverse: bool):
    name = f"cum{kind}"
    s = resolve(region_of(src, f"T.{name}"), None, f"T.{name}")
    d = s if dst is None else resolve(region_of(dst, f"T.{name}"), None, f"T.{name}")
    rank = len(s.extents)
    axis = dim + rank if dim < 0 else dim
    if not 0 <= axis < rank:
        raise kernel_error(f"T.{name}: dim={dim} is out of range for a tile of rank {rank}")
    if not _shapes_match(s.extents, d.extents):
        raise KernelValueError(f"T.{name}: destination {d.buffer.name!r} has shape "
                               f"{shape_str(d.extents)} but the source is "
                               f"{shape_str(s.extents)}", user_location())
    _emit(name, {"src": s, "dst": d}, {"dim": axis, "reverse": reverse})


def _make_scan(kind: str):
    def scan(src, dst=None, dim: int = 0, reverse: bool = False, annotations=None):
        schedule_hints(f"cum{kind}", annotations=annotations)
        _scan(kind, src, dst, dim, reverse)

    scan.__name__ = f"cum{kind}"
    scan.__qualname__ = f"T.{scan.__name__}"
    scan.__doc__ = (f"{SCAN_KINDS[kind].capitalize()} of ``src`` along ``dim`` into ``dst`` "
                    "(in place when omitted; from the end when ``reverse``). TileLang's "
                    "``annotations`` (lowering hints of its scan) are accepted and change "
                    "nothing.")
    return scan


SCAN_OPS = {f"cum{kind}": _make_scan(kind) for kind in SCAN_KINDS}


def memory_order_id(what: str, memory_order, valid) -> int:
    """The id of ``memory_order`` (C++'s order of ``std::memory_order``), which ``what`` must
    take; a name it does not take is a ValueError at the user's line, as in TileLang."""
    if memory_order not in valid:
        raise KernelValueError(f"{what} does not support memory_order={memory_order!r}; "
                               f"expected one of {sorted(valid)}", user_location())
    return MEMORY_ORDERS[memory_order]


def _element(ref, what: str):
    """The element (a BufferLoad) that ``ref`` (``region_of``'s) names; anything wider is an
    error."""
    buffer, first, extents = ref
    if any(e is not None for e in extents):
        raise kernel_error(f"{what} takes one element (A[i, j]), got a region of "
                           f"{buffer.name!r}")
    return tirx.BufferLoad(buffer, [to_expr(i) for i in first])


def _atomic_prev(kind: str, load, value, order: int):
    """The expression an atomic of ``kind`` returning the element's previous value makes."""
    dtype = str(load.source.dtype)
    return tvm.ir.Call(tvm.ir.Op.get(f"tw.atomic_{kind}_prev"),
                       [load, to_expr(value, dtype), tirx.const(order, "int32")], ret_ty=dtype)


def _make_atomic(kind: str):
    def atomic(dst, value, memory_order=None, return_prev: bool = False, use_tma: bool = False,
               annotations=None):
        name = f"atomic_{kind}"
        memory_order = memory_order or "relaxed"
        order = memory_order_id(f"T.{name}", memory_order, MEMORY_ORDERS)
        ref = region_of(dst, f"T.{name}")
        if kind in BITWISE_ATOMIC_KINDS and not _is_integer(ref[0].dtype):
            raise KernelTypeError(f"T.{name} takes integer elements; {ref[0].name!r} is "
                                  f"{ref[0].dtype}", user_location())
        tile_value = isinstance(value, (TileBuffer, BufferSlice))
        if all(e is None for e in ref[2]) and not tile_value:  # one element: dst is A[i, j]
            region = resolve(ref, None, f"T.{name}")
            if dtype_of(value) is None and not hasattr(value, "buffer"):
                value = to_expr(value, str(region.buffer.dtype))
            if return_prev:
                return _atomic_prev(kind, _element(ref, f"T.{name}"), value, order)
            _emit(name, {"dst": region, "src": to_expr(value, str(region.buffer.dtype))},
                  {"memory_order": memory_order, "element": True},
                  element_op=True)
            return None
        if return_prev:
            raise kernel_error(f"T.{name}: return_prev needs a single element as destination")
        if not tile_value:
            region = resolve(ref, None, f"T.{name}")
            src = to_expr(value, str(region.buffer.dtype))
        else:
            src = resolve(region_of(value, f"T.{name}"), None, f"T.{name}")
            region = resolve(ref, src.extents, f"T.{name}")
            if not _shapes_match(src.extents, region.extents):
                raise kernel_error(f"T.{name}: value tile {src.buffer.name!r} has shape "
                                   f"{shape_str(src.extents)} but destination "
                                   f"{region.buffer.name!r} is {shape_str(region.extents)}")
        attrs = {"memory_order": memory_order}
        if use_tma:
            if kind != "add":
                raise kernel_error(f"T.{name} has no use_tma (TMA reduces add only)")
            attrs["use_tma"] = True
        _emit(name, {"dst": region, "src": src}, attrs, element_op=True)
        return None

    atomic.__name__ = f"atomic_{kind}"
    atomic.__qualname__ = f"T.{atomic.__name__}"
    atomic.__doc__ = (
        f"Atomic {kind} into global memory: ``dst`` is one element (``A[i]``) or a tile; "
        "``return_prev=True`` returns the old value (one element only). ``memory_order`` "
        "(C++'s names; relaxed when omitted) orders the kernel's other memory accesses around "
        "it for other threads. ``use_tma`` (add of a tile from shared memory): TileLang's "
        "request for a TMA reduction on sm_90+, an instruction choice: every backend here adds "
        "the same values element by element. ``annotations``: TileLang's lowering hints, "
        "accepted and unused."
        + (" Integer elements only." if kind in BITWISE_ATOMIC_KINDS else ""))
    return atomic


def _is_integer(dtype) -> bool:
    return str(dtype).startswith(("int", "uint"))


ATOMIC_OPS = {f"atomic_{kind}": _make_atomic(kind) for kind in ATOMIC_KINDS}
_ORDER_NAMES = {order: name for name, order in MEMORY_ORDERS.items()}


def atomics_as_statements(value) -> bool:
    """An expression with atomics returning the previous value written as a statement (its
    value unused: ``T.atomic_add(C[0], 1, return_prev=True)``, ``T.atomic_add(...) + 1``):
    emits each outermost such atomic as the element's atomic, which goes where the kernel's
    other element atomics go (once per block in block code, each thread's in thread-level
    code, each iteration's in ``T.Parallel``). False, emitting nothing, when ``value`` has no
    such atomic or has another effect (a call of an external function: the caller evaluates
    it whole)."""
    if not isinstance(value, tvm.ir.Expr):
        return False
    prevs = []
    tvm_ffi.structural_walk(value, (tvm.ir.Call, lambda c: prevs.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name in ATOMIC_PREV else None))
    outer = [c for c in prevs if not any(d is not c and _within(c, d) for d in prevs)]
    rest = tvm_ffi.structural_map(value, (tvm.ir.Call, lambda c: tirx.const(0, str(c.ty)) if
                                          any(c.same_as(o) for o in outer) else c))
    if not outer or writes_memory(rest):
        return False
    for call in outer:
        load, operand, order = call.args
        ATOMIC_OPS[f"atomic_{ATOMIC_PREV[call.op.name]}"](
            load, operand, memory_order=_ORDER_NAMES[order.value])
    return True


def _within(node, container) -> bool:
    return any(contains(arg, node) for arg in container.args)


def atomic_load(src, memory_order: str = "seq_cst"):
    """The value of one element (``A[i]``) read atomically with ``memory_order`` (relaxed,
    consume, acquire or seq_cst): another block's ``T.atomic_store`` or atomic into it is seen
    whole, and an acquire load orders the accesses after it (a consumer spinning on a flag
    that a producer publishes with a release store)."""
    order = memory_order_id("T.atomic_load", memory_order, LOAD_ORDERS)
    load = _element(region_of(src, "T.atomic_load"), "T.atomic_load")
    return tvm.ir.Call(tvm.ir.Op.get(ATOMIC_LOAD), [load, tirx.const(order, "int32")],
                       ret_ty=str(load.source.dtype))


def atomic_store(dst, src, memory_order: str = "seq_cst") -> None:
    """Store ``src`` into one element (``A[i]``) atomically with ``memory_order`` (relaxed,
    release or seq_cst): a release store publishes the writes before it to whoever acquires
    the element. Like the element atomics, it is each thread's in thread-level code and the
    block's (made once) in block code."""
    memory_order_id("T.atomic_store", memory_order, STORE_ORDERS)
    ref = region_of(dst, "T.atomic_store")
    _element(ref, "T.atomic_store")
    region = resolve(ref, None, "T.atomic_store")
    _emit("atomic_store", {"dst": region, "src": to_expr(src, str(region.buffer.dtype))},
          {"memory_order": memory_order, "element": True}, element_op=True)


def _lane_start(ref, lanes: int, what: str):
    """``(buffer, index of the first element)`` of the ``lanes`` consecutive elements that
    ``ref`` names: ``B[i, j]``, a slice ``B[i, j:j + lanes]`` or ``B[i, T.Ramp(j, 1, lanes)]``."""
    buffer, first, _ = ref
    first = [to_expr(i) for i in first]
    last = first[-1]
    if isinstance(last, tirx.Ramp):
        if as_int(last.stride) != 1 or as_int(last.lanes) != lanes:
            raise kernel_error(f"{what}: a T.Ramp index names {lanes} consecutive elements "
                               f"(stride 1, {lanes} lanes), got stride {last.stride}, "
                               f"{last.lanes} lanes")
        first[-1] = last.base
    return buffer, first


def _make_atomic_add_wide(lanes: int):
    def atomic_add_wide(dst, value, return_prev: bool = False):
        name = f"atomic_addx{lanes}"
        (d, at), (v, vat) = (_lane_start(region_of(x, f"T.{name}"), lanes, f"T.{name}")
                             for x in (dst, value))
        pairs = [(tirx.BufferLoad(d, [*at[:-1], at[-1] + k]),
                  tirx.BufferLoad(v, [*vat[:-1], vat[-1] + k])) for k in range(lanes)]
        if return_prev:
            olds = [_atomic_prev("add", load, val, MEMORY_ORDERS["relaxed"])
                    for load, val in pairs]
            return tirx.Shuffle(olds, [tirx.const(k, "int32") for k in range(lanes)])
        for load, val in pairs:
            ATOMIC_OPS["atomic_add"](load, val)
        return None

    atomic_add_wide.__name__ = f"atomic_addx{lanes}"
    atomic_add_wide.__qualname__ = f"T.{atomic_add_wide.__name__}"
    atomic_add_wide.__doc__ = (
        f"TileLang's {lanes}-wide atomic add: ``dst`` and ``value`` name the first of {lanes} "
        "consecutive elements (``B[i, j]``, a slice ``B[i, j:j + "
        f"{lanes}]`` or ``B[i, T.Ramp(j, 1, {lanes})]``); each element is added atomically "
        "(CUDA's vector atomics add them in one instruction, an optimisation here, not a "
        "guarantee: no other thread sees them half done in either). ``return_prev=True`` "
        f"returns the previous values as a vector of {lanes} lanes of the destination's dtype "
        f"(``Prev[i:i + {lanes}] = ...`` stores it).")
    return atomic_add_wide


WIDE_ATOMIC_OPS = {f"atomic_addx{n}": _make_atomic_add_wide(n) for n in (2, 4)}
ELEMENT_ATOMICS = {"atomic_load": atomic_load, "atomic_store": atomic_store}

__all__ = ["GemmWarpPolicy", "clear", "copy", "fill", "gemm", "gemm_sp", "reduce", "transpose",
           *REDUCE_OPS,
           *SCAN_OPS, *ATOMIC_OPS, *WIDE_ATOMIC_OPS, *ELEMENT_ATOMICS]
