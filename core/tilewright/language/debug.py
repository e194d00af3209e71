"""Debugging from inside a kernel: ``T.print`` and ``T.device_assert``."""

from __future__ import annotations

from ..errors import kernel_error, user_location
from ..ir import make_call
from . import builder as B
from .buffer import BufferSlice, TileBuffer, dtype_of, region_of, resolve, to_expr


def _message(msg, what: str) -> str:
    """A message argument: a string (a number or an expression there would be printed as its
    Python text, or fail in the backend's printf)."""
    if not isinstance(msg, str):
        raise kernel_error(f"{what}'s message must be a string, got {type(msg).__name__} "
                           f"{msg!r:.40}")
    return msg


def print(obj, msg: str = "", warp_group_id: int = 0, warp_id: int = 0):  # noqa: A001
    """Print a buffer (once per block) or a scalar expression, tagged with the block index
    and, inside ``T.Parallel``, the iteration."""
    builder = B.require_kernel("T.print")
    msg = _message(msg, "T.print")
    if isinstance(obj, (TileBuffer, BufferSlice)):
        if builder.enclosing("parallel") is not None:
            raise kernel_error("T.print of a whole buffer must be outside T.Parallel loops")
        region = resolve(region_of(obj, "T.print"), None, "T.print")
        builder.emit(make_call("print_tile", {"buf": region}, {"msg": msg}, span=B.here()))
        return
    value = to_expr(obj)
    if dtype_of(value) is None:
        raise kernel_error(f"T.print cannot print a {type(obj).__name__}")
    builder.emit(make_call("print_value", {"value": value}, {"msg": msg}, span=B.here()))


def device_assert(cond, msg: str = ""):
    """Stop the kernel with an error naming this line when ``cond`` is false."""
    builder = B.require_kernel("T.device_assert")
    msg = _message(msg, "T.device_assert")
    cond = to_expr(cond)
    if dtype_of(cond) != "bool":
        raise kernel_error(f"T.device_assert needs a boolean condition, got {dtype_of(cond)}")
    where = user_location()
    text = f"{where}: device_assert failed" + (f": {msg}" if msg else "")
    builder.emit(make_call("device_assert", {"cond": cond}, {"msg": text}, span=B.here()))
