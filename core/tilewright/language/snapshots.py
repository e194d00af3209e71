"""Values a kernel names with ``x = <expression reading a buffer>``.

Python binds the name to the expression, but the kernel author means the value at that line,
as in TileLang and TVM script, where the assignment is a let binding: in

    v = val[i]
    val[i] = val[p]
    val[p] = v

``v`` is the old ``val[i]``. The builder binds such a value to a variable where it is named
(:meth:`~.builder.Builder.snapshot`), and :func:`settle` keeps that binding only where the
buffer it reads is written before the variable's last use. Everywhere else (nearly every
kernel) the expression goes back in place of the variable, so the IR is what it would be
without the binding and the backends' analyses see the indices they always saw.
"""

from __future__ import annotations

from collections import Counter

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import KernelError, span_location
from ..ir.ops import SYNC_GRID
from ..ir.schema import decode, tile_ops_in, writes_memory


def reads_memory(expr) -> bool:
    """Whether ``expr`` loads from a buffer."""
    return bool(_buffers_read(expr))


def settle(body: tirx.Stmt, snapshots: set) -> tirx.Stmt:
    """``body`` with each binding of a variable in ``snapshots`` kept only where a buffer its
    value reads is written between the binding and the variable's last use, in the statements
    that follow the binding in its block; other bindings are substituted away."""
    if not snapshots:
        return body
    uses = _uses(body, snapshots)
    binds: dict = {}
    keep: set = set()

    followers: dict = {}  # a binding's variable -> the statements after it in its block

    def block(seq):
        stmts = list(seq.seq)
        for k, stmt in enumerate(stmts):
            if isinstance(stmt, tirx.Bind) and stmt.var in snapshots:
                followers[stmt.var] = stmts[k + 1:]

    def bind(stmt):
        if stmt.var in snapshots:
            binds[stmt.var] = stmt

    tvm_ffi.structural_walk(body, [(tirx.SeqStmt, block), (tirx.Bind, bind)])
    for var, stmt in binds.items():
        rest = followers.get(var, [])  # none: the binding is a whole body (an if's, say)
        if writes_memory(stmt.value):
            _check_in_scope(stmt, rest, uses)
            keep.add(var)  # runs here, once, used or not
        elif _needed(stmt, rest, uses):
            keep.add(var)
    binds = {var: stmt.value for var, stmt in binds.items()}
    inline = {var: value for var, value in binds.items() if var not in keep}
    if not inline:
        return body
    resolved: dict = {}

    def substitute(node):
        return tvm_ffi.structural_map(node, (tirx.Var, lambda v: value_of(v) if v in inline
                                             else v))

    def value_of(var):
        if var not in resolved:
            resolved[var] = substitute(inline[var])
        return resolved[var]

    def drop(stmt):
        if isinstance(stmt, tirx.SeqStmt):
            kept = [s for s in stmt.seq if not (isinstance(s, tirx.Bind) and s.var in inline)]
            if len(kept) == len(stmt.seq):
                return stmt
            if not kept:
                return tirx.Evaluate(tirx.IntImm("int32", 0))
            return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept, span=stmt.span)
        if isinstance(stmt, tirx.Bind) and stmt.var in inline:
            return tirx.Evaluate(tirx.IntImm("int32", 0))
        return stmt

    return substitute(tvm_ffi.structural_map(body, ((tirx.SeqStmt, tirx.Bind), drop),
                                             order="pre"))


def _uses(node, variables: set) -> Counter:
    """How often each of ``variables`` occurs in ``node``, its bindings not counted."""
    count: Counter = Counter()
    tvm_ffi.structural_walk(node, (tirx.Var, lambda v: count.update([v]) if v in variables
                                   else None))
    tvm_ffi.structural_walk(node, (tirx.Bind, lambda b: count.subtract([b.var])
                                   if b.var in variables else None))
    return count


def _check_in_scope(bind: tirx.Bind, rest: list, uses: Counter) -> None:
    """A value that writes memory (an atomic returning the previous value) is bound where it
    is named; a use of its name after the block it was computed in (an ``if``'s or a loop's
    body) has no value to read: a KernelError at the binding."""
    if sum(_uses(s, {bind.var})[bind.var] for s in rest) != uses[bind.var]:
        raise KernelError(
            f"'{bind.var.name}' names the value of an atomic (or an external call) computed "
            "inside a block (an if's or a loop's body) and is used after that block: compute "
            "it before the block, or use it inside", span_location(bind.span))


def _needed(bind: tirx.Bind, rest: list, uses: Counter) -> bool:
    """Whether ``bind`` must stay: every use of its variable is in ``rest`` and a buffer its
    value reads is written before the last of them."""
    var = bind.var
    per_stmt = [_uses(s, {var})[var] for s in rest]
    if sum(per_stmt) == 0 or sum(per_stmt) != uses[var]:
        return False  # unused, or used after its block too (a Python name outlives a block)
    last = max(k for k, n in enumerate(per_stmt) if n)
    read = _buffers_read(bind.value)
    between = rest[:last + 1]
    if isinstance(rest[last], tirx.BufferStore):
        between = rest[:last]  # a store evaluates its value, then writes
    if any(_writes(s) & read for s in between):
        return True
    # after a grid barrier other blocks' writes to global memory are visible
    return any(str(b.scope()) == "global" for b in read) and \
        any(c.name == SYNC_GRID.name for s in between for c in tile_ops_in(s))


def _buffers_read(expr) -> set:
    found = set()
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda ld: found.add(ld.source)))
    return found


def _writes(stmt) -> set:
    """The buffers ``stmt`` may write: its stores, the regions its tile ops write, and every
    buffer another call statement mentions (an intrinsic's effects are not known here)."""
    written = set()
    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, lambda st: written.add(st.buffer)))

    def call(evaluate):
        op = decode(evaluate)
        if op is not None:
            written.update(region.buffer for region in op.regions("write"))
        elif isinstance(evaluate.value, tvm.ir.Call):
            tvm_ffi.structural_walk(evaluate.value, (tirx.Buffer, lambda b: written.add(b)))

    tvm_ffi.structural_walk(stmt, (tirx.Evaluate, call))
    return written
