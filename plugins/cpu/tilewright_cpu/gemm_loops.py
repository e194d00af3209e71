"""GEMM loops rewritten before tile-op lowering: K loops that stage tiles merged into deeper
GEMMs, and narrow GEMM operands that a loop does not write converted once before it."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tilewright.ir import Region, decode, make_call
from tilewright.transform import StmtMutator, prim_func_pass, rebuild_for
from tvm import tirx

from .blocking import k_unroll
from .irutil import const_int, flatten, is_full, seq_of, substitute


# -- GEMM K loops --------------------------------------------------------------------------------
def _references(body) -> dict:
    """How many loads and stores (region operands included) name each buffer."""
    count: dict = {}

    def add(buf):
        count[buf] = count.get(buf, 0) + 1

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, lambda n: add(n.source)),
                                   (tirx.BufferStore, lambda n: add(n.buffer))])
    return count


class _KLoop:
    """A K loop of a GEMM over staged tiles: ``for k: copy(.., A_s); copy(.., B_s);
    gemm(A_s, B_s, C)`` in any order of the copies. ``staged`` maps the gemm's ``A`` and ``B``
    to the copy that fills each; ``None`` when the loop has another shape."""

    def __init__(self, loop: tirx.For, refs: dict):
        self.loop = loop
        body = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        calls = [decode(s) for s in body]
        self.gemm = None
        self.staged = None
        if any(c is None or c.name not in ("copy", "gemm") for c in calls):
            return
        gemms = [c for c in calls if c.name == "gemm"]
        copies = {c.operands["dst"].buffer: c for c in calls if c.name == "copy"}
        if len(gemms) != 1 or len(copies) != len(calls) - 1 or gemms[0].attrs["clear_accum"]:
            return
        gemm = gemms[0]
        staged = {}
        for name in "AB":
            region = gemm.operands[name]
            copy = copies.get(region.buffer)
            # the tile is filled whole by its copy, read whole by the gemm and named nowhere
            # else in the function (so a deeper tile can replace it)
            if copy is None or len(region.buffer.shape) != 2 or not is_full(region) or \
                    not is_full(copy.operands["dst"]) or refs.get(region.buffer) != 2:
                return
            staged[name] = copy
        written = {c.buffer for c in (gemm.operands["C"], *(c.operands["dst"] for c in
                                                             copies.values()))}
        if any(c.operands["src"].buffer in written for c in copies.values()) or \
                len(copies) != 2 or gemm.operands["C"].buffer in copies:
            return
        self.gemm, self.staged = gemm, staged

    def k_dim(self, name: str) -> int:
        transposed = self.gemm.attrs["transpose_" + name]
        return (0 if transposed else 1) if name == "A" else (1 if transposed else 0)


def _deeper(buffer, dim: int, factor: int, dtype: str):
    """A tile ``factor`` times deeper than ``buffer`` along ``dim``, and its whole region."""
    shape = [int(d) for d in buffer.shape]
    shape[dim] *= factor
    deep = tirx.decl_buffer(shape, dtype, f"{buffer.name}_k{factor}", scope=buffer.scope())
    return deep, Region.full(deep)


def _staging_dtype(copy, acc: str) -> str:
    """The staged tile's dtype, or the accumulator's when the tile only widens to it on the
    way from the copy's source to the gemm (float16 -> float32, int8 -> int32): converting
    once on the copy gives the gemm the same values as converting at each use."""
    src, tile = str(copy.operands["src"].buffer.dtype), str(copy.operands["dst"].buffer.dtype)
    a, t = tvm.DataType(acc), tvm.DataType(tile)
    widens = a.bits >= t.bits and (str(a).startswith(("float", "bfloat")) ==
                                   str(t).startswith(("float", "bfloat")))
    return acc if src == tile and widens else tile


def _at(region: Region, var, value) -> Region:
    """``region`` with ``var`` replaced by ``value`` in its starts and extents."""
    simplify = tvm.sym.Analyzer().simplify
    return Region(region.buffer,
                  tuple(simplify(substitute(s, var, value)) for s in region.starts),
                  tuple(simplify(substitute(e, var, value)) for e in region.extents))


def _contiguous(sources: list, src: Region, dst: Region, k_dim: int, depth: int):
    """One source region covering ``sources`` when they follow each other along the source
    dimension copied into the tile's K dimension ``k_dim`` (else None)."""
    sdims = [d for d, e in enumerate(src.extents) if const_int(e) != 1]
    ddims = [d for d, e in enumerate(dst.extents) if const_int(e) != 1]
    if len(sdims) != len(ddims) or k_dim not in ddims:
        return None
    axis = sdims[ddims.index(k_dim)]
    analyzer = tvm.sym.Analyzer()
    first = sources[0]
    for u, part in enumerate(sources):
        for d, (a, b) in enumerate(zip(part.starts, first.starts)):
            shift = u * depth if d == axis else 0
            if const_int(analyzer.simplify(a - b - shift)) != 0:
                return None
        if any(const_int(analyzer.simplify(a - b)) != 0
               for a, b in zip(part.extents, first.extents)):
            return None
    extents = list(first.extents)
    extents[axis] = extents[axis] * len(sources)
    return Region(first.buffer, first.starts, tuple(extents))


def _merge_k(kl: _KLoop, factor: int, direct: dict):
    """The loop with ``factor`` iterations merged into one deeper GEMM (and a loop for the
    remainder), and the deeper tiles it stages (``direct`` names the operands read in place).
    """
    loop, gemm = kl.loop, kl.gemm
    acc = str(gemm.operands["C"].buffer.dtype)
    outer = tirx.Var(f"{loop.loop_var.name}_o", "int32")
    body, deep, operands = [], {}, {"C": gemm.operands["C"]}
    for name, copy in kl.staged.items():
        src, dst = copy.operands["src"], copy.operands["dst"]
        k_dim = kl.k_dim(name)
        depth = int(dst.buffer.shape[k_dim])
        sources = [_at(src, loop.loop_var, loop.min + outer * factor + u) for u in range(factor)]
        whole = _contiguous(sources, src, dst, k_dim, depth)
        if name in direct:
            operands[name] = whole
            continue
        deep[name], operands[name] = _deeper(dst.buffer, k_dim, factor, _staging_dtype(copy, acc))
        if whole is not None:  # one copy whose rows the hardware prefetcher can stream
            body.append(make_call("copy", {"src": whole, "dst": operands[name]}, copy.attrs,
                                  span=copy.span))
            continue
        for u, part in enumerate(sources):
            starts = [0, 0]
            starts[k_dim] = u * depth
            body.append(make_call("copy", {"src": part, "dst": Region(
                deep[name], tuple(starts), tuple(dst.extents))}, copy.attrs, span=copy.span))
    body.append(make_call("gemm", operands, gemm.attrs, span=gemm.span))
    trips = loop.extent
    main = tirx.For(outer, 0, tirx.floordiv(trips, factor), tirx.ForKind.SERIAL,
                    tirx.SeqStmt(body), annotations=dict(loop.annotations), span=loop.span)
    if const_int(trips) is not None and const_int(trips) % factor == 0:
        return main, deep, False
    rest = tirx.Var(loop.loop_var.name, "int32")
    tail = tirx.For(rest, 0, trips - tirx.floordiv(trips, factor) * factor, tirx.ForKind.SERIAL,
                    substitute(loop.body, loop.loop_var,
                                loop.min + tirx.floordiv(trips, factor) * factor + rest),
                    annotations=dict(loop.annotations), span=loop.span)
    return tirx.SeqStmt([main, tail]), deep, True


class _FuseK(StmtMutator):
    """Rewrites the K loops :class:`_KLoop` recognises; ``allocs`` maps each staged tile
    to the allocations that replace its own."""

    def __init__(self, refs: dict):
        super().__init__()
        self.refs = refs
        self.allocs: dict = {}

    def visit_For(self, stmt):
        stmt = super().visit_For(stmt)  # the analyser now knows this loop and its parents
        if stmt.kind != tirx.ForKind.SERIAL or not isinstance(stmt.body, tirx.SeqStmt):
            return stmt
        kl = _KLoop(stmt, self.refs)
        if kl.gemm is None:
            return stmt
        c = kl.gemm.operands["C"]
        m, n = (const_int(e) for e in c.extents[-2:])
        depth = const_int(kl.staged["A"].operands["dst"].buffer.shape[kl.k_dim("A")])
        if m is None or n is None or depth is None:
            return stmt
        direct = self._direct(kl)
        tiles = {name: copy.operands["dst"].buffer for name, copy in kl.staged.items()}
        if len(direct) == 2:  # the whole loop is one GEMM on the operands in place
            for tile in tiles.values():
                self.allocs[tile] = []
            return make_call("gemm", {**direct, "C": c}, kl.gemm.attrs, span=kl.gemm.span)
        factor = k_unroll(const_int(stmt.extent), depth, m, n,
                          tvm.DataType(str(c.buffer.dtype)).bits)
        if factor < 2:
            return stmt
        new, deep, keeps_tiles = _merge_k(kl, factor, direct)
        for name, tile in tiles.items():
            self.allocs[tile] = ([tirx.AllocBuffer(tile)] if keeps_tiles else []) + \
                ([tirx.AllocBuffer(deep[name])] if name in deep else [])
        return new

    def _direct(self, kl: _KLoop) -> dict:
        """The operands whose copy over every iteration reads one region, of the tile's dtype,
        provably inside its buffer: the GEMM may read that region in place."""
        trips = const_int(kl.loop.extent)
        if trips is None:
            return {}
        found = {}
        for name, copy in kl.staged.items():
            src, dst = copy.operands["src"], copy.operands["dst"]
            if str(src.buffer.dtype) != str(dst.buffer.dtype):
                continue
            k_dim = kl.k_dim(name)
            sources = [_at(src, kl.loop.loop_var, kl.loop.min + u) for u in range(trips)]
            whole = _contiguous(sources, src, dst, k_dim, int(dst.buffer.shape[k_dim]))
            if whole is not None and all(
                    self.analyzer.can_prove(s >= 0) and self.analyzer.can_prove(s + e <= d)
                    for s, e, d in zip(whole.starts, whole.extents, whole.buffer.shape)):
                found[name] = whole
        return found


def fuse_gemm_k():
    """A K loop that stages tiles of A and B with ``T.copy`` and multiplies them with one
    ``T.gemm`` (the GPU GEMM's shape) is rewritten so the micro-kernel keeps C in registers
    across a deep K instead of loading and storing it every ``block_K``:

    - when every copy is a plain copy of a region provably inside its buffer, and the
      iterations' regions follow each other, the loop becomes one GEMM that reads the whole
      K extent in place (the micro-kernel does its own cache blocking);
    - otherwise :func:`~tilewright_cpu.blocking.k_unroll` iterations run as one deeper GEMM:
      the kernel's copies, with their bounds guards, fill tiles that many times deeper (in the
      accumulator's type when they only widen to it; an operand that may be read in place
      is), and a remainder of iterations runs as written."""

    def run(func):
        fuse = _FuseK(_references(func.body))
        body = fuse.visit(func.body)
        if not fuse.allocs:
            return func

        def place(stmt):
            return seq_of(fuse.allocs[stmt.buffer]) if stmt.buffer in fuse.allocs else stmt

        return func.with_body(flatten(tvm_ffi.structural_map(body, (tirx.AllocBuffer, place))))

    return prim_func_pass("CPUFuseGemmK", run)


# -- GEMM operands converted once ----------------------------------------------------------------
HOIST_MAX_BYTES = 256 * 1024  # a converted tile above this would not stay in L2 between uses


def _aliases(body) -> dict:
    """Each tile declared over another's memory (``T.decl_buffer(data=...)``, views) mapped to
    the tile whose memory it is."""
    alias = {}

    def declared(stmt):
        data = stmt.data
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and \
                data.op.name == "tirx.buffer_data":
            alias[stmt.buffer] = data.args[0]

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, declared))
    return alias


def _root(buffer, alias: dict):
    seen = set()
    while buffer in alias and buffer not in seen:
        seen.add(buffer)
        buffer = alias[buffer]
    return buffer


def _written(body, alias: dict) -> set:
    """The tiles ``body`` may write (by the tile owning their memory): stores, tile ops'
    written regions and addresses handed to calls (atomics ...)."""
    written = set()

    def tile_op(stmt):
        call = decode(stmt)
        if call is not None:
            written.update(_root(r.buffer, alias) for r in call.regions("write"))

    def address(call):
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.address_of" and \
                isinstance(call.args[0], tvm.ir.TensorLoad):
            written.add(_root(call.args[0].source, alias))

    tvm_ffi.structural_walk(body, [
        (tirx.BufferStore, lambda s: written.add(_root(s.buffer, alias))),
        (tirx.Evaluate, tile_op), (tvm.ir.Call, address)])
    return written


def _allocated(body) -> set:
    found = set()
    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, lambda s: found.add(s.buffer)))
    return found


class _HoistConversions(StmtMutator):
    """Rewrites the loops that :func:`hoist_gemm_conversions` describes; ``alias`` as
    :func:`_aliases` gives it."""

    def __init__(self, alias: dict):
        super().__init__()
        self.alias = alias

    def visit_For(self, stmt):
        if stmt.kind in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED):
            hoisted = self._hoist(stmt)
            if hoisted is not None:
                return hoisted
        return super().visit_For(stmt)

    def _hoist(self, loop):
        written, inner = _written(loop.body, self.alias), _allocated(loop.body)
        tiles = {}  # tile -> its copy in the accumulator's type

        def consider(stmt):
            call = decode(stmt)
            if call is None or call.name != "gemm":
                return
            acc = str(call.operands["C"].buffer.dtype)
            for name in "AB":
                region = call.operands[name]
                tile = region.buffer
                if str(tile.dtype) == acc or str(tile.scope()) == "global" or \
                        _root(tile, self.alias) in written or tile in self.alias or \
                        tile in inner or tile in tiles or not is_full(region):
                    continue
                shape = [const_int(d) for d in tile.shape]
                if any(d is None for d in shape) or \
                        math.prod(shape) * tvm.DataType(acc).bits // 8 > HOIST_MAX_BYTES:
                    continue
                tiles[tile] = tirx.decl_buffer(tile.shape, acc, f"{tile.name}_{acc}",
                                               scope=tile.scope())

        tvm_ffi.structural_walk(loop.body, (tirx.Evaluate, consider))
        if not tiles:
            return None

        def replace(stmt):
            call = decode(stmt)
            if call is None or call.name != "gemm":
                return stmt
            operands = {name: Region.full(tiles[region.buffer])
                        if name in "AB" and region.buffer in tiles and is_full(region)
                        else region for name, region in call.operands.items()}
            return make_call("gemm", operands, call.attrs, span=call.span)

        body = tvm_ffi.structural_map(loop.body, (tirx.Evaluate, replace))
        converts = [make_call("copy", {"src": Region.full(tile), "dst": Region.full(wide)}, {},
                              span=loop.span) for tile, wide in tiles.items()]
        loop = super().visit_For(rebuild_for(loop, body=body))
        return tirx.SeqStmt([*(tirx.AllocBuffer(wide) for wide in tiles.values()), *converts,
                             loop])


def hoist_gemm_conversions():
    """A ``T.gemm`` operand tile of a narrower type than the accumulator (bfloat16, float16,
    float8) that a loop around the gemm never writes (the queries of an attention kernel, read
    against every block of keys) is converted once, before the outermost such loop, into a
    tile of the accumulator's type that the gemm reads instead: the micro-kernel converts a
    narrower operand at every call, and a float8 one element by element in integer code. A
    converted tile larger than :data:`HOIST_MAX_BYTES` is left alone."""

    def run(func):
        body = _HoistConversions(_aliases(func.body)).visit(func.body)
        return func if body.same_as(func.body) else func.with_body(flatten(body))

    return prim_func_pass("CPUHoistGemmConversions", run)
