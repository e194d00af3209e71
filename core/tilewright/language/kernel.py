"""Kernel definitions: ``T.prim_func``, ``T.Tensor``, ``T.const``, ``T.dynamic``, ``T.empty``,
``T.macro`` and the allocation primitives."""

from __future__ import annotations

import inspect
import math
import numbers
import re
from dataclasses import dataclass

import tvm
from tvm import tirx

from ..errors import KernelError, bind_call, kernel_error
from ..ir import value_dtype
from . import builder as B
from .buffer import IterationVar, TileBuffer, VarHandle, as_int, declare, to_expr
from .dtypes import DTYPES, SUB_BYTE, DType, normalize_dtype
from .fragments import widen_fragments
from .frames import Helpers
from .rewrite import rewrite


@dataclass(frozen=True)
class TensorSpec:
    """``T.Tensor(shape, dtype)``: the declared type of a global tensor; ``strides`` (one an
    axis, counted in elements) for a ``T.StridedTensor``, None for a contiguous one."""

    shape: tuple
    dtype: str
    strides: tuple | None = None

    def __class_getitem__(cls, item):
        shape, dtype = item
        return _tensor(shape, dtype)


def _scalar_elements(dtype, what: str) -> None:
    """Tensors and tiles hold scalars: a vector dtype (``float32x2``) is refused for them (a
    vector lives in a ``T.alloc_var`` / ``T.alloc_local``; torch has no vector tensors)."""
    dtype = DType(dtype)
    if dtype.lanes > 1:
        raise kernel_error(f"{what} of {dtype}: tensors and tiles hold scalars; declare them of "
                           f"{dtype.scalar} with the {dtype.lanes} lanes as a last dimension "
                           f"(read a vector with T.ldg{dtype.bits * dtype.lanes} or slices), "
                           "or keep the vector in a T.alloc_var")


def _tensor(shape, dtype="float32", data=None):
    """Declare a global tensor parameter of ``shape`` and ``dtype``; with ``data`` (another
    buffer's ``.data``), a view of that buffer's memory with this shape and dtype, as in
    TileLang: ``T.Tensor((K * K * C, F), dtype, kernel.data)`` reads a 4-D tensor as a matrix
    (a view of a tile stays in the tile's memory)."""
    shape = _integers(shape, "T.Tensor shape", "dimension")
    _scalar_elements(dtype, "T.Tensor")
    spec = TensorSpec(shape, normalize_dtype(dtype))
    return spec if data is None else _view(spec, data)


def _integers(values, what: str, item: str) -> tuple:
    """``values`` (a tuple, a list or one value) as a tuple of ints and integer expressions;
    a float among them is an error naming ``what`` and the ``item`` it is."""
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    for n, value in enumerate(values):
        if isinstance(value, float) or str(getattr(value, "ty", "int")).startswith("float"):
            raise kernel_error(f"{what} {values}: {item} {n} is the float {value}; they are "
                               "integers (use // rather than /)")
        if isinstance(value, bool) or not isinstance(value, (numbers.Integral, tvm.ir.Expr)):
            raise kernel_error(f"{what} {values}: {item} {n} is {value!r}; they are ints, "
                               "T.dynamic symbols or integer expressions of them")
    return tuple(as_int(int(v) if isinstance(v, numbers.Integral) else v) for v in values)


def _strided_tensor(shape, strides, dtype="float32", scope=None):
    """Declare a global tensor parameter of ``shape`` and ``dtype`` whose elements lie
    ``strides`` apart (one an axis, counted in elements, as ``torch.Tensor.stride()`` counts
    them): a row of a wider matrix, a transposed view, every other row. A stride is a
    constant, which the argument's stride must equal, or a ``T.dynamic`` symbol, read from the
    argument at every call like a shape symbol. A float4 tensor's strides count values (two a
    byte): its last stride is 1, and the others are twice the packed tensor's. ``scope`` is
    TileLang's keyword; a kernel's tensors are global."""
    if scope not in (None, "global"):
        raise kernel_error(f"T.StridedTensor(..., scope={scope!r}): a strided tensor is a "
                           "kernel's global tensor parameter; tiles are contiguous")
    shape = _integers(shape, "T.StridedTensor shape", "dimension")
    strides = _integers(strides, "T.StridedTensor strides", "stride")
    if len(strides) != len(shape):
        raise kernel_error(f"T.StridedTensor: shape {shape} has {len(shape)} dimension(s) but "
                           f"strides {strides} give {len(strides)}; give one stride an axis")
    for axis, stride in enumerate(strides):
        if isinstance(stride, int) and stride < 0:
            raise kernel_error(f"T.StridedTensor strides {strides}: stride {axis} is negative; "
                               "torch tensors have strides of 0 or more")
    _scalar_elements(dtype, "T.StridedTensor")
    dtype = normalize_dtype(dtype)
    per_byte = 8 // packed_bits(dtype) if packed_bits(dtype) else 1
    if per_byte > 1:
        last = strides[-1] if strides else 1
        odd = [s for s in strides[:-1] if isinstance(s, int) and s % per_byte]
        if not isinstance(last, int) or last != 1 or odd:
            raise kernel_error(
                f"T.StridedTensor of {dtype} with strides {strides}: its values are packed "
                f"{per_byte} a byte along the last axis, so the last stride must be 1 and the "
                f"others multiples of {per_byte} (a byte's worth of values)")
    return TensorSpec(shape, dtype, strides)


class _TensorType:
    """``T.Tensor(shape, dtype[, data])`` and TileLang's ``T.Tensor[shape, dtype]``."""

    __call__ = staticmethod(_tensor)
    __doc__ = _tensor.__doc__

    def __getitem__(self, item):
        if not isinstance(item, tuple) or len(item) != 2:
            raise kernel_error("T.Tensor[shape, dtype] takes a shape and a dtype")
        return _tensor(*item)


Tensor = _TensorType()


class _StridedTensorType:
    """``T.StridedTensor(shape, strides, dtype)`` and ``T.StridedTensor[shape, strides,
    dtype]``."""

    __call__ = staticmethod(_strided_tensor)
    __doc__ = _strided_tensor.__doc__

    def __getitem__(self, item):
        if not isinstance(item, tuple) or len(item) != 3:
            raise kernel_error("T.StridedTensor[shape, strides, dtype] takes a shape, strides "
                               "and a dtype")
        return _strided_tensor(*item)


StridedTensor = _StridedTensorType()


def _view(spec: TensorSpec, data) -> TileBuffer:
    """A buffer over the memory whose ``.data`` is ``data`` (a tensor's or a tile's)."""
    base = getattr(data, "args", [None])[0] if isinstance(getattr(data, "op", None), tvm.ir.Op) \
        and data.op.name == "tirx.buffer_data" else None
    if base is None:
        raise kernel_error("T.Tensor(shape, dtype, data): data must be the .data of a buffer "
                           f"(a tensor or a tile), got {data!r:.60}")
    if len(base.strides):
        raise kernel_error(f"T.Tensor(shape, dtype, data) over {base.name}.data: "
                           f"{base.name!r} is a T.StridedTensor, whose elements are not "
                           "consecutive in its memory; index or slice it instead of viewing it")
    old, new = _elements(base.shape, base.dtype), _elements(spec.shape, spec.dtype)
    if old is not None and new is not None and new > old:
        raise kernel_error(f"T.Tensor{spec.shape} of {spec.dtype} over {base.name}.data needs "
                           f"{new} bytes but {base.name} {tuple(as_int(s) for s in base.shape)} "
                           f"of {base.dtype} has {old}")
    builder = B.current("T.Tensor(shape, dtype, data)")
    if str(base.scope()) not in ("global", "") and not builder.in_kernel():
        raise kernel_error(f"a view of tile {base.name!r} must be inside 'with T.Kernel'")
    view = declare(f"{base.name}_view", spec.shape, spec.dtype, str(base.scope()) or "global")
    builder.emit(tirx.DeclBuffer(view, data=data, span=B.here()))
    return TileBuffer(view)


def make_tensor(ptr, shape, dtype="float32", strides=None) -> TileBuffer:
    """A global tensor of ``shape`` and ``dtype`` at the address ``ptr``: an element of a
    ``T.ptr`` tensor (TileLang's table of ``data_ptr()`` values, int64) or another integer
    expression; the address is read once, where ``T.make_tensor`` stands."""
    if strides is not None:
        raise kernel_error("T.make_tensor(..., strides=...) is not supported: the tensor is "
                           "contiguous; give its shape")
    if isinstance(ptr, int):  # a compile-time number (an eager argument not annotated T.ptr)
        raise kernel_error(f"T.make_tensor takes an address given at run time (a T.ptr "
                           f"parameter, an element of a T.ptr tensor), got the Python int "
                           f"{ptr}: annotate the parameter 'NAME: T.ptr'")
    addr = to_expr(ptr)
    kind = value_dtype(addr)  # a T.ptr parameter is an address: "handle"
    if kind not in ("int64", "uint64", "handle"):
        raise kernel_error(f"T.make_tensor takes an address (an element of a T.ptr tensor, "
                           f"int64), got a {kind} value")
    spec = _tensor(shape, dtype)
    builder = B.current("T.make_tensor")
    value = addr if kind == "handle" else tirx.reinterpret("handle", addr)
    var = tirx.Var("ptr", value.ty)
    builder.emit(tirx.Bind(var, value, span=B.here()))
    tensor = declare("tensor", spec.shape, spec.dtype, "global")
    builder.emit(tirx.DeclBuffer(tensor, data=var, span=B.here()))
    return TileBuffer(tensor)


def match_buffer(param, shape, dtype="float32", data=None, strides=None, elem_offset=None,
                 scope="global", align=-1, offset_factor=0, buffer_type="default",
                 axis_separators=None) -> TileBuffer:
    """TileLang's (and TVM script's) ``A = T.match_buffer(A_ptr, shape, dtype)``: the
    ``T.handle`` / ``T.ptr`` parameter ``A_ptr`` becomes a tensor parameter of that shape and
    dtype, as if annotated ``T.Tensor`` (``T.const`` symbols in the shape are read from the
    tensor passed); any other address is read as ``T.make_tensor`` reads it. The keywords
    after ``strides`` describe the buffer TVM would match and change nothing here."""
    if isinstance(param, TileBuffer):
        raise kernel_error(f"T.match_buffer takes a T.handle / T.ptr parameter, got tensor "
                           f"{param.name!r}: it is already a tensor")
    if isinstance(param, int):
        raise kernel_error(f"T.match_buffer makes a tensor parameter of a T.handle / T.ptr "
                           f"parameter: pass the tensor itself (its shape gives the T.const "
                           f"sizes), got the Python int {param}")
    if scope != "global":
        raise kernel_error(f"T.match_buffer of a parameter makes a global tensor, got scope "
                           f"{scope!r}")
    builder = B.current("T.match_buffer")
    if isinstance(param, tirx.Var) and not builder.in_kernel():
        spec = _tensor(shape, dtype)
        if strides is not None:
            spec = TensorSpec(spec.shape, spec.dtype,
                              _integers(strides, "T.match_buffer strides", "stride"))
        name = param.name
        buf = declare(name, spec.shape, spec.dtype, "global", spec.strides)
        if builder.replace_param(param, name, buf, packed_bits(spec.dtype)):
            _bind_consts(builder, name, spec, None)
            return TileBuffer(buf)
    return make_tensor(param, shape, dtype, strides)


# the attributes T.func_attr takes: TVM's no-alias promise (every backend already compiles the
# kernel's tensors as not overlapping, TileLang's default too) and the kernel's name
_FUNC_ATTRS = ("global_symbol", "tir.noalias", "tirx.noalias")


def func_attr(attrs: dict) -> None:
    """TVM script's ``T.func_attr({...})`` in a kernel's body, before ``T.Kernel``:
    ``"global_symbol"`` names the kernel; ``"tir.noalias"`` is what every backend assumes."""
    builder = B.current("T.func_attr")
    if not isinstance(attrs, dict):
        raise kernel_error(f"T.func_attr takes a dict, got {type(attrs).__name__}")
    if builder.in_kernel():
        raise kernel_error("T.func_attr belongs before 'with T.Kernel'")
    unknown = sorted(str(k) for k in attrs if k not in _FUNC_ATTRS)
    if unknown:
        raise kernel_error(f"T.func_attr: attribute(s) {', '.join(map(repr, unknown))} are not "
                           f"supported (supported: {', '.join(_FUNC_ATTRS)})")
    if "global_symbol" in attrs:
        name = attrs["global_symbol"]
        if not isinstance(name, str) or not name.isidentifier():
            raise kernel_error(f"T.func_attr: 'global_symbol' must be an identifier, got "
                               f"{name!r}")
        builder.name = name


def view(src, shape=None, dtype=None) -> TileBuffer:
    """``src`` (a tensor or a tile) seen with another shape and/or dtype, the same bytes."""
    if not isinstance(src, TileBuffer):
        raise kernel_error(f"T.view / T.reshape take a buffer, got {type(src).__name__}")
    shape = src.shape if shape is None else shape
    dtype = src.dtype if dtype is None else dtype
    spec = _tensor(shape, dtype)
    old, new = _elements(src.buffer.shape, src.dtype), _elements(spec.shape, spec.dtype)
    if old is not None and new is not None and new != old:
        raise kernel_error(f"T.view / T.reshape of {src.name!r} {src.shape} {src.dtype} "
                           f"({old} bytes) as {spec.shape} {spec.dtype} ({new} bytes): the sizes "
                           "must match")
    return _view(spec, src.data)


def reshape(src, shape) -> TileBuffer:
    """``src`` seen with another shape of the same size."""
    return view(src, shape)


def _elements(shape, dtype) -> int | None:
    """The bytes of a buffer of static ``shape``, else None."""
    shape = [as_int(s) for s in shape]
    if not all(isinstance(s, int) for s in shape):
        return None
    return math.prod(shape) * tvm.runtime.DataType(str(dtype)).bits // 8


Buffer = Tensor


@dataclass(frozen=True)
class TileSpec:
    """``T.SharedBuffer(shape, dtype)``, ``T.FragmentBuffer(...)``, ``T.LocalBuffer(...)``: the
    declared type of a tile a ``T.macro`` takes, as TileLang annotates a macro's parameters.
    It documents the parameter; the macro works on whatever tile its caller passes."""

    shape: tuple
    dtype: str
    scope: str


class _TileType:
    """A tile annotation of one memory scope, called or subscripted like ``T.Tensor``."""

    def __init__(self, name: str, scope: str):
        self.name, self.scope = name, scope

    def __call__(self, shape, dtype="float32", data=None, strides=None, elem_offset=None,
                 scope=None, align=None, offset_factor=None, buffer_type="",
                 axis_separators=None) -> TileSpec:
        """The keywords after ``dtype`` are TileLang's buffer-declaration ones: they describe
        the tile the caller allocated and change nothing here (another keyword, a typo, is
        a TypeError)."""
        spec = _tensor(shape, dtype)
        return TileSpec(spec.shape, spec.dtype, self.scope)

    def __getitem__(self, item) -> TileSpec:
        if not isinstance(item, tuple) or len(item) != 2:
            raise kernel_error(f"T.{self.name}[shape, dtype] takes a shape and a dtype")
        return self(*item)

    def __repr__(self):
        return f"T.{self.name}"


SharedBuffer = _TileType("SharedBuffer", "shared.dyn")
FragmentBuffer = _TileType("FragmentBuffer", "local.fragment")
LocalBuffer = _TileType("LocalBuffer", "local")


def _symbol_names(names: str, api: str) -> list[str]:
    """The names of ``T.const`` / ``T.dynamic``: separated by commas or spaces, as TileLang
    takes them (``"M, N"``, ``"M N K"``); each a Python identifier."""
    parts = [n for n in re.split(r"[,\s]+", names) if n] if isinstance(names, str) else None
    if not parts:
        raise kernel_error(f"{api} needs one or more names separated by commas or spaces, "
                           f"got {names!r}")
    wrong = [n for n in parts if not n.isidentifier()]
    if wrong:
        raise kernel_error(f"{api}: {', '.join(map(repr, wrong))} is not a name")
    return parts


def const(names: str):
    """``M, N = T.const("M, N")`` (or ``"M N"``): shape symbols bound at compile time from
    the arguments."""
    builder = B.current("T.const")
    parts = _symbol_names(names, "T.const")
    values = tuple(builder.const_symbol(n) for n in parts)
    return values[0] if len(values) == 1 else values


def dynamic(name: str, dtype: str = "int32"):
    """``M = T.dynamic("m")``: a shape symbol read from the arguments at every call;
    ``M, N = T.dynamic("m, n")`` declares several, as ``T.const`` does."""
    parts = _symbol_names(name, "T.dynamic")
    values = tuple(tirx.Var(n, normalize_dtype(dtype)) for n in parts)
    return values[0] if len(values) == 1 else values


symbolic = dynamic
# TVM's variable, the type of what T.dynamic returns (TileLang's T.Var: isinstance(NN, T.Var)
# tells a shape symbol from a number); T.Var("n", "int32") makes one
Var = tirx.Var


def empty(*shape, dtype="float32") -> TileBuffer:
    """``C = T.empty((M, N), dtype)`` (or TileLang's ``T.empty(M, N, dtype=...)``): an output
    tensor the kernel allocates and returns."""
    if len(shape) == 2 and isinstance(shape[0], (tuple, list)):
        shape, dtype = shape
    elif len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    elif not shape or isinstance(shape[-1], (str, DType)):
        raise kernel_error(f"T.empty takes a shape (a tuple, or its dimensions one by one) and "
                           f"dtype=, got {shape!r}")
    _scalar_elements(dtype, "T.empty")
    builder = B.current("T.empty")
    if builder.in_kernel():
        raise kernel_error("T.empty declares a kernel output; call it before 'with T.Kernel'")
    index = sum(1 for p in builder.params if p.is_output)
    name = f"out{index}" if index else "C"
    while any(p.name == name for p in builder.params):
        name = "_" + name
    buf = declare(name, shape, dtype, "global")
    builder.add_param(name, buf, is_output=True, packed_bits=packed_bits(dtype))
    return TileBuffer(buf)


def packed_bits(dtype) -> int:
    """The bits of a value of a tensor of ``dtype`` passed packed (4 for int4 and
    float4_e2m1fn), else 0: its buffer holds one value a byte, the caller's tensor packs
    ``8 // bits`` values a byte along the last dimension."""
    dtype = normalize_dtype(dtype)
    return DType(dtype).bits if dtype in SUB_BYTE else 0


class ParamSlot:
    """Stands for an eager kernel's tensor argument ``name`` (``value``: the tensor passed,
    None when tracing without one) until its ``T.Tensor`` annotation declares it; the JIT
    passes one for each tensor argument to :func:`trace_eager`."""

    def __init__(self, name: str, value=None):
        self.name, self.value = name, value


def annotate(name, current, annotation, value):
    """``NAME: ANNOTATION [= VALUE]`` inside a kernel body."""
    if isinstance(annotation, TensorSpec):
        if value is not None:
            raise kernel_error(f"{name!r}: a T.Tensor annotation declares a parameter and "
                               "takes no value")
        builder = B.current(f"declaring {name!r}")
        if builder.in_kernel():
            raise kernel_error(f"declare tensor {name!r} before 'with T.Kernel'")
        if isinstance(current, TileBuffer):
            return current
        if isinstance(current, TensorSpec):  # get_tir(T.Tensor(shape, dtype), ...)
            _check_placeholder(name, annotation, current)
        elif current is not None and not isinstance(current, ParamSlot):
            raise kernel_error(f"{name!r} is annotated as a tensor, but the call passed "
                               f"{type(current).__name__} {current!r:.40}; pass a torch.Tensor")
        buf = declare(name, annotation.shape, annotation.dtype, "global", annotation.strides)
        _bind_consts(builder, name, annotation, current)
        builder.add_param(name, buf, packed_bits=packed_bits(annotation.dtype))
        return TileBuffer(buf)
    if isinstance(annotation, DType) and isinstance(current, ParamSlot) and value is None:
        # ``n: T.int32`` in an eager kernel's body: the argument ``n`` is given at run time
        var = tirx.Var(name, normalize_dtype(annotation))
        B.current(f"declaring {name!r}").add_param(name, var)
        return var
    return value if value is not None else current


HELPERS = Helpers(annotate)


def _check_placeholder(name, annotation: TensorSpec, given: TensorSpec) -> None:
    """A ``T.Tensor`` given for an eager kernel's tensor ``name`` where no tensor exists yet
    (TileLang's ``kernel.get_tir(T.Tensor((128, 128)), ...)``): it stands for a tensor of
    its shape and dtype; the program keeps the annotation's symbols."""
    if given.dtype != annotation.dtype or len(given.shape) != len(annotation.shape):
        raise kernel_error(f"{name!r} is annotated as {len(annotation.shape)}-d "
                           f"{annotation.dtype}, but the call gave T.Tensor{given.shape} "
                           f"{given.dtype}")
    for dim, (want, got) in enumerate(zip(annotation.shape, given.shape)):
        if isinstance(want, int) and isinstance(got, int) and want != got:
            raise kernel_error(f"{name!r} is annotated with {want} in dimension {dim}, but the "
                               f"call gave T.Tensor{given.shape}")


@dataclass(frozen=True)
class ConstSource:
    """Where an eager kernel reads a ``T.const`` symbol: dimension ``axis`` of tensor argument
    ``param``, or its stride there (a symbol among ``T.StridedTensor`` strides), counted in
    the kernel's values: a packed tensor (int4, float4) holds ``scale`` values a byte along
    its last dimension, whose size and the other strides are that many times the tensor's."""

    param: str
    axis: int
    stride: bool = False
    scale: int = 1

    def value(self, tensors: dict) -> int:
        """The symbol's value for the tensor arguments ``tensors`` (by parameter name)."""
        tensor = tensors[self.param]
        got = tensor.stride(self.axis) if self.stride else tensor.shape[self.axis]
        return int(got) * self.scale


def _bind_consts(builder, name, spec: TensorSpec, slot) -> None:
    bits = packed_bits(spec.dtype)
    for stride, values in ((False, spec.shape), (True, spec.strides or ())):
        for axis, extent in enumerate(values):
            if isinstance(extent, tirx.Var) and extent.name in builder.const_symbols and \
                    builder.const_symbols[extent.name].same_as(extent):
                last = axis == len(values) - 1
                scale = 8 // bits if bits and stride != last else 1
                builder.const_sources.setdefault(extent.name,
                                                 ConstSource(name, axis, stride, scale))


def prim_func(fn=None, *, name: str | None = None):
    """Trace ``fn`` into a tile-level ``PrimFunc``; parameters are annotated with T.Tensor."""
    if fn is None:
        return lambda f: prim_func(f, name=name)
    builder = B.Builder(name or fn.__name__)
    postponed = False
    try:
        # a string annotation is postponed (``from __future__ import annotations``) and
        # evaluated here, in the function's globals and the variables it closes over (a
        # factory's shape arguments), unless it is a dtype such as T.float32 (a str) or
        # "float32"; eval_str=True would evaluate those too and fail
        scope = dict(fn.__globals__)
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                scope[var] = cell.cell_contents
            except ValueError:  # a cell not yet assigned
                pass
        annotations = {}
        for k, v in inspect.get_annotations(fn).items():
            postponed = postponed or (type(v) is str and v not in DTYPES)
            annotations[k] = eval(v, scope) if type(v) is str and v not in DTYPES else v  # noqa: S307
    except Exception as exc:  # noqa: BLE001 - any error evaluating user annotations
        hint = (" (the annotations are postponed strings: a name they use must be a global or "
                "also be used in the kernel's body)") if postponed and \
            isinstance(exc, NameError) else ""
        raise KernelError(f"cannot evaluate the annotations of {fn.__name__}: {exc}{hint}") \
            from exc
    body = rewrite(fn, HELPERS)
    args = []
    with builder.active():
        for param in inspect.signature(fn).parameters.values():
            spec = annotations.get(param.name)
            if isinstance(spec, TensorSpec):
                buf = declare(param.name, spec.shape, spec.dtype, "global", spec.strides)
                builder.add_param(param.name, buf, packed_bits=packed_bits(spec.dtype))
                args.append(TileBuffer(buf))
            elif isinstance(spec, (DType, str)):
                var = tirx.Var(param.name, normalize_dtype(spec))
                builder.add_param(param.name, var)
                args.append(var)
            elif isinstance(spec, TileSpec):
                raise kernel_error(f"parameter {param.name!r} of {fn.__name__} is annotated as "
                                   f"a {spec.scope} tile: a kernel's parameters are global "
                                   "tensors (T.Tensor); tile annotations (T.SharedBuffer, "
                                   "T.FragmentBuffer, T.LocalBuffer) belong to T.macro "
                                   "parameters")
            else:
                raise kernel_error(f"parameter {param.name!r} of {fn.__name__} needs a "
                                   "T.Tensor(shape, dtype) or dtype annotation")
        body(*args)
    return _finish(builder)


def _finish(builder: B.Builder) -> tirx.PrimFunc:
    func = builder.finish()
    return func.with_body(widen_fragments(func.body))


def _declared(name, value, annotation):
    """An eager kernel's argument ``value`` for the parameter ``name`` its signature annotates
    with ``annotation``: a tensor (``A: T.Tensor[(M, N), T.float32]``) declared as the body's
    annotations declare the others; a scalar of a dtype (``a_ptr: T.ptr``, ``n: T.int32``)
    given at run time (a tensor for a pointer, or ``T.ptr()`` standing for one) a parameter
    of that dtype; anything else (a compile-time value) as it is."""
    if isinstance(annotation, TensorSpec):
        return annotate(name, value, annotation, None)
    if isinstance(annotation, DType) and (
            isinstance(value, ParamSlot) or isinstance(value, tirx.Var) and
            value_dtype(value) == normalize_dtype(annotation)):
        var = tirx.Var(name, normalize_dtype(annotation))
        B.current(f"declaring {name!r}").add_param(name, var)
        return var
    return value


def trace_eager(fn, args: dict, const_values: dict | None, name: str | None = None):
    """Trace an eager-style kernel: tensors in ``args`` are declared by annotations in the
    body; other arguments are compile-time values. Returns (PrimFunc, builder)."""
    builder = B.Builder(name or fn.__name__, const_values=const_values)
    body = rewrite(fn, HELPERS)
    annotations = {k: v for k, v in inspect.get_annotations(fn).items() if k in args}
    with builder.active():
        args = {k: _declared(k, v, annotations.get(k)) for k, v in args.items()}
        result = body(**args)
    func = _finish(builder)
    outputs = result if isinstance(result, tuple) else (result,) if result is not None else ()
    return func, builder, outputs


def eager_consts(fn, static: dict, tensors: dict) -> dict:
    """The ``T.const`` values an eager kernel takes from ``tensors`` (by parameter name), its
    other arguments given by ``static`` (missing ones take their defaults)."""
    bound = inspect.signature(fn).bind_partial(
        **static, **{k: ParamSlot(k, t) for k, t in tensors.items()})
    bound.apply_defaults()
    _, builder, _ = trace_eager(fn, dict(bound.arguments), None)
    unbound = sorted(set(builder.const_symbols) - set(builder.const_sources))
    if unbound:
        raise KernelError(f"{fn.__name__}: T.const symbol(s) {unbound} appear in no tensor "
                          "annotation, so no argument gives their value")
    return {name: source.value(tensors) for name, source in builder.const_sources.items()}


class Ref:
    """``x: T.Ref``, the annotation of a ``T.macro`` parameter passed by reference: the caller
    gives a buffer element (``buf[i]``) or a ``T.alloc_var`` scalar, and ``x = v`` in the
    macro stores into it (reading ``x`` reads it)."""


def _reference(macro: str, name: str, value):
    """The argument ``value`` of the ``T.Ref`` parameter ``name`` as a scalar that stores into
    the caller's element or variable."""
    if isinstance(value, VarHandle):
        return value
    if isinstance(value, tvm.ir.TensorLoad):  # what ``buf[i]`` reads
        return IterationVar(value.source, tuple(value.indices))
    raise kernel_error(f"T.macro {macro}: parameter {name!r} is a T.Ref: pass a buffer element "
                       f"(buf[i]) or a T.alloc_var scalar, got {type(value).__name__}")


class Macro:
    """``@T.macro``: a helper whose statements are emitted inline where it is called."""

    MAX_DEPTH = 64

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._body = None
        self._depth = 0
        self._refs = frozenset(k for k, v in inspect.get_annotations(fn).items() if v is Ref)
        self._signature = inspect.signature(fn)

    def __call__(self, *args, **kwargs):
        B.current(f"macro {self.fn.__name__}")
        bound = bind_call(self._signature, f"T.macro {self.fn.__name__}", args, kwargs)
        if self._refs:
            for name in self._refs & bound.arguments.keys():
                bound.arguments[name] = _reference(self.fn.__name__, name,
                                                   bound.arguments[name])
            args, kwargs = bound.args, bound.kwargs
        if self._body is None:
            self._body = rewrite(self.fn, HELPERS)
        if self._depth >= self.MAX_DEPTH:
            raise kernel_error(f"T.macro {self.fn.__name__} calls itself more than "
                               f"{self.MAX_DEPTH} levels deep; a macro is expanded inline at "
                               "compile time, so its recursion must end on a Python condition")
        self._depth += 1
        try:
            return self._body(*args, **kwargs)
        finally:
            self._depth -= 1


def macro(fn):
    return Macro(fn)


# -- allocation ------------------------------------------------------------------------------
def _alloc(shape, dtype, scope: str, what: str, name: str | None = None) -> TileBuffer:
    builder = B.require_kernel(what)
    if what not in ("T.alloc_var", "T.alloc_local"):
        _scalar_elements(dtype, what)
    if builder.enclosing("parallel") is not None:
        raise kernel_error(f"{what} inside a T.Parallel loop: allocate before the loop")
    n = sum(1 for f in builder.frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(name or f"{scope.split('.')[0]}_{n}", shape, dtype, scope)
    builder.emit(tirx.AllocBuffer(buf, span=B.here()))
    return TileBuffer(buf)


def alloc_shared(shape, dtype, scope="shared.dyn", name=None) -> TileBuffer:
    """A tile in the block's shared memory."""
    return _alloc(shape, dtype, scope, "T.alloc_shared", name)


def alloc_fragment(shape, dtype, scope="local.fragment", name=None) -> TileBuffer:
    """A tile distributed over the block's threads (registers on GPUs)."""
    return _alloc(shape, dtype, scope, "T.alloc_fragment", name)


def alloc_local(shape, dtype, scope="local", name=None) -> TileBuffer:
    """A per-thread array."""
    return _alloc(shape, dtype, scope, "T.alloc_local", name)


def alloc_global(shape, dtype, scope="global", name=None) -> TileBuffer:
    """A global-memory workspace the kernel's ``T.Kernel`` blocks share: allocated before the
    first block, outside every ``with T.Kernel``, and freed when the kernel returns."""
    _scalar_elements(dtype, "T.alloc_global")
    builder = B.current("T.alloc_global")
    if builder.in_kernel():
        raise kernel_error("T.alloc_global allocates a workspace shared by the kernel's "
                           "T.Kernel blocks; call it before 'with T.Kernel'")
    n = sum(1 for s in builder.frames[0].stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(name or f"workspace_{n}", shape, dtype, scope)
    builder.emit(tirx.AllocBuffer(buf, span=B.here()))
    return TileBuffer(buf)


def alloc_buffer(shape, dtype="float32", scope="global", name=None) -> TileBuffer:
    """TVM script's allocation by scope, as TileLang exports it: ``"global"`` (its default) is
    :func:`alloc_global` (a workspace, before ``with T.Kernel``), ``"shared"`` /
    ``"shared.dyn"`` :func:`alloc_shared`, ``"local.fragment"`` :func:`alloc_fragment`,
    ``"local"`` :func:`alloc_local`."""
    allocate = {"global": alloc_global, "shared": alloc_shared, "shared.dyn": alloc_shared,
                "local.fragment": alloc_fragment, "local": alloc_local}.get(str(scope))
    if allocate is None:
        raise kernel_error(f"T.alloc_buffer: unknown scope {scope!r}; one of global, shared, "
                           "shared.dyn, local.fragment, local")
    if allocate is alloc_shared:
        return alloc_shared(shape, dtype, name=name)
    return allocate(shape, dtype, scope=str(scope), name=name)


def alloc_var(dtype, init=None, scope="local.var", name=None) -> VarHandle:
    """A mutable scalar: ``x = T.alloc_var(T.int32, init=0)``, then ``x = x + 1``. Inside a
    ``T.Parallel`` loop it is a scalar of each iteration, as a thread's register is on a GPU
    (TileLang's ``d = T.alloc_var(...)`` in the loop body): one element per iteration of the
    enclosing parallel loops, allocated before the outermost of them."""
    builder = B.require_kernel("T.alloc_var")
    if builder.enclosing("parallel") is None:
        handle = VarHandle(_alloc((1,), dtype, scope, "T.alloc_var", name).buffer)
    else:
        handle = _iteration_var(builder, dtype, name)
    if init is not None:
        handle.store(init)
    return handle


def _iteration_var(builder, dtype, name) -> IterationVar:
    frames = builder.frames
    outer = next(n for n, f in enumerate(frames) if f.kind == "parallel")
    shape, index = [], []
    for frame in frames[outer:]:
        if frame.kind != "parallel":
            continue
        for var, start, extent in zip(frame.info["loop_vars"], frame.info["starts"],
                                      frame.info["extents"]):
            if not isinstance(as_int(extent), int):
                raise kernel_error("T.alloc_var inside a T.Parallel loop of a run-time extent: "
                                   "allocate it before the loop")
            shape.append(as_int(extent))
            index.append(var if isinstance(start, int) and start == 0 else var - start)
    n = sum(1 for f in frames for s in f.stmts if isinstance(s, tirx.AllocBuffer))
    buf = declare(name or f"var_{n}", shape, dtype, "local.fragment")
    frames[outer - 1].stmts.append(tirx.AllocBuffer(buf, span=B.here()))
    return IterationVar(buf, tuple(index))
