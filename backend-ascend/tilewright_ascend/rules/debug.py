"""Debugging: ``printf``, ``DumpTensor`` and device assertions."""

from __future__ import annotations

from tilewright.errors import KernelError

from ..facts import ops
from .regions import offset_of, tensor, view
from .table import rule


def _c_string(text: str) -> str:
    return text.encode("unicode_escape").decode().replace('"', '\\"')


@rule(ops.PRINTF.name)
def rule_printf(em, call) -> None:
    args = [em.expr(a) for a in call.operands["args"].args]
    fmt = _c_string(call.attrs["format"])
    em.line(f'AscendC::printf("{fmt}"{"".join(", " + a for a in args)});')


@rule(ops.DUMP_TENSOR.name)
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


@rule("print_value")
def rule_print_value(em, call):
    value = call.operands["value"]
    dtype = str(value.ty)
    fmt = "%f" if dtype.startswith(("float", "bfloat")) else "%d"
    # %f takes a float: printf on 2201 refuses double (asc_aicore_printf_utils.h)
    arg = f"(float){em.expr(value)}" if fmt == "%f" else f"(int32_t){em.expr(value)}"
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{fmt} ({dtype})\\n", '
            f"{arg});")


@rule("print_tile")
def rule_print_tile(em, call):
    region = call.operands["buf"]
    if str(region.buffer.scope()) != "ascend.ub":
        raise KernelError("T.print of a tile: backend 'ascend' prints UB tiles (DumpTensor)")
    rows, cols, stride = view(em, region)
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{region.buffer.name} '
            f'{rows}x{cols} {region.buffer.dtype}\\n");')
    em.line(f"DumpTensor({em.buf(region.buffer)}[{offset_of(em, region)}], 0, "
            f"{stride * (rows - 1) + cols});")


@rule("device_assert")
def rule_device_assert(em, call):
    em.line(f'TW_DEVICE_ASSERT({em.expr(call.operands["cond"])}, '
            f'"{_c_string(call.attrs["msg"])}");')
