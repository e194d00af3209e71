"""Tile op -> Ascend C, one rule per op in a table keyed by op name.

A rule is ``rule(emitter, call)`` and writes lines through the emitter. ``T.copy`` dispatches
on its data path (source and destination memory): GM->UB and GM->L1 on MTE2, UB->GM on MTE3,
L1->L0A/L0B on MTE1, L0C->GM on FIX, UB->UB on V.

The cube paths (GM->L1, L1->L0A/L0B, L0C->GM, ``gemm_v0``, ``mma``) are in :mod:`.cube`,
which keeps L1 and L0 tiles in the hardware's fractal formats.
"""

from __future__ import annotations

from tilewright.errors import KernelError
from tilewright.ir import Region
from tvm import tirx

from . import cube, ops
from .arch import ALIGN, CUBE_SCOPES, SHORT
from .passes import dtype_bytes

CTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int32": "int32_t",
          "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "int64": "int64_t",
          "uint32": "uint32_t", "uint16": "uint16_t", "bool": "bool", "float64": "double"}
PIPE_CORE = {"v": "AIV", "mte3": "AIV", "m": "AIC", "mte1": "AIC", "fix": "AIC"}


def ctype(dtype: str) -> str:
    if dtype not in CTYPES:
        raise KernelError(f"dtype {dtype} has no Ascend C type in this backend")
    return CTYPES[dtype]


def _scope(region: Region) -> str:
    return str(region.buffer.scope())


def _mem_core(scope: str):
    if scope == "ascend.ub":
        return ("AIV",)
    if scope in CUBE_SCOPES:
        return ("AIC",)
    return None


def core_of(call):
    """The cores (("AIC",), ("AIV",) or both) an op outside ``T.Scope`` belongs to; None when
    only a scope can tell."""
    name = call.name
    if name in ("ascend.gemm_v0", "ascend.mma"):
        return ("AIC",)
    if name.startswith("ascend.tile."):
        return ("AIV",)
    if name in ("ascend.set_flag", "ascend.wait_flag"):
        cores = {PIPE_CORE.get(call.attrs["src"]), PIPE_CORE.get(call.attrs["dst"])} - {None}
        return tuple(cores) if len(cores) == 1 else ("AIC", "AIV") if not cores else None
    if name == "ascend.pipe_barrier":
        core = PIPE_CORE.get(call.attrs["pipe"])
        return (core,) if core else ("AIC", "AIV")
    if name == "ascend.set_cross_flag":
        core = PIPE_CORE.get(call.attrs["pipe"])
        return (core,) if core else None
    if name == "ascend.wait_cross_flag":
        return None
    if name in ("ascend.barrier_all", "ascend.printf"):
        return ("AIC", "AIV")
    regions = [v for v in call.operands.values() if isinstance(v, Region)]
    cores = {_mem_core(_scope(r)) for r in regions} - {None}
    return cores.pop() if len(cores) == 1 else ("AIC", "AIV")


# -- regions as Ascend C tensors --------------------------------------------------------------
def _ints(values, what):
    out = []
    for v in values:
        v = v.value if isinstance(v, tirx.IntImm) else v
        if not isinstance(v, int):
            raise KernelError(f"{what}: backend 'ascend' needs static tile shapes, got {v}")
        out.append(v)
    return out


def offset_of(em, region: Region) -> str:
    # a tensor's dimensions may be dynamic (T.dynamic): kernel arguments
    shape = [d.value if isinstance(d, tirx.IntImm) else d for d in region.buffer.shape]
    offset, stride = 0, 1
    for start, dim in reversed(list(zip(region.starts, shape))):
        offset = offset + (start if not isinstance(start, int) else tirx.const(start, "int32")) \
            * stride
        stride *= dim
    return em.expr(offset)


def tensor(em, region: Region) -> str:
    off = offset_of(em, region)
    name = em.buf(region.buffer)
    return name if off == "0" else f"{name}[{off}]"


def view(region: Region) -> tuple[int, int, int]:
    """The region as (rows, cols, row stride in elements) of its buffer. The stride is an
    expression when a dimension of the tensor is dynamic (T.dynamic)."""
    shape = [d.value if isinstance(d, tirx.IntImm) else d for d in region.buffer.shape]
    if str(region.buffer.scope()) != "global":
        shape = _ints(shape, region.buffer.name)
    ext = _ints(region.extents, region.buffer.name)
    cols, stride = ext[-1], shape[-1]
    rows = 1
    for e in ext[:-1]:
        rows *= e
    outer = [i for i in range(len(ext) - 1) if ext[i] > 1]
    if outer and any(not isinstance(shape[j], int) or ext[j] != shape[j]
                     for j in range(outer[0] + 1, outer[-1] + 1)):
        raise KernelError(f"the region of {region.buffer.name!r} with extents {ext} is not a "
                          "set of equally spaced rows; copy it in parts")
    if outer:  # dimensions of extent 1 after the rows only offset them
        stride = 1
        for dim in shape[outer[-1] + 1:]:
            stride = stride * dim
    if rows == 1:
        stride = cols
    return rows, cols, stride


def _blocks(nbytes: int, what: str) -> int:
    if nbytes % ALIGN:
        raise KernelError(f"{what}: {nbytes} bytes is not a multiple of {ALIGN}; Ascend "
                          "DataCopy moves 32-byte blocks, so make the tile's last dimension a "
                          f"multiple of {ALIGN} bytes")
    return nbytes // ALIGN


def _data_copy(em, src: Region, dst: Region, what: str) -> None:
    eb = dtype_bytes(str(src.buffer.dtype))
    if str(src.buffer.dtype) != str(dst.buffer.dtype):
        raise KernelError(f"{what}: {src.buffer.name!r} is {src.buffer.dtype} but "
                          f"{dst.buffer.name!r} is {dst.buffer.dtype}; DataCopy does not "
                          "convert (use T.tile.cast in UB)")
    sr, sc, ss = view(src)
    dr, dc, ds = view(dst)
    if sr * sc != dr * dc:
        raise KernelError(f"{what}: {sr}x{sc} elements do not fit {dr}x{dc}")
    if sc != dc and not (sr == 1 or dr == 1):
        raise KernelError(f"{what}: row lengths differ ({sc} vs {dc})")
    if (sr == 1 or sc == ss) and (dr == 1 or dc == ds):
        count = sr * sc
        _blocks(count * eb, what)
        em.line(f"DataCopy({tensor(em, dst)}, {tensor(em, src)}, {count});")
        return
    blen = _blocks(sc * eb, what)
    sgap = _blocks((ss - sc) * eb, what)
    dgap = _blocks((ds - dc) * eb, what)
    em.line(f"DataCopy({tensor(em, dst)}, {tensor(em, src)}, "
            f"DataCopyParams({sr}, {blen}, {sgap}, {dgap}));")


def rule_copy(em, call) -> None:
    src, dst = call.operands["src"], call.operands["dst"]
    path = (_scope(src), _scope(dst))
    what = f"T.copy {src.buffer.name} -> {dst.buffer.name}"
    if path in (("global", "ascend.ub"), ("ascend.ub", "global")):
        from .vector_codegen import copy_gm_ub  # bounds-checked copies (imports this module)

        if copy_gm_ub(em, call):
            return None
    if path in (("global", "ascend.ub"), ("ascend.ub", "global"), ("ascend.ub", "ascend.ub")):
        return _data_copy(em, src, dst, what)
    if path == ("global", "ascend.l1"):
        return cube.copy_gm_to_l1(em, src, dst, what)
    if path in (("ascend.l1", "ascend.l0a"), ("ascend.l1", "ascend.l0b")):
        return cube.copy_l1_to_l0(em, src, dst, what)
    if path == ("ascend.l0c", "global"):
        return cube.copy_l0c_to_gm(em, src, dst, what)
    raise KernelError(f"{what}: no Ascend data path from {SHORT.get(path[0], path[0])} to "
                      f"{SHORT.get(path[1], path[1])} (paths: GM->UB, UB->GM, GM->L1, "
                      "L1->L0A/L0B, L0C->GM, UB->UB; cube and vector cores meet only in GM)")


def _event(call) -> str:
    return f"HardEvent::{call.attrs['src'].upper()}_{call.attrs['dst'].upper()}"


def rule_set_flag(em, call) -> None:
    em.line(f"SetFlag<{_event(call)}>({em.expr(call.operands['event_id'])});")


def rule_wait_flag(em, call) -> None:
    em.line(f"WaitFlag<{_event(call)}>({em.expr(call.operands['event_id'])});")


def rule_pipe_barrier(em, call) -> None:
    em.line(f"PipeBarrier<PIPE_{call.attrs['pipe'].upper()}>();")


def rule_barrier_all(em, call) -> None:
    em.line("PipeBarrier<PIPE_ALL>();")


def rule_set_cross_flag(em, call) -> None:
    em.line(f"CrossCoreSetFlag<{call.attrs['mode']}, PIPE_{call.attrs['pipe'].upper()}>"
            f"({em.expr(call.operands['event_id'])});")


def rule_wait_cross_flag(em, call) -> None:
    em.line(f"CrossCoreWaitFlag({em.expr(call.operands['event_id'])});")


def rule_printf(em, call) -> None:
    args = [em.expr(a) for a in call.operands["args"].args]
    fmt = call.attrs["format"].encode("unicode_escape").decode().replace('"', '\\"')
    em.line(f'AscendC::printf("{fmt}"{"".join(", " + a for a in args)});')


def rule_dump_tensor(em, call) -> None:
    src = call.operands["src"]
    shape = call.attrs["shape"]
    if shape:
        dims = shape.split(",")
        em.line(f"{{ uint32_t shp[] = {{{', '.join(dims)}}}; ShapeInfo si({len(dims)}, shp); "
                f"DumpTensor({tensor(em, src)}, {call.attrs['desc']}, "
                f"{call.attrs['dump_size']}, si); }}")
    else:
        em.line(f"DumpTensor({tensor(em, src)}, {call.attrs['desc']}, "
                f"{call.attrs['dump_size']});")


def _vector_operands(em, regions, what) -> tuple[list[str], int]:
    counts = set()
    out = []
    for r in regions:
        rows, cols, stride = view(r)
        if rows > 1 and cols != stride:
            raise KernelError(f"{what}: the region of {r.buffer.name!r} is not contiguous; "
                              "vector instructions take contiguous UB ranges")
        off = offset_of(em, r)
        if off.lstrip("-").isdigit() and int(off) * dtype_bytes(str(r.buffer.dtype)) % ALIGN:
            raise KernelError(f"{what}: {r.buffer.name!r} starts at element {off}, which is not "
                              f"{ALIGN}-byte aligned; vector operands start on 32-byte "
                              "boundaries")
        counts.add(rows * cols)
        out.append(tensor(em, r))
    return out, counts.pop()


def _make_vector_rule(name: str, instr: str, operand_names: tuple, scalar: str | None = None):
    def rule(em, call):
        regions = [call.operands[o] for o in operand_names]
        args, count = _vector_operands(em, regions, f"T.tile.{name}")
        if scalar is not None:
            dt = str(regions[0].buffer.dtype)
            args.append(f"({ctype(dt)}){em.expr(call.operands[scalar])}")
        if instr == "Copy":
            em.line(f"DataCopy({args[0]}, {args[1]}, {count});")
        elif instr == "Cast":
            em.line(f"Cast({args[0]}, {args[1]}, RoundMode::{call.attrs['round']}, {count});")
        else:
            em.line(f"{instr}({', '.join(args)}, {count});")
    rule.__name__ = f"rule_tile_{name}"
    return rule


def rule_fill(em, call) -> None:
    dst = call.operands["dst"]
    if str(dst.buffer.scope()) != "ascend.ub":
        raise KernelError(f"T.fill of {dst.buffer.name!r} in "
                          f"{SHORT.get(str(dst.buffer.scope()), dst.buffer.scope())}: backend "
                          "'ascend' fills UB tiles (Duplicate on V) and clears accumulators "
                          "through the GEMM's init")
    args, count = _vector_operands(em, [dst], "T.fill")
    em.line(f"Duplicate({args[0]}, ({ctype(str(dst.buffer.dtype))})"
            f"{em.expr(call.operands['value'])}, {count});")


RULES = {
    "copy": rule_copy,
    "fill": rule_fill,
    "ascend.gemm_v0": cube.rule_gemm_v0,
    "ascend.mma": cube.rule_mma,
    "ascend.set_flag": rule_set_flag,
    "ascend.wait_flag": rule_wait_flag,
    "ascend.pipe_barrier": rule_pipe_barrier,
    "ascend.barrier_all": rule_barrier_all,
    "ascend.set_cross_flag": rule_set_cross_flag,
    "ascend.wait_cross_flag": rule_wait_cross_flag,
    "ascend.printf": rule_printf,
    "ascend.dump_tensor": rule_dump_tensor,
}
for _n, _i in ops.BINARY.items():
    RULES[f"ascend.tile.{_n}"] = _make_vector_rule(_n, _i, ("dst", "src0", "src1"))
for _n, _i in ops.UNARY.items():
    RULES[f"ascend.tile.{_n}"] = _make_vector_rule(_n, _i, ("dst", "src"))
for _n, _i in ops.SCALAR.items():
    RULES[f"ascend.tile.{_n}"] = _make_vector_rule(_n, _i, ("dst", "src"), "scalar")
RULES["ascend.tile.fill"] = _make_vector_rule("fill", "Duplicate", ("dst",), "value")
RULES["ascend.tile.cast"] = _make_vector_rule("cast", "Cast", ("dst", "src"))


# -- T.Parallel nests on the vector core ------------------------------------------------------
_VEC_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Max": "Max",
               "Min": "Min"}
_VEC_SCALAR = {"Add": "Adds", "Mul": "Muls", "Max": "Maxs", "Min": "Mins"}


def parallel_rule(em, loop) -> None:
    """A ``T.Parallel`` nest of elementwise stores on UB tiles becomes vector instructions:
    ``c[..] = a[..] op b[..]``, ``c[..] = a[..] op scalar``, ``c[..] = a[..]``,
    ``c[..] = scalar``."""
    loops, body = [], loop
    while isinstance(body, tirx.For):
        loops.append(body)
        body = body.body
    stores = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    extents = {lp.loop_var: lp.extent for lp in loops}
    for store in stores:
        if not isinstance(store, tirx.BufferStore):
            raise KernelError("a T.Parallel loop on Ascend must hold elementwise buffer stores "
                              "only (they become vector instructions)")
        dst = _parallel_region(store.buffer, store.indices, extents)
        value = store.value
        kind = type(value).__name__
        if kind in _VEC_BINARY and _is_load(value.a) and _is_load(value.b):
            regions = [dst, _parallel_region(value.a.source, value.a.indices, extents),
                       _parallel_region(value.b.source, value.b.indices, extents)]
            args, count = _vector_operands(em, regions, "T.Parallel")
            em.line(f"{_VEC_BINARY[kind]}({', '.join(args)}, {count});")
        elif kind in _VEC_SCALAR and (_is_load(value.a) != _is_load(value.b)):
            load, scalar = (value.a, value.b) if _is_load(value.a) else (value.b, value.a)
            regions = [dst, _parallel_region(load.source, load.indices, extents)]
            args, count = _vector_operands(em, regions, "T.Parallel")
            em.line(f"{_VEC_SCALAR[kind]}({', '.join(args)}, "
                    f"({ctype(str(store.buffer.dtype))}){em.expr(scalar)}, {count});")
        elif _is_load(value):
            regions = [dst, _parallel_region(value.source, value.indices, extents)]
            args, count = _vector_operands(em, regions, "T.Parallel")
            em.line(f"DataCopy({args[0]}, {args[1]}, {count});")
        elif not _has_load(value):
            args, count = _vector_operands(em, [dst], "T.Parallel")
            em.line(f"Duplicate({args[0]}, ({ctype(str(store.buffer.dtype))})"
                    f"{em.expr(value)}, {count});")
        else:
            raise KernelError(f"T.Parallel store {store.buffer.name}[...] = {value}: backend "
                              "'ascend' maps one vector instruction per store (a op b, a op "
                              "scalar, a copy or a fill); split the expression into steps "
                              "through UB temporaries or use T.tile.*")


def _is_load(e) -> bool:
    return type(e).__name__ == "TensorLoad"


def _has_load(e) -> bool:
    import tvm_ffi

    found = []
    tvm_ffi.structural_walk(e, (type(tirx.BufferLoad(tirx.decl_buffer((1,)), [0])),
                                lambda x: found.append(x)))
    return bool(found)


def _parallel_region(buffer, indices, extents) -> Region:
    if str(buffer.scope()) != "ascend.ub":
        raise KernelError(f"T.Parallel on Ascend computes on UB tiles; {buffer.name!r} is in "
                          f"{SHORT.get(str(buffer.scope()), buffer.scope())}")
    starts, exts, seen = [], [], []
    for index in indices:
        if isinstance(index, tirx.Var) and index in extents:
            starts.append(0)
            exts.append(extents[index])
            seen.append(index)
        else:
            starts.append(index)
            exts.append(1)
    if len(seen) != len(extents):
        raise KernelError(f"T.Parallel on Ascend needs every loop variable as a plain index of "
                          f"{buffer.name!r}")
    return Region(buffer, tuple(starts), tuple(exts))
