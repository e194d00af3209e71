"""Calling a compiled kernel: argument checks, output allocation, launch.

:class:`KernelCall` is shared by the JIT's kernels and by exported bundles, so a kernel checks
its arguments the same way wherever it runs. The checks run once per distinct key of dtypes,
shapes, devices, layouts and alignments; later calls with the same key cost one dict lookup.
They refuse what the generated code cannot handle (a dimension or element count above its
index type, a scalar out of its dtype's range) and pass an input it cannot address as it is
(non-contiguous strides, or a storage offset that breaks the alignment the code assumes) as an
aligned contiguous copy, copied back after the call when the kernel may write it. A
``T.StridedTensor`` input is passed as it is: its strides must be those the kernel declares,
a symbol among them taking the argument's stride (a kernel with one keys the checks by the
arguments' strides too).

Needs only the standard library and torch.
"""

from __future__ import annotations

import ctypes
import functools
import warnings

from ..errors import ArgumentError, AssumptionError
from .expr import ExprError, solve_linear
from .expr import parse as parse_expr
from .signature import PACKED, KernelSignature

_WARNED: set = set()


def warn_once(message: str, stacklevel: int = 4) -> None:
    """A RuntimeWarning, once per process for each distinct message."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


class KernelCall:
    """Calls ``fn`` (taking every parameter, outputs included, in kernel order) with checked
    inputs and freshly allocated outputs; ``device`` is the torch device type it runs on.

    Outputs are allocated zero-filled: an element the kernel leaves unwritten (rows past a
    variable sequence length, say) reads 0 on every backend and every run, never whatever the
    host allocator left there (a NaN among it spreads through a later kernel's masked
    arithmetic, ``0 * NaN``). An output the signature marks ``covered`` (the kernel provably
    writes every element and reads none first) is allocated without the fill, which for a
    memory-bound kernel is a pass over memory as large as its own output."""

    def __init__(self, signature: KernelSignature, fn, device: str, backend_name: str):
        import torch

        self.signature = signature
        self._fn = fn
        self._device = device
        self._backend_name = backend_name
        self._plans: dict = {}
        self._dtypes = [getattr(torch, p.held_dtype) if p.kind == "tensor" else None
                        for p in signature.params]
        self._inputs = [i for i, p in enumerate(signature.params) if not p.is_output]
        self._outputs = [i for i, p in enumerate(signature.params) if p.is_output]
        self._tail_outputs = self._outputs == list(range(len(self._inputs),
                                                         len(signature.params)))
        self._tensor_type, self._empty, self._zeros = torch.Tensor, torch.empty, torch.zeros
        self._contiguous = torch.contiguous_format
        self._empty_strided = torch.empty_strided
        # packed tensors: (argument position, spec) of inputs, (output position, spec) of outputs
        self._packed_inputs = [(pos, signature.params[i]) for pos, i in enumerate(self._inputs)
                               if signature.params[i].packed_bits]
        self._packed_outputs = [(pos, signature.params[i]) for pos, i in enumerate(self._outputs)
                                if signature.params[i].packed_bits]
        # the positions of T.ptr arguments, passed as pointers
        self._pointers = [pos for pos, i in enumerate(self._inputs)
                          if signature.params[i].dtype == "handle"]
        self._strided = signature.strided
        # scalar arguments a tensor's shape names too (``n: T.int32`` and ``T.Tensor[[n], ...]``):
        # (position, name), checked against the shapes at every call
        dims = {d for p in signature.params if p.kind == "tensor" for d in p.shape
                if isinstance(d, str)}
        self._shape_scalars = [(pos, signature.params[i].name)
                               for pos, i in enumerate(self._inputs)
                               if signature.params[i].kind == "scalar" and
                               signature.params[i].name in dims]

    @property
    def entry_address(self) -> int | None:
        """The address of the compiled kernel's C entry point, taking every parameter in
        kernel order in the tvm-ffi calling convention (``int fn(void* self, const TVMFFIAny*
        args, int32_t num_args, TVMFFIAny* result)``, tensors as ``DLTensor`` pointers), when
        its executor has one (the CPU backend's shared libraries); else None."""
        return getattr(self._fn, "address", None)

    # -- calling ----------------------------------------------------------------------
    def __call__(self, *args):
        if self._packed_inputs or self._packed_outputs:
            return self._call_packed(args)
        return self._launch(args)

    def _call_packed(self, args):
        """The call with packed inputs unpacked, written ones packed back, outputs packed."""
        args = list(args)
        unpacked = []
        for pos, spec in self._packed_inputs:
            if pos < len(args):
                values = unpack(args[pos], spec, self._where(pos, spec))
                unpacked.append((args[pos], values, spec.written))
                args[pos] = values
        outs = self._launch(args)
        for original, values, written in unpacked:
            if written:
                original.copy_(_pack(values, original.dtype))
        if not self._packed_outputs:
            return outs
        outs = [outs] if len(self._outputs) == 1 else list(outs)
        for pos, spec in self._packed_outputs:
            outs[pos] = _pack(outs[pos], self._host_dtype(spec))
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def _host_dtype(spec):
        import torch

        return getattr(torch, spec.host_dtype)

    def _where(self, pos: int, spec) -> str:
        return f"argument {pos} ({spec.name!r}) of kernel {self.signature.name}"

    def _launch(self, args):
        # fast path: one dict lookup keyed by what the argument checks depend on
        if self._strided:
            key = self._strided_key(args)
        else:
            try:
                key = tuple([(a.dtype, a.shape, a.device, a.is_contiguous(),
                              a.data_ptr() & 255, a.requires_grad) for a in args])
            except AttributeError:  # scalars or non-torch values among the arguments
                key = tuple((a.dtype, a.shape, a.device, a.is_contiguous(), a.data_ptr() & 255,
                             a.requires_grad) if isinstance(a, self._tensor_type) else
                            (type(a), _scalar_key(a)) for a in args)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._new_plan(args)
        outs, copies, symbols = plan
        for pos, name in self._shape_scalars:
            if symbols.get(name) is not None and args[pos] != symbols[name]:
                raise ArgumentError(f"kernel {self.signature.name}: {name} = {args[pos]!r}, but "
                                    f"the tensors' shapes give {name} = {symbols[name]}")
        if self.signature.assumptions:
            self._check_assumptions(args, symbols)
        if self._pointers:
            args = self._addresses(args)
        if copies:
            args, written = self._copy_inputs(args, copies)
        if not outs:
            self._fn(*args)
            if copies:
                _copy_back(written)
            return None
        outs = [new(shape, dtype=dtype, device=device) for new, shape, dtype, device in outs]
        if self._tail_outputs:
            self._fn(*args, *outs)
        else:
            full = list(args)
            for pos, out in zip(self._outputs, outs):
                full.insert(pos, out)
            self._fn(*full)
        if copies:
            _copy_back(written)
        return outs[0] if len(outs) == 1 else outs

    def _strided_key(self, args) -> tuple:
        """The plan key of a kernel with a ``T.StridedTensor``: the tensors' strides decide
        its checks and the values of its stride symbols."""
        return tuple((a.dtype, a.shape, a.stride(), a.device, a.data_ptr() & 255,
                      a.requires_grad) if isinstance(a, self._tensor_type) else
                     (type(a), _scalar_key(a)) for a in args)

    def _copy_inputs(self, args, copies):
        """Inputs the generated code cannot address as they are (a storage offset that breaks
        the alignment it assumes, strides that are not contiguous), as aligned contiguous
        copies; the pairs (original, copy) of those the kernel may write. A
        ``T.StridedTensor`` whose stride on an axis of extent 1 is not the one the kernel
        declares (which its compiled code may insist on) is passed as a view with that
        stride: the same elements; one whose data is not aligned as the code assumes, as an
        aligned copy with those strides (its stride symbols keep their values)."""
        args = list(args)
        written = []
        for pos, is_written, strides in copies:
            original = args[pos]
            if strides is None:
                copy = original.clone(memory_format=self._contiguous)
            elif original.data_ptr() % self.signature.params[self._inputs[pos]].align == 0:
                args[pos] = original.as_strided(original.shape, strides)  # the same elements
                continue
            else:  # an aligned copy with these strides
                copy = self._empty_strided(original.shape, strides, dtype=original.dtype,
                                           device=original.device).copy_(original)
            if is_written:
                written.append((args[pos], copy))
            args[pos] = copy
        return args, written

    def _new_plan(self, args) -> tuple:
        """Check the arguments (count, then :meth:`_plan`); the outputs' (allocator, shape,
        dtype, device), the allocator ``torch.empty`` for covered outputs, else
        ``torch.zeros``, and the inputs to pass as copies."""
        inputs = self._inputs
        if len(args) != len(inputs):
            names = ", ".join(self.signature.params[i].name for i in inputs)
            raise ArgumentError(f"kernel {self.signature.name} takes {len(inputs)} input(s) "
                                f"({names}), got {len(args)}")
        shapes, copies, symbols = self._plan(args)
        device = args[0].device if args and hasattr(args[0], "device") else self._device
        allocators = [self._empty if self.signature.params[i].covered else self._zeros
                      for i in self._outputs]
        return tuple((new, shape, dtype, device) for new, (shape, dtype)
                     in zip(allocators, shapes)), tuple(copies), symbols

    def _plan(self, args):
        """Check every argument against the signature (once per key of :meth:`__call__`);
        compute the output shapes and which inputs must be passed as copies."""
        import torch

        sig = self.signature
        symbols: dict[str, int] = {}
        copies = []
        strided = []  # (position, argument, spec, where) of the T.StridedTensor inputs
        for pos, (index, arg) in enumerate(zip(self._inputs, args)):
            spec = sig.params[index]
            where = self._where(pos, spec)
            if spec.kind == "scalar":
                _check_scalar(arg, spec, where, torch)
                if isinstance(arg, torch.Tensor) and arg.device.type != self._device:
                    raise ArgumentError(f"{where} is an address (T.ptr) the kernel reads on "
                                        f"device '{self._device}' (backend "
                                        f"'{self._backend_name}'): pass a tensor there, got "
                                        f"one on '{arg.device}'")
                continue
            if not isinstance(arg, torch.Tensor):
                raise ArgumentError(f"{where} must be a torch.Tensor of shape {_fmt(spec.shape)}"
                                    f" and dtype {spec.dtype}, got {type(arg).__name__} "
                                    f"{_short_repr(arg)}")
            if arg.dtype != self._dtypes[index]:
                raise ArgumentError(f"{where} must have dtype {spec.dtype}, got "
                                    f"{str(arg.dtype).removeprefix('torch.')}")
            if arg.device.type != self._device:
                raise ArgumentError(f"{where} must be on device '{self._device}' (backend "
                                    f"'{self._backend_name}'), got '{arg.device}'")
            if arg.dim() != len(spec.shape):
                raise ArgumentError(f"{where} must have {len(spec.shape)} dimension(s) "
                                    f"{_fmt(spec.shape)}, got shape {tuple(arg.shape)}")
            for dim, (want, got) in enumerate(zip(spec.shape, arg.shape)):
                if isinstance(want, int):
                    if want != got:
                        raise ArgumentError(f"{where} must have shape {_fmt(spec.shape)}, got "
                                            f"{tuple(arg.shape)} (dimension {dim})")
                elif want.isidentifier():
                    if symbols.setdefault(want, got) != got:
                        raise ArgumentError(f"{where}: dimension {dim} is {want} = {got}, but "
                                            f"an earlier argument set {want} = {symbols[want]}")
                    if got > INDEX_MAX[spec.index_dtype]:
                        raise ArgumentError(f"{where}: dimension {dim} ({want} = {got}) does not "
                                            f"fit the kernel's {spec.index_dtype} indices")
            if spec.strides:
                _check_reach(arg, spec, where)
                strided.append((pos, arg, spec, where))
            elif arg.numel() > INDEX_MAX[spec.index_dtype]:
                raise ArgumentError(f"{where} has {arg.numel()} elements, more than the "
                                    f"kernel's {spec.index_dtype} indices address; split the "
                                    "work or declare the shape with T.int64 dimensions")
            if not spec.strides and (not arg.is_contiguous() or arg.data_ptr() % spec.align):
                copies.append((pos, spec.written, None))
            if arg.requires_grad and torch.is_grad_enabled():
                warn_once(f"kernel {sig.name}: input {spec.name!r} requires grad, but the "
                           "kernel is not differentiable: its outputs are not connected to "
                           "autograd. Call it under torch.no_grad(), or pair it with a backward "
                           "kernel in a torch.autograd.Function")
        _bind_strides(strided, symbols)
        for name, _, _ in sig.symbols:
            symbols.setdefault(name, None)
        self._solve_symbols(args, symbols)
        for pos, arg, spec, where in strided:
            passed = _passed_strides(arg, spec, where, symbols)
            if arg.data_ptr() % spec.align:  # an aligned copy, the same strides
                copies.append((pos, spec.written, passed))
            elif passed != tuple(arg.stride()):
                copies.append((pos, False, passed))
        shapes = []
        for index in self._outputs:
            spec = sig.params[index]
            shape = tuple(_eval_dim(d, symbols, spec.name) for d in spec.shape)
            if any(d < 0 for d in shape):
                raise ArgumentError(f"output {spec.name!r} of kernel {sig.name} would have shape "
                                    f"{shape} for these inputs")
            if spec.packed_bits and shape and shape[-1] % spec.per_byte:
                raise ArgumentError(f"output {spec.name!r} of kernel {sig.name} would have shape "
                                    f"{shape} for these inputs: a {spec.host_dtype} tensor "
                                    f"packs {spec.per_byte} values a byte along its last "
                                    "dimension, which must be a multiple of "
                                    f"{spec.per_byte}")
            shapes.append((shape, self._dtypes[index]))
        for index, arg in zip(self._inputs, args):
            spec = sig.params[index]
            for dim, want in enumerate(spec.shape):
                if isinstance(want, str) and not want.isidentifier():
                    value = _eval_dim(want, symbols, spec.name)
                    if value != arg.shape[dim]:
                        raise ArgumentError(f"argument {spec.name!r}: dimension {dim} must be "
                                            f"{want} = {value}, got {arg.shape[dim]}")
        return shapes, copies, symbols

    def _addresses(self, args) -> list:
        """The T.ptr arguments as pointers (a tensor's data, or the address given)."""
        args = list(args)
        for pos in self._pointers:
            arg = args[pos]
            args[pos] = ctypes.c_void_p(arg.data_ptr() if isinstance(arg, self._tensor_type)
                                        else arg)
        return args

    def _check_assumptions(self, args, symbols: dict) -> None:
        """The kernel's ``T.assume`` conditions over its scalars and shape symbols (every
        call: a scalar's value is not part of the plan's key)."""
        values = dict(symbols)
        for index, arg in zip(self._inputs, args):
            spec = self.signature.params[index]
            if spec.kind == "scalar":
                values[spec.name] = int(arg)
        for text in self.signature.assumptions:
            assumed = _parsed(text)
            if not assumed(values):
                shown = ", ".join(f"{k} = {v}" for k, v in sorted(values.items())
                                  if k in assumed.names)
                raise AssumptionError(f"kernel {self.signature.name}: Assume: {assumed.shown()} "
                                      f"does not hold for this call ({shown})")

    def _solve_symbols(self, args, symbols: dict) -> None:
        """A symbol no argument gives as a whole dimension, from a dimension that is a linear
        expression of it (``n * 4``, ``n + 1``), repeated while one is found."""
        found = True
        while found:
            found = False
            for pos, (index, arg) in enumerate(zip(self._inputs, args)):
                spec = self.signature.params[index]
                if spec.kind == "scalar":
                    continue
                for dim, want in enumerate(spec.shape):
                    if not isinstance(want, str) or want.isidentifier():
                        continue
                    expr = _parsed(want)
                    unknown = [n for n in expr.names if symbols.get(n) is None]
                    if len(unknown) != 1:
                        continue
                    value = solve_linear(expr, unknown[0], int(arg.shape[dim]), symbols)
                    if value is None:
                        raise ArgumentError(f"{self._where(pos, spec)}: dimension {dim} must "
                                            f"be {want} for an integer {unknown[0]}, got "
                                            f"{arg.shape[dim]}")
                    symbols[unknown[0]] = value
                    found = True


INDEX_MAX = {"int32": (1 << 31) - 1, "int64": (1 << 63) - 1}
SCALAR_RANGE = {f"{s}int{b}": ((0, (1 << b) - 1) if s else (-(1 << (b - 1)), (1 << (b - 1)) - 1))
                 for s in ("", "u") for b in (8, 16, 32, 64)}


def _scalar_key(value):
    """What of a scalar argument its check depends on: its range for integers."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value.bit_length()


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_scalar(arg, spec, where: str, torch) -> None:
    if spec.dtype == "handle":  # a T.ptr parameter: a tensor (its data) or an address
        if isinstance(arg, bool) or not isinstance(arg, (int, torch.Tensor)):
            raise ArgumentError(f"{where} is a pointer (T.ptr): pass a tensor or its "
                                f"data_ptr(), got {type(arg).__name__} {_short_repr(arg)}")
        return
    if isinstance(arg, torch.Tensor):
        raise ArgumentError(f"{where} is a scalar of dtype {spec.dtype}, got a tensor")
    if spec.dtype.startswith(("int", "uint")):
        if isinstance(arg, bool) or not isinstance(arg, int):
            raise ArgumentError(f"{where} is an integer scalar ({spec.dtype}), got "
                                f"{type(arg).__name__} {_short_repr(arg)}")
        low, high = SCALAR_RANGE.get(spec.dtype, (-(1 << 63), (1 << 63) - 1))
        if not low <= arg <= high:
            raise ArgumentError(f"{where} = {arg} does not fit its dtype {spec.dtype}")
    elif spec.dtype.startswith(("float", "bfloat")) and not isinstance(arg, (int, float)):
        raise ArgumentError(f"{where} is a scalar of dtype {spec.dtype}, got "
                            f"{type(arg).__name__} {_short_repr(arg)}")


def unpack(arg, spec, where: str):
    """The values of a packed 4-bit tensor ``arg`` one a byte (:data:`.signature.PACKED`), as
    the compiled kernel takes them: the last dimension doubled, each byte's low nibble first;
    int4 values sign-extended into int8, float4_e2m1fn codes as uint8. A ``T.StridedTensor``'s
    values keep the strides of ``arg`` counted in values (the last 1, the others doubled).
    ``where`` names the argument in the error a wrong tensor gets."""
    import torch

    host, host_dtype = spec.host_shape, getattr(torch, spec.host_dtype)
    # float4_e2m1fn bytes may also come as uint8 or int8 (TileLang passes them so)
    as_bytes = spec.dtype == "float4_e2m1fn" and isinstance(arg, torch.Tensor) and \
        arg.dtype in (torch.uint8, torch.int8)
    if not isinstance(arg, torch.Tensor) or arg.dtype != host_dtype and not as_bytes or \
            arg.dim() != len(host) or isinstance(host[-1], int) and arg.shape[-1] != host[-1]:
        got = f"{str(arg.dtype).removeprefix('torch.')} of shape {tuple(arg.shape)}" \
            if isinstance(arg, torch.Tensor) else type(arg).__name__
        what = f"int{spec.packed_bits}" if spec.dtype == "int8" else spec.dtype
        article = "an" if spec.host_dtype.startswith(("int", "uint")) else "a"
        raise ArgumentError(f"{where} is {what} of shape {_fmt(spec.shape)}, passed packed "
                            f"{spec.per_byte} values a byte: {article} {spec.host_dtype} tensor "
                            f"of shape {_fmt(host)}"
                            f"{' (or uint8, int8)' if spec.dtype == 'float4_e2m1fn' else ''}; got "
                            f"{got}")
    if spec.strides and arg.dim() and arg.shape[-1] > 1 and arg.stride(-1) != 1:
        raise ArgumentError(f"{where} is {spec.dtype} passed packed {spec.per_byte} values a "
                            "byte along its last dimension, which must be contiguous (stride "
                            f"1); got strides {tuple(arg.stride())}")
    codes = arg.view(getattr(torch, spec.held_dtype))
    if PACKED[spec.dtype][2]:
        low = ((codes & 0x0F) ^ 0x08) - 0x08  # the low nibble, sign-extended
        high = codes >> 4  # arithmetic shift: the high nibble, sign-extended
    else:
        low, high = codes & 0x0F, codes >> 4
    values = torch.stack((low, high), dim=-1).reshape(*arg.shape[:-1], arg.shape[-1] * 2)
    if not spec.strides or not arg.dim():
        return values
    strides = (*(s * spec.per_byte for s in arg.stride()[:-1]), 1)
    return torch.empty_strided(values.shape, strides, dtype=values.dtype,
                               device=values.device).copy_(values)


def _strides_text(spec) -> str:
    """How ``spec``'s strides are counted, for an error about them."""
    if not spec.packed_bits:
        return ""
    return (f" (counted in {spec.dtype} values, {spec.per_byte} a byte: the packed tensor's "
            "strides but the last, times that)")


def _check_reach(arg, spec, where: str) -> None:
    """Refuses a strided tensor whose farthest element lies beyond the kernel's index type."""
    got = tuple(arg.stride())
    farthest = sum((n - 1) * s for n, s in zip(arg.shape, got) if n > 0)
    if farthest > INDEX_MAX[spec.index_dtype]:
        raise ArgumentError(f"{where} of shape {tuple(arg.shape)} and strides {_fmt(got)} "
                            f"reaches element {farthest}, beyond the kernel's "
                            f"{spec.index_dtype} indices; declare its strides with T.int64 "
                            "symbols")


def _bind_strides(strided, symbols: dict) -> None:
    """Check the strides of the ``T.StridedTensor`` arguments ``strided`` (position,
    argument, spec, where) against their specs: a constant stride must be the argument's, a
    symbol takes the argument's value, the same wherever it stands (a dimension too). The
    stride of an axis of extent 1 addresses nothing: it is not compared, and gives a symbol
    only when no other axis does."""
    for _, arg, spec, where in strided:
        got = tuple(arg.stride())
        for axis, (want, stride, extent) in enumerate(zip(spec.strides, got, arg.shape)):
            if extent <= 1:
                continue
            if isinstance(want, int):
                if want != stride:
                    raise ArgumentError(f"{where} must have strides {_fmt(spec.strides)}, got "
                                        f"{_fmt(got)} (stride {axis}){_strides_text(spec)}")
            elif want.isidentifier() and symbols.setdefault(want, stride) != stride:
                raise ArgumentError(f"{where}: stride {axis} is {want} = {stride}, but {want} = "
                                    f"{symbols[want]} already (an earlier dimension or stride)"
                                    f"{_strides_text(spec)}")
    for _, arg, spec, _ in strided:
        for want, stride in zip(spec.strides, arg.stride()):
            if isinstance(want, str) and want.isidentifier():
                symbols.setdefault(want, stride)


def _passed_strides(arg, spec, where: str, symbols: dict) -> tuple:
    """The strides ``arg`` is passed with once every symbol is known: its own, each checked
    against a stride ``spec`` writes as an expression of symbols, and on an axis of extent 1
    the declared one."""
    passed = []
    for axis, (want, stride, extent) in enumerate(zip(spec.strides, arg.stride(), arg.shape)):
        value = _eval_dim(want, symbols, spec.name)
        if extent > 1 and value != stride:
            raise ArgumentError(f"{where}: stride {axis} must be {want} = {value}, got "
                                f"{stride}{_strides_text(spec)}")
        passed.append(value if extent <= 1 else stride)
    return tuple(passed)


def _pack(values, dtype):
    """``values`` (one 4-bit value a byte, last dimension even) packed two a byte into a tensor
    of ``dtype``; the low four bits of each value are kept, as a store to a 4-bit type keeps
    them."""
    packed = (values[..., 0::2] & 0x0F) | (values[..., 1::2] << 4)
    return packed.contiguous().view(dtype)


def _copy_back(pairs) -> None:
    for original, copy in pairs:
        original.copy_(copy)


def _fmt(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


@functools.lru_cache(maxsize=1024)
def _parsed(dim: str):
    try:
        return parse_expr(dim)
    except ExprError as exc:
        raise ArgumentError(f"shape expression {dim!r}: {exc}") from None


def _eval_dim(dim, symbols: dict, param: str) -> int:
    if isinstance(dim, int):
        return dim
    try:
        return _parsed(dim)(symbols)
    except ExprError as exc:
        raise ArgumentError(f"the shape of {param!r} is not computable from the inputs: "
                            f"{exc}") from None
