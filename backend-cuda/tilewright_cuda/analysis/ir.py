"""Facts read from the IR that every later layer asks: the block's thread loops and roles,
which buffers a statement touches or writes, whole regions, ``T.Parallel`` nests, and integer
expressions as Python."""

from __future__ import annotations

import tvm
import tvm_ffi
from tilewright.errors import KernelError
from tilewright.ir import decode
from tilewright.transform import rebuild_for
from tilewright.transform.threads import ThreadDependence, guarded_writes
from tvm import tirx

from .. import intrinsics, keys, ops

# -- loops ---------------------------------------------------------------------------------------


def block_loops(func) -> tuple[list, tirx.Stmt]:
    """The outermost ``blockIdx`` loops of ``func`` and the statement inside them."""
    loops, stmt = [], func.body
    while isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


def threads_of(func) -> int:
    """``T.Kernel``'s threads (2-D and 3-D flattened)."""
    loops, _ = block_loops(func)
    if not loops or keys.THREADS not in loops[0].annotations:
        raise KernelError("the CUDA backend needs a kernel written with 'with T.Kernel(...)'")
    x, y, z = (int(t) for t in loops[0].annotations[keys.THREADS])
    return x * y * z


def block_loop(body):
    """The block's ``threadIdx.x`` loop in ``body`` (not a T.ws role's), or None."""
    found = []
    tvm_ffi.structural_walk(body, (tirx.For, lambda s: found.append(s) if
                                   s.thread_binding is not None and
                                   str(s.thread_binding.thread_tag) == keys.THREAD_TAG else None),
                           order="pre")
    return found[0] if found else None


def find_thread(func):
    """The block's ``threadIdx.x`` loop of ``func``."""
    return block_loop(func.body)


def role_loops(node) -> list:
    """The thread loops of ``T.ws`` roles in ``node``, outermost first."""
    found = []
    tvm_ffi.structural_walk(node, (tirx.For, lambda s: found.append(s)
                                   if keys.ROLE in s.annotations else None), order="pre")
    return found


def map_roles(func, fn):
    """``func`` with each role loop's body replaced by ``fn(loop)``."""

    def visit(loop):
        if keys.ROLE not in loop.annotations:
            return loop
        return rebuild_for(loop, body=fn(loop))

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, visit)))


def is_role(stmt) -> bool:
    return isinstance(stmt, tirx.For) and keys.ROLE in stmt.annotations


def is_parallel(stmt) -> bool:
    return isinstance(stmt, tirx.For) and str(stmt.annotations.get(keys.LOOP, "")) == "parallel"


def parallel_nests(body) -> list:
    """The outermost ``T.Parallel`` nests: (loops of the nest, innermost body)."""
    found = []

    def visit(stmt):
        if is_parallel(stmt):
            loops, inner = [], stmt
            while is_parallel(inner):
                loops.append(inner)
                inner = inner.body
            found.append((loops, inner))
            return
        for child in children(stmt):
            visit(child)

    visit(body)
    return found


def children(stmt) -> list:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if hasattr(stmt, "body") and isinstance(stmt.body, tirx.Stmt):
        return [stmt.body]
    return []


def contains(node, target) -> bool:
    found = []
    tvm_ffi.structural_walk(node, (tirx.For, lambda s: found.append(s) if s.same_as(target)
                                   else None))
    return bool(found)


def nested(func_body, loop) -> bool:
    """Whether ``loop`` runs inside another loop of the block's program."""
    outer = []
    tvm_ffi.structural_walk(func_body, (tirx.For, lambda s: outer.append(s) if
                                        s.kind != tirx.ForKind.THREAD_BINDING and
                                        not s.same_as(loop) and contains(s.body, loop)
                                        else None))
    return bool(outer)


# -- statements ----------------------------------------------------------------------------------
def flat(stmts: list) -> list:
    """``stmts`` with nested sequences spliced in."""
    out = []
    for st in stmts:
        out += flat(list(st.seq)) if isinstance(st, tirx.SeqStmt) else [st]
    return out


def seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


# TVM's CallEffectKind of operators that neither read nor write state: kExprAnnotation, kPure
PURE_EFFECTS = (0, 1)


def pure_call(call) -> bool:
    """Whether ``call`` is a TVM operator that neither reads nor writes state (math, casts'
    helpers): not an external function, an intrinsic with effects or one of unknown effect."""
    kind = call.op.get_attr("TCallEffectKind") if isinstance(call.op, tvm.ir.Op) else None
    return kind is not None and int(kind) in PURE_EFFECTS


def uses(node, var) -> bool:
    found = []
    tvm_ffi.structural_walk(node, (tirx.Var, lambda v: found.append(v) if v.same_as(var)
                                   else None))
    return bool(found)


def _in_registers(buffer) -> bool:
    """Storage each thread holds its own of here: ``local*`` scopes (fragments too)."""
    return str(buffer.scope()).startswith("local")


def thread_varying(body, tx) -> list:
    """The per-thread buffers (``local*`` scopes: T.alloc_var,
    T.get_thread_binding's) under ``body`` whose value may differ between the threads of the
    block: a store whose value, index or enclosing conditions read ``tx`` or such a buffer,
    or whose value is an extern call (an atomic's previous value differs between threads even
    at one address)."""
    varying: list = []
    pending = guarded_writes(body, _in_registers, binds=False, tile_ops=False)
    changed = True
    while changed:
        changed, rest = False, []
        for write in pending:
            buffer, _, parts, guards = write
            if any(buffer.same_as(v) for v in varying):
                continue
            if _is_extern_call(parts[0]) or any(depends_on_thread(e, tx, varying)
                                                for e in (*parts, *guards)):
                varying.append(buffer)
                changed = True
            else:
                rest.append(write)
        pending = rest
    return varying


def thread_index_buffers(body) -> list:
    """The buffers ``T.get_thread_binding`` fills in ``body`` (before the threads are bound):
    the thread indices :func:`index_dependent` starts from."""
    found = []
    tvm_ffi.structural_walk(body, (tirx.Evaluate, lambda s: found.append(decode(s))))
    return [c.operands["dst"].buffer for c in found
            if c is not None and c.name == ops.THREAD_BINDING.name]


def index_dependent(body, indices):
    """A predicate: whether an expression under ``body`` may differ between the threads of
    the block because it reads the thread index (``indices``: T.get_thread_binding's
    variables, before the threads are bound), directly or through a ``Bind`` variable or a
    per-thread buffer (``local*`` scopes) computed from it, under a condition reading it, or
    from an atomic's previous value (different in every thread even at one address): the
    core's analysis (:class:`tilewright.transform.threads.ThreadDependence`) with this
    backend's registers."""
    return ThreadDependence(body, indices, _in_registers, tile_ops=False).reads


def _is_extern_call(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Call, lambda c: found.append(c) if isinstance(
        c.op, tvm.ir.Op) and c.op.name == "tirx.call_extern" else None))
    return bool(found)


def depends_on_thread(node, tx, varying) -> bool:
    """Whether ``node`` reads ``tx`` or a buffer of :func:`thread_varying`'s list."""
    if uses(node, tx):
        return True
    found = []
    tvm_ffi.structural_walk(node, (tvm.ir.TensorLoad, lambda ld: found.append(ld) if any(
        ld.source.same_as(v) for v in varying) else None))
    return bool(found)


def substitute(node, mapping: dict):
    def visit(v):
        for var, value in mapping.items():
            if v.same_as(var):
                return value
        return v

    return tvm_ffi.structural_map(node, (tirx.Var, visit))


# -- buffers -------------------------------------------------------------------------------------
def accessed(node) -> object:
    """The buffer of a load or store."""
    return node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer


def buffers_in(node) -> list:
    """The buffers ``node`` loads or stores, in order of first appearance."""
    found = []

    def add(x):
        buf = accessed(x)
        if not any(b.same_as(buf) for b in found):
            found.append(buf)

    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, add), (tirx.BufferStore, add)])
    return found


def stores(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda s: found.append(s.buffer)))
    return found


def loads_in(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda e: found.append(e.source)))
    return found


def touches(stmt, buffers) -> bool:
    """Whether ``stmt`` loads or stores one of ``buffers``."""
    return any(any(b.same_as(x) for x in buffers) for b in buffers_in(stmt))


def writes(stmt, buffers) -> bool:
    """Whether ``stmt`` may write one of ``buffers``: a store, or an element address passed
    to a call that writes through it (intrinsics.TABLE), or to one whose effects the table
    does not declare."""
    found = []

    def store(s):
        if any(s.buffer.same_as(b) for b in buffers):
            found.append(s)

    def call(c):
        entry = intrinsics.of(c)
        if entry is None:
            return
        effects = list(entry.args) + [""] * (len(c.args) - 1 - len(entry.args))
        for arg, effect in zip(c.args[1:], effects):
            writing = intrinsics.writes(effect) or \
                (not entry.args and intrinsics.is_address_of(arg))
            if writing and intrinsics.is_address_of(arg) and \
                    isinstance(arg.args[0], tvm.ir.TensorLoad) and \
                    any(arg.args[0].source.same_as(b) for b in buffers):
                found.append(arg)

    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, store), (tvm.ir.Call, call)])
    return bool(found)


def full(region) -> bool:
    """Whether a region covers its whole (constant-shaped) buffer."""
    return all(isinstance(s, tirx.IntImm) and int(s.value) == 0 for s in region.starts) and \
        all(isinstance(e, tirx.IntImm) and isinstance(d, tirx.IntImm) and
            int(e.value) == int(d.value) for e, d in zip(region.extents, region.buffer.shape))


def const(e) -> int | None:
    """The value of a constant integer (a Python int or an ``IntImm``), else None."""
    if isinstance(e, int):
        return e
    return int(e.value) if isinstance(e, tirx.IntImm) else None


# -- tensors' layouts ---------------------------------------------------------------------------
def unit_inner(buffer) -> bool:
    """Whether the elements of ``buffer``'s innermost dimension are adjacent in memory: a
    contiguous tensor or tile, or a ``T.StridedTensor`` whose last stride is 1."""
    strides = list(buffer.strides or ())
    return not strides or const(strides[-1]) == 1


def row_step(buffer):
    """The elements from one row of ``buffer`` (its innermost dimension) to the next: the
    innermost extent of a contiguous buffer, a ``T.StridedTensor``'s second-last stride. The
    vector and TMA paths prove their alignment with it, not with the extent."""
    strides = list(buffer.strides or ())
    return strides[-2] if len(strides) > 1 else buffer.shape[-1]


# -- expressions as Python -----------------------------------------------------------------------
class NotPython(Exception):
    """An expression :func:`py_expr` cannot write as Python."""


_PY_BINARY = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//",
              tirx.FloorMod: "%", tirx.EQ: "==", tirx.NE: "!=", tirx.LT: "<", tirx.LE: "<=",
              tirx.GT: ">", tirx.GE: ">=", tirx.And: "and", tirx.Or: "or"}


def py_expr(e, names=None, truncating: bool = True) -> str:
    """Python source for an integer TIR expression. Variables are written by their names, or
    by the name ``names`` (a list of ``(var, name)``) gives them, any other one being
    :class:`NotPython` then. TIR's truncating ``Div``/``Mod`` become Python's floor ``//`` and
    ``%``, the same for non-negative operands (shape symbols); with ``truncating=False`` they
    are NotPython instead."""
    def py(x):
        return py_expr(x, names, truncating)

    if isinstance(e, int):
        return str(e)
    if isinstance(e, tirx.IntImm):
        return str(int(e.value))
    if isinstance(e, tirx.Var):
        if names is None:
            return str(e.name)
        name = next((n for v, n in names if v.same_as(e)), None)
        if name is None:
            raise NotPython(f"the variable {e.name}")
        return name
    if isinstance(e, tirx.Cast) and "int" in str(e.dtype):
        return py(e.value)
    op = _PY_BINARY.get(type(e))
    if op is None and truncating and isinstance(e, (tirx.Div, tirx.Mod)):
        op = "//" if isinstance(e, tirx.Div) else "%"
    if op is not None:
        return f"({py(e.a)} {op} {py(e.b)})"
    if isinstance(e, (tirx.Min, tirx.Max)):
        return f"{type(e).__name__.lower()}({py(e.a)}, {py(e.b)})"
    if isinstance(e, tirx.Select):
        return f"({py(e.true_value)} if {py(e.condition)} else {py(e.false_value)})"
    if isinstance(e, tirx.Not):
        return f"(not {py(e.a)})"
    raise NotPython(type(e).__name__)


# -- launch symbols ------------------------------------------------------------------------------


def launch_symbols(params) -> dict:
    """Where the launcher finds each symbol when the kernel is called, from the kernel's
    parameters ``params``: a shape symbol that is a whole extent of a tensor parameter as
    ``{name: [parameter, dimension]}``, a stride symbol of a ``T.StridedTensor`` parameter as
    ``{name: [parameter, dimension, 1]}`` (in elements), an integer scalar parameter (a grid
    of ``T.ceildiv(max_seqlen, 128)`` blocks) as ``{name: [parameter]}``. A symbol found only
    inside an extent (``2 * M``) or nowhere is unknown at launch."""
    found = {}
    for index, p in enumerate(params):
        if tirx.buffer.is_buffer_var(p):
            for dim, extent in enumerate(p.shape):
                if isinstance(extent, tirx.Var):
                    found.setdefault(str(extent.name), [index, dim])
            for dim, stride in enumerate(p.strides or ()):
                if isinstance(stride, tirx.Var):
                    found.setdefault(str(stride.name), [index, dim, 1])
        elif "int" in str(p.ty):
            found.setdefault(str(p.name), [index])
    return found


def unknown_at_launch(exprs, params) -> list[str]:
    """The names of the variables of ``exprs`` that :func:`launch_symbols` of ``params`` does
    not find, in order of first use."""
    known, missing = launch_symbols(params), []
    for expr in exprs:
        tvm_ffi.structural_walk(expr, (tirx.Var, lambda v: missing.append(str(v.name))
                                       if str(v.name) not in known and
                                       str(v.name) not in missing else None))
    return missing
