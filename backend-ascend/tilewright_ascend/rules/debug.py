"""Debugging: ``printf``, ``DumpTensor`` and device assertions."""

from __future__ import annotations

from tilewright.errors import KernelError
from tvm import tirx

from ..facts import ops
from ..facts.dtypes import INTEGERS
from .regions import offset_of, tensor, view
from .table import rule


def _c_string(text: str) -> str:
    return text.encode("unicode_escape").decode().replace('"', '\\"')


@rule(ops.PRINTF.name)
def rule_printf(em, call) -> None:
    args = [em.expr(a) for a in call.operands["args"].args]
    fmt = _c_string(call.attrs["format"])
    em.line(f'AscendC::printf("{fmt}"{"".join(", " + a for a in args)});')


def _dump_tensor(em, src: str, desc, size, dims=()) -> None:
    """``DumpTensor`` of ``size`` elements from ``src``, laid out by a ``ShapeInfo`` of
    ``dims`` when there are any."""
    if dims:
        em.line(f"{{ uint32_t shp[] = {{{', '.join(map(str, dims))}}}; "
                f"ShapeInfo si({len(dims)}, shp); DumpTensor({src}, {desc}, {size}, si); }}")
    else:
        em.line(f"DumpTensor({src}, {desc}, {size});")


@rule(ops.DUMP_TENSOR.name)
def rule_dump_tensor(em, call) -> None:
    shape = call.attrs["shape"]
    _dump_tensor(em, tensor(em, call.operands["src"]), call.attrs["desc"],
                 call.attrs["dump_size"], shape.split(",") if shape else ())


# T.print's conversion and argument type per kind of dtype. AscendC::printf stores each scalar
# argument in a 64-bit slot on 2201 and 3510 alike (set_scalar_param_impl in impl/utils/debug/
# npu_arch_2201/ and npu_arch_3510/asc_aicore_printf_utils.h: signed types as int64_t, unsigned
# ones and bool as uint64_t, half/float/bfloat16_t as float; 2201: "printf unsupport double
# type"), and the kit documents the conversions for them (docs/zh/api/SIMD-API/基础API/
# 调试接口/异常检测/assert.md, its fmt: "%d / %i：输出十进制数，支持打印的数据类型：bool、int8_t、
# int16_t、int32_t、int64_t", "%u：输出unsigned类型数据，支持打印的数据类型：bool、uint8_t、
# uint16_t、uint32_t、uint64_t", "%f：输出实数，支持打印的数据类型：float、half").
_PRINT_FLOAT = ("%f", "float")
_PRINT_SIGNED = ("%d", "int64_t")
_PRINT_UNSIGNED = ("%u", "uint64_t")


def _print_conversion(dtype: str) -> tuple[str, str]:
    if dtype.startswith(("float", "bfloat")):
        return _PRINT_FLOAT
    bits_signed = INTEGERS.get(dtype)
    if bits_signed is None and dtype != "bool":
        raise KernelError(f"T.print: backend 'ascend' prints float, integer and bool values, "
                          f"not {dtype}")
    return _PRINT_SIGNED if bits_signed and bits_signed[1] else _PRINT_UNSIGNED


@rule("print_value")
def rule_print_value(em, call):
    value = call.operands["value"]
    dtype = str(value.ty)
    fmt, arg_type = _print_conversion(dtype)
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{fmt} ({dtype})\\n", '
            f"TW_CAST({arg_type}, {em.expr(value)}));")


@rule("print_tile")
def rule_print_tile(em, call):
    """A UB tile through DumpTensor, one row a line (a ShapeInfo of rows x row stride). Rows
    padded to their stride (UB rows are 32-byte aligned) print their padding too, and the
    header says so; a region not starting at column 0, or whose rows are further apart than
    the buffer's rows, prints as one flat list."""
    region = call.operands["buf"]
    if str(region.buffer.scope()) != "ascend.ub":
        raise KernelError("T.print of a tile: backend 'ascend' prints UB tiles (DumpTensor)")
    rows, cols, stride = view(em, region)
    first = region.starts[-1]
    # rows of the buffer's own, from their first column: their padding lies inside the buffer
    whole_rows = rows > 1 and isinstance(first, (int, tirx.IntImm)) and int(first) == 0 and \
        stride == int(region.buffer.shape[-1])
    padded = f", rows padded to {stride}" if whole_rows and stride != cols else ""
    msg = call.attrs["msg"]
    em.line(f'AscendC::printf("{_c_string(msg)}{": " if msg else ""}{region.buffer.name} '
            f'{rows}x{cols} {region.buffer.dtype}{padded}\\n");')
    src = f"{em.buf(region.buffer)}[{offset_of(em, region)}]"
    if whole_rows:
        _dump_tensor(em, src, 0, rows * stride, (rows, stride))
    else:
        _dump_tensor(em, src, 0, stride * (rows - 1) + cols)


@rule("device_assert")
def rule_device_assert(em, call):
    em.line(f'TW_DEVICE_ASSERT({em.expr(call.operands["cond"])}, '
            f'"{_c_string(call.attrs["msg"])}");')
