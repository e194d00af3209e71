"""TVM script's blocks as TileLang kernels use them: ``with T.sblock("name"):`` a lexical
scope, with ``T.reads(...)`` / ``T.writes(...)`` hints of its accesses.

A block here has no iteration variables: its body runs where it stands, as if the ``with``
were not there, and ``T.reads`` / ``T.writes`` (regions a schedule would read) are checked and
dropped. What a block gives is scope: ``T.annotate_safe_value`` inside one applies to the
accesses of that block and the blocks nested in it, the innermost block's value winning for
a tensor (TileLang's ``test_tilelang_copy_oob_safe_value_lexical_scope``). Such a block is an
``AttrStmt`` (:data:`~tilewright.ir.SAFE_VALUES_KEY`, its values the node) that
:mod:`tilewright.transform.safe_memory` reads and removes before any backend sees the kernel;
a block without one leaves no trace in the IR.

The rest of TVM script's block language (iteration variables ``T.axis.*``, ``T.where``,
``T.init``, ``T.sblock_attr``, an ``exec_scope``) has no meaning in a tile kernel and is
refused at the user's line.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import kernel_error
from ..ir import SAFE_VALUES_KEY
from . import builder as B
from .buffer import region_of

SBLOCK = "sblock"  # the builder frame of a T.sblock; its info "safe_values": {name: value}


class sblock:  # noqa: N801 - TVM script's name
    """``with T.sblock("name"):`` (the name optional): the statements of its body where the
    block stands, in a scope of their own for ``T.annotate_safe_value`` (see the module).
    ``no_realize`` is accepted (a block without iteration variables has nothing to
    realize); ``exec_scope`` (TVM's execution scope of a block) is refused."""

    def __init__(self, name: str = "", no_realize: bool = False, exec_scope: str = ""):
        if not isinstance(name, str):
            raise kernel_error(f"T.sblock takes the block's name as a string, got {name!r}")
        if exec_scope:
            raise kernel_error(f"T.sblock: exec_scope={exec_scope!r} has no meaning here: a "
                               "block is a lexical scope of the kernel's block program; leave "
                               "it out")
        self.name = name

    def __enter__(self):
        self._span = B.here()
        self._frame = B.current("T.sblock").open(SBLOCK, name=self.name, safe_values={})
        return None

    def __exit__(self, exc_type, exc, tb):
        builder = B.current("T.sblock")
        body = builder.close(self._frame)
        if exc_type is not None:
            return False
        values = self._frame.info["safe_values"]
        if values:
            builder.emit(tirx.AttrStmt(values, SAFE_VALUES_KEY, tirx.const(0, "int32"), body,
                                       span=self._span))
        else:
            for stmt in self._frame.stmts:
                builder.emit(stmt)
        return False


def safe_value_scope(builder) -> dict | None:
    """The safe values of the innermost ``T.sblock`` inside the kernel enclosing the current
    statement, for ``T.annotate_safe_value`` to add to; None outside such a block (the
    kernel's own values apply)."""
    frame = builder.enclosing(SBLOCK, "kernel")
    return frame.info["safe_values"] if frame is not None and frame.kind == SBLOCK else None


def _hints(what: str, regions) -> None:
    builder = B.current(what)
    if builder.frames[-1].kind != SBLOCK:
        raise kernel_error(f"{what} names the regions a T.sblock accesses: write it directly "
                           "inside 'with T.sblock(...)'")
    for region in regions:
        for one in region if isinstance(region, (list, tuple)) else (region,):
            region_of(one, what)


def reads(*regions) -> None:
    """``T.reads(A[0:64, k:k + 32], B)``: the regions the enclosing ``T.sblock`` reads, a
    hint (checked to name buffers, slices or elements, then dropped: the compiler finds a
    block's accesses itself); ``T.reads()`` names none."""
    _hints("T.reads", regions)


def writes(*regions) -> None:
    """``T.writes(C[0:64, 0:64])``: the regions the enclosing ``T.sblock`` writes, a hint as
    :func:`reads`'s."""
    _hints("T.writes", regions)


def _refused(name: str, why: str):
    def refuse(*args, **kwargs):
        raise kernel_error(f"{name} {why}")

    refuse.__name__ = name.removeprefix("T.").replace(".", "_")
    refuse.__doc__ = f"TVM script's ``{name}``: refused at the user's line ({why})."
    return refuse


_NO_ITERATION = ("(a block's iteration variable) is not supported: a T.sblock here is a "
                 "lexical scope without iteration variables; use the loop's variable itself")


class axis:  # noqa: N801 - TVM script's name
    """TVM script's ``T.axis.*`` (a block's iteration variables): each refused at the user's
    line, since a block here has none."""

    spatial = S = staticmethod(_refused("T.axis.spatial", _NO_ITERATION))
    reduce = R = staticmethod(_refused("T.axis.reduce", _NO_ITERATION))
    scan = staticmethod(_refused("T.axis.scan", _NO_ITERATION))
    opaque = staticmethod(_refused("T.axis.opaque", _NO_ITERATION))
    remap = staticmethod(_refused("T.axis.remap", _NO_ITERATION))


sblock_attr = _refused("T.sblock_attr", "is not supported: a block here keeps no attributes "
                       "(T.annotate_safe_value, T.annotate_layout and the other T.annotate_* "
                       "functions say what a kernel's annotations say)")
block_attr = _refused("T.block_attr", "is not supported: a block here keeps no attributes "
                      "(T.annotate_safe_value, T.annotate_layout and the other T.annotate_* "
                      "functions say what a kernel's annotations say)")
where = _refused("T.where", "(a block's predicate) is not supported: guard the statements "
                 "with an 'if'")
init = _refused("T.init", "(a reduction block's initialisation) is not supported: a block "
                "here has no reduction variables; initialise before the loop (T.clear, "
                "T.fill)")
