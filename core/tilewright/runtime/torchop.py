"""Compiled kernels as PyTorch operators (``torch.ops.<ns>.<name>``), through ``torch.library``.

An operator has one schema and, per device type, a set of *variants*: compiled kernels
(:class:`~tilewright.runtime.call.KernelCall`) that take the same parameters. A call runs the
variant whose signature accepts the inputs (dtypes, ranks, static dimensions and the ranges a
kernel package declares); two variants that could both accept some input are refused when the
second is added, so dispatch is never ambiguous. Where the variants come from is the caller's
business: the JIT compiles them on demand (:mod:`tilewright.torch_ops`), a kernel package
loads them from bundles.

The fake (meta) implementation that ``torch.compile`` traces with comes from the signature:
each output's shape is evaluated over the input sizes its symbols are read from, with
:data:`SYMBOLIC` semantics that keep ``torch.SymInt`` sizes symbolic, so a dynamic-shape
kernel traces under ``torch.compile(dynamic=True)`` without being specialised. Tensors the
kernel may write are declared mutated (``Tensor(a!)``); a kernel without outputs returns
nothing. Needs only the standard library and torch.
"""

from __future__ import annotations

import keyword
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..errors import ArgumentError, TilewrightError
from .expr import COMPARISONS, ExprError, Semantics
from .expr import parse as parse_expr
from .signature import KernelSignature

_QUALNAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)$")
# schema types of scalar parameters, by the kernel's dtype
_SCALAR_TYPES = {"bool": "bool", "float16": "float", "bfloat16": "float", "float32": "float",
                 "float64": "float", **{f"{s}int{b}": "int" for s in ("", "u")
                                        for b in (8, 16, 32, 64)}}
_RESERVED = frozenset({"self", "out", "input", "Tensor", "int", "float", "bool", "str"})


class OpError(TilewrightError):
    """A kernel that cannot be registered as, or run through, a PyTorch operator; the message
    names the operator and what to do."""


def _truth(v):
    return v if isinstance(v, bool | torch.SymBool) else v != 0


def _as_int(b):
    return int(b) if isinstance(b, bool) else torch.sym_ite(b, 1, 0)


def _compared(fn):
    return lambda a, b: _as_int(fn(a, b))


def _sym_ite(c, t, f):
    c = _truth(c)
    if isinstance(c, bool):
        return t() if c else f()
    return torch.sym_ite(c, t(), f())


def _sym_truncdiv(a, b):
    same_sign = _truth((a >= 0) == (b > 0)) if not isinstance(a, int) or \
        not isinstance(b, int) else (a >= 0) == (b > 0)
    return _sym_ite(same_sign, lambda: a // b, lambda: -((-a) // b))


def _all(parts):
    out = True
    for p in parts:
        out = out & _truth(p())
    return _as_int(out)


def _any(parts):
    out = False
    for p in parts:
        out = out | _truth(p())
    return _as_int(out)


SYMBOLIC = Semantics(
    value=lambda v: v, add=lambda a, b: a + b, sub=lambda a, b: a - b,
    mul=lambda a, b: a * b, floordiv=lambda a, b: a // b, mod=lambda a, b: a % b,
    neg=lambda a: -a, not_=lambda a: _as_int(torch.sym_not(_truth(a))),
    compare={k: _compared(f) for k, f in COMPARISONS.items()},
    and_=_all, or_=_any, ite=_sym_ite,
    calls={"min": torch.sym_min, "max": torch.sym_max, "truncdiv": _sym_truncdiv,
           "truncmod": lambda a, b: a - b * _sym_truncdiv(a, b)},
)
"""Semantics over ``torch.SymInt``: no ``int()``, no Python ``min``/``max`` or branching on a
symbolic value (each would guard on it and specialise the traced graph)."""


# -- the schema ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Argument:
    """One argument of an operator: a tensor (``mutable`` when the kernel may write it) or a
    scalar of schema type ``int``, ``float``, ``bool`` or ``str`` (``default`` when it has
    one)."""

    name: str
    type: str  # Tensor | int | float | bool | str
    mutable: bool = False
    default: object = None
    has_default: bool = False


def arguments_of(signature: KernelSignature) -> list[Argument]:
    """The operator arguments of a compiled kernel: its inputs in kernel order."""
    return [Argument(p.name, "Tensor", p.written) if p.kind == "tensor" else
            Argument(p.name, _SCALAR_TYPES[p.dtype]) for p in signature.inputs]


def schema_of(qualname: str, arguments: Sequence[Argument], outputs: int) -> str:
    """The ``torch.library`` schema: ``(Tensor(a!) q, Tensor x, float eps) -> Tensor``."""
    parts, alias = [], 0
    for a in arguments:
        if not a.name.isidentifier() or keyword.iskeyword(a.name) or a.name in _RESERVED:
            raise OpError(f"torch op {qualname}: parameter {a.name!r} cannot be an operator "
                          "argument name; rename it in the kernel")
        kind = a.type
        if a.mutable:
            kind = f"Tensor({_alias(alias)}!)"
            alias += 1
        text = f"{kind} {a.name}"
        if a.has_default:
            text += f"={_default(qualname, a)}"
        parts.append(text)
    returns = "()" if outputs == 0 else "Tensor" if outputs == 1 else \
        "(" + ", ".join(["Tensor"] * outputs) + ")"
    return f"({', '.join(parts)}) -> {returns}"


def _alias(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i] if i < 26 else f"{letters[i // 26 - 1]}{letters[i % 26]}"


def _default(qualname: str, a: Argument) -> str:
    v = a.default
    if a.type == "bool" and isinstance(v, bool):
        return "True" if v else "False"
    if a.type == "int" and isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if a.type == "float" and isinstance(v, int | float) and not isinstance(v, bool):
        return repr(float(v))
    if a.type == "str" and isinstance(v, str) and '"' not in v and "\\" not in v:
        return f'"{v}"'
    raise OpError(f"torch op {qualname}: the default {v!r} of {a.name!r} cannot be written in "
                  f"an operator schema as {a.type}")


# -- variants --------------------------------------------------------------------------------
def check_shapes_from_inputs(qualname: str, signature: KernelSignature) -> None:
    """Every output dimension must be computable from the inputs' sizes: an OpError naming
    the output and the symbol when it depends on a value (a scalar argument) instead, or when
    a tensor is passed packed (int4), which the operator's shapes cannot say."""
    packed = [p.name for p in signature.params if p.packed_bits]
    if packed:
        raise OpError(f"torch op {qualname}: kernel {signature.name} takes {', '.join(packed)} "
                      "packed (int4, two values a byte), which an operator's shapes cannot "
                      "describe; call the kernel itself")
    sized = {s for s, _, _ in signature.symbols}
    for p in signature.outputs:
        for d in p.shape:
            if isinstance(d, int):
                continue
            names = parse_expr(d).names - sized
            if names:
                raise OpError(
                    f"torch op {qualname}: output {p.name!r} of kernel {signature.name} has "
                    f"shape {_fmt(p.shape)}, which depends on the value of "
                    f"{', '.join(sorted(names))}, not on input shapes; torch traces operators "
                    "with tensors that have shapes but no values. Make it a dimension of an "
                    "input tensor, or pass the output in as a tensor the kernel writes "
                    "(leave it out of out_idx)")


@dataclass
class Variant:
    """A compiled kernel an operator can run; ``ranges`` bound shape symbols (a kernel
    package's declared range, inclusive)."""

    call: Callable  # a KernelCall: inputs in, outputs allocated and returned
    signature: KernelSignature
    ranges: dict = field(default_factory=dict)

    def __post_init__(self):
        # per tensor input: (position, torch dtype, rank, ((dimension, static size), ...))
        self._tensors = tuple(
            (pos, getattr(torch, p.dtype), len(p.shape),
             tuple((d, n) for d, n in enumerate(p.shape) if isinstance(n, int)))
            for pos, p in enumerate(self.signature.inputs) if p.kind == "tensor")
        # per bounded symbol: (symbol, input position, dimension, low, high)
        self._bounds = tuple((s, pos, dim, *self.ranges[s])
                             for s, pos, dim in self.signature.symbols if s in self.ranges)

    def accepts(self, inputs) -> bool:
        """Whether the dtypes, ranks and static dimensions of ``inputs`` fit; on fake
        tensors a static dimension compared with a symbolic size guards on it (the variant
        exists for that size only)."""
        for pos, dtype, rank, static in self._tensors:
            arg = inputs[pos]
            if not isinstance(arg, torch.Tensor) or arg.dtype != dtype or arg.dim() != rank:
                return False
            for dim, want in static:
                if not _same(arg.shape[dim], want):
                    return False
        return True

    def out_of_range(self, inputs):
        """The first (symbol, size, low, high) of ``inputs`` outside the declared ranges, or
        None; for real tensors (no guards)."""
        for s, pos, dim, lo, hi in self._bounds:
            value = inputs[pos].shape[dim]
            if not lo <= value <= hi:
                return s, value, lo, hi
        return None

    def describe(self) -> str:
        parts = []
        for p in self.signature.inputs:
            if p.kind == "tensor":
                parts.append(f"{p.name}: {p.dtype}{_fmt(p.shape)}")
        text = ", ".join(parts)
        if self.ranges:
            text += " with " + ", ".join(f"{lo} <= {s} <= {hi}"
                                         for s, (lo, hi) in sorted(self.ranges.items()))
        return text


def _same(got, want: int) -> bool:
    return bool(got == want)


def _overlap(a: KernelSignature, b: KernelSignature) -> bool:
    """Whether some inputs could fit both signatures (symbolic dimensions fit anything)."""
    for p, q in zip(a.inputs, b.inputs):
        if p.kind != "tensor":
            continue
        if p.dtype != q.dtype or len(p.shape) != len(q.shape):
            return False
        if any(isinstance(x, int) and isinstance(y, int) and x != y
               for x, y in zip(p.shape, q.shape)):
            return False
    return True


def _fmt(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def output_shapes(signature: KernelSignature, inputs, semantics: Semantics = SYMBOLIC):
    """The shape of each output of ``signature`` for ``inputs`` (tensors and scalars in kernel
    order), computed under ``semantics``: :data:`SYMBOLIC` for fake tensors."""
    symbols = {s: inputs[pos].shape[dim] for s, pos, dim in signature.symbols}
    shapes = []
    for p in signature.outputs:
        shapes.append(tuple(d if isinstance(d, int) else
                            parse_expr(d).evaluate(symbols, semantics) for d in p.shape))
    return symbols, shapes


# -- the operator ----------------------------------------------------------------------------
class TorchOp:
    """A registered operator: ``op(*args)`` calls ``torch.ops.<ns>.<name>``; ``variants``
    holds the compiled kernels of each device type; ``outputs`` names the kernel's outputs.

    ``resolve(device, args)``, when given, replaces the variants: it returns the kernel to
    call and its inputs (the JIT's eager kernels compile one per specialisation); ``fake``
    then computes the fake outputs from the operator's arguments. ``unavailable`` maps device
    types to why the operator has no kernel there and what to do (said when tensors arrive
    on one).

    ``native(qualname, device, dispatch_key, n_arguments)``, when given, returns the kernel to
    register in C++ for a device (or None: the Python implementation is registered): an
    object with ``update(entries)``, called with the device's variants whenever they change
    (triples of a :class:`Variant`, the operator argument of each kernel input and the
    compile-time values it needs), and ``remove()``. Its calls fall back to the Python
    implementation, registered as the companion operator ``<ns>::<name>__python``. With
    ``resolve``, the kernels it returns join the C++ kernel's variants while ``learn()`` says
    that the kernel a call resolves to depends on the arguments' dtypes, ranks, static sizes
    and compile-time values alone."""

    def __init__(self, qualname: str, arguments: Sequence[Argument], outputs: Sequence[str],
                 devices: Sequence[str], *, origin: str = "", resolve=None, fake=None,
                 unavailable: dict | None = None, native=None, learn=None):
        match = _QUALNAME.match(qualname or "")
        if match is None:
            raise OpError(f"torch op name {qualname!r} must look like 'namespace::name' "
                          "(letters, digits and _)")
        self.qualname, self.namespace, self.name = qualname, match[1], match[2]
        self.arguments = tuple(arguments)
        self.outputs = tuple(outputs)  # the names of the kernel's outputs
        self.origin = origin
        self.variants: dict[str, list[Variant]] = {d: [] for d in devices}
        self.unavailable = dict(unavailable or {})
        self._resolve, self._fake = resolve, fake
        self._lock = threading.Lock()
        self._native_factory, self._learn = native, learn
        self._native: dict = {}  # device -> its C++ kernel
        self._learned: dict[str, dict] = {}  # device -> {key: (variant, sources, consts)}
        self.schema = schema_of(qualname, self.arguments, len(self.outputs))
        self._library = _register(self)
        self.op = getattr(getattr(torch.ops, self.namespace), self.name)
        """``torch.ops.<ns>.<name>``."""

    # -- variants ---------------------------------------------------------------------------
    def add(self, device: str, call, signature: KernelSignature,
            ranges: dict | None = None) -> Variant:
        """Add a compiled kernel for ``device``; an OpError if it takes other parameters than
        the operator, or if some input could fit it and an existing variant alike."""
        if device not in self.variants:
            raise OpError(f"torch op {self.qualname} is registered for "
                          f"{', '.join(self.variants)}, not {device!r}")
        check_shapes_from_inputs(self.qualname, signature)
        self.check_parameters(signature)
        variant = Variant(call, signature, dict(ranges or {}))
        with self._lock:
            clash = ambiguity(self.qualname, device, self.variants[device], variant)
            if clash is not None:
                raise clash
            self.variants[device].append(variant)
            self._sync(device)
        return variant

    def _sync(self, device: str) -> None:
        """Give the device's C++ kernel, if any, its variants (called under the lock)."""
        kernel = self._native.get(device)
        if kernel is None:
            return
        if self._resolve is None:
            kernel.update([(v, range(len(v.signature.inputs)), {})
                           for v in self.variants[device]])
        else:
            kernel.update(list(self._learned.get(device, {}).values()))

    def forget_learned(self) -> None:
        """Drop the kernels of ``resolve`` the C++ kernels run (they are learned again)."""
        with self._lock:
            self._learned.clear()
            for device in self._native:
                self._sync(device)

    def _learn_variant(self, device: str, call, args) -> None:
        """Add the kernel ``resolve`` returned for ``args`` to the device's C++ kernel."""
        # torch leaves trailing defaults out of a Python kernel's arguments; C++ gets them all
        consts = {i: args[i] if i < len(args) else a.default
                  for i, a in enumerate(self.arguments) if a.type != "Tensor"}
        key = (id(call), tuple(sorted(consts.items())))
        with self._lock:
            learned = self._learned.setdefault(device, {})
            if key in learned or len(learned) >= MAX_LEARNED:
                return
            index = {a.name: i for i, a in enumerate(self.arguments)}
            sources = [index[p.name] for p in call.signature.inputs]
            learned[key] = (Variant(call, call.signature), sources, consts)
            self._sync(device)

    def check_parameters(self, signature: KernelSignature) -> None:
        """An OpError unless ``signature`` takes this operator's kernel inputs."""
        theirs = arguments_of(signature)
        if [(a.name, a.type, a.mutable) for a in theirs] != \
                [(a.name, a.type, a.mutable) for a in self.arguments] or \
                len(signature.outputs) != len(self.outputs):
            other = schema_of(self.qualname, theirs, len(signature.outputs))
            raise OpError(f"torch op {self.qualname} has schema {self.schema}; kernel "
                          f"{signature.name} has {other}. Register it as another operator")

    def pick(self, device: str, inputs) -> Variant | None:
        """The variant of ``device`` that accepts ``inputs`` (kernel inputs), or None."""
        for variant in self.variants.get(device, ()):
            if variant.accepts(inputs):
                return variant
        return None

    def no_kernel(self, device: str, inputs) -> OpError:
        """The error for inputs no variant of ``device`` accepts."""
        given = ", ".join(f"{p.name}: {str(a.dtype)[6:]}{tuple(a.shape)}"
                          for p, a in zip(self.arguments, inputs)
                          if isinstance(a, torch.Tensor))
        have = "; ".join(v.describe() for v in self.variants.get(device, ())) or "none"
        return OpError(f"torch op {self.qualname} has no {device} kernel for {given}; it has "
                       f"kernels for: {have}. Build one for these shapes and dtypes (compile "
                       "the kernel for them, or add them to the kernel package)")

    # -- calling ----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def run(self, device: str, args):
        """The real implementation on ``device``. An operator with one unbounded variant
        calls it at once (the kernel checks its inputs; one it refuses gets the operator's
        error); otherwise the variant that accepts the inputs runs, its ranges checked."""
        if self._resolve is not None:
            call, inputs = self._resolve(device, args)
            out = call(*inputs)
            if device in self._native and self._learn is not None and self._learn():
                self._learn_variant(device, call, args)
            return tuple(out) if isinstance(out, list) else out
        variants = self.variants[device]
        if len(variants) == 1 and not variants[0].ranges:
            variant = variants[0]
            try:
                out = variant.call(*args)
            except ArgumentError:
                if variant.accepts(args):
                    raise
                raise self.no_kernel(device, args) from None
            return tuple(out) if isinstance(out, list) else out
        variant = self.pick(device, args)
        if variant is None:
            raise self.no_kernel(device, args)
        outside = variant.out_of_range(args)
        if outside is not None:
            raise OpError(self._range_message(*outside))
        out = variant.call(*args)
        return tuple(out) if isinstance(out, list) else out

    def _check_ranges(self, variant: Variant, inputs) -> None:
        """The ranges of ``variant`` on symbolic sizes: runtime checks, not guards."""
        for s, pos, dim, lo, hi in variant._bounds:
            value = inputs[pos].shape[dim]
            torch._check(lo <= value, lambda s=s, v=value, lo=lo, hi=hi:
                         self._range_message(s, v, lo, hi))
            torch._check(value <= hi, lambda s=s, v=value, lo=lo, hi=hi:
                         self._range_message(s, v, lo, hi))

    def _range_message(self, symbol, value, lo, hi) -> str:
        return (f"torch op {self.qualname}: {symbol} = {value} is outside the range "
                f"[{lo}, {hi}] its kernel was packaged for; package it with a range that "
                "holds this size")

    def fake(self, *args, **kwargs):
        """The fake implementation: outputs with the shapes and dtypes the signature gives."""
        if self._fake is not None:
            return self._fake(*args, **kwargs)
        inputs = args
        devices = [d for d, vs in self.variants.items() if vs]
        variant = next((v for d in devices for v in self.variants[d] if v.accepts(inputs)),
                       None)
        if variant is None:
            raise self.no_kernel(devices[0] if devices else "any", inputs)
        if variant.ranges:
            self._check_ranges(variant, inputs)
        return fake_outputs(self.qualname, variant.signature, inputs)

    def remove(self) -> None:
        """Unregister the operator (its name may then be registered again)."""
        _REGISTERED.pop(self.qualname, None)
        for kernel in self._native.values():
            kernel.remove()
        self._library._destroy()

    def __repr__(self) -> str:
        return f"TorchOp({self.qualname}: {self.schema})"


def fake_outputs(qualname: str, signature: KernelSignature, inputs):
    """Empty outputs of ``signature`` for ``inputs`` (fake tensors and scalars in kernel
    order), their sizes symbolic where the inputs' are; input dimensions that are expressions
    become runtime checks, not guards. A wrong dtype or rank is an ArgumentError naming the
    operator."""
    for spec, arg in zip(signature.inputs, inputs):
        if spec.kind != "tensor":
            continue
        if not isinstance(arg, torch.Tensor) or str(arg.dtype)[6:] != spec.dtype or \
                arg.dim() != len(spec.shape):
            got = f"{str(arg.dtype)[6:]} of rank {arg.dim()}" if isinstance(arg, torch.Tensor) \
                else type(arg).__name__
            raise ArgumentError(f"torch op {qualname}: {spec.name!r} must be a {spec.dtype} "
                                f"tensor of shape {_fmt(spec.shape)}, got {got}")
    symbols, shapes = output_shapes(signature, inputs)
    for spec, arg in zip(signature.inputs, inputs):
        for dim, want in enumerate(spec.shape):
            if isinstance(want, str) and not want.isidentifier():
                value = parse_expr(want).evaluate(symbols, SYMBOLIC)
                torch._check(arg.shape[dim] == value, lambda s=spec, d=dim, w=want:
                             f"argument {s.name!r} of kernel {signature.name}: dimension {d} "
                             f"must be {w}")
    device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), None)
    outs = [torch.empty(shape, dtype=getattr(torch, p.dtype), device=device)
            for shape, p in zip(shapes, signature.outputs)]
    return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def ambiguity(qualname: str, device: str, variants, new: Variant) -> OpError | None:
    """The error for adding ``new`` to ``variants`` when some input could fit it and one of
    them alike (so a call could not tell which to run); None when every input tells them
    apart."""
    for other in variants:
        if _overlap(other.signature, new.signature) and not _disjoint(other, new):
            return OpError(f"torch op {qualname} already runs kernel {other.signature.name} "
                           f"({other.describe()}) on {device}, and kernel "
                           f"{new.signature.name} ({new.describe()}) would accept some of the "
                           "same inputs, so a call could not tell which to run. Register it "
                           "as another operator (kernel.as_torch_op('ns::other_name'))")
    return None


def _disjoint(a: Variant, b: Variant) -> bool:
    """Whether the declared ranges keep two otherwise overlapping variants apart."""
    for s, (lo, hi) in a.ranges.items():
        if s in b.ranges and (b.ranges[s][1] < lo or hi < b.ranges[s][0]):
            where_a = next(((pos, dim) for n, pos, dim in a.signature.symbols if n == s), None)
            where_b = next(((pos, dim) for n, pos, dim in b.signature.symbols if n == s), None)
            if where_a is not None and where_a == where_b:
                return True
    return False


# -- registration ----------------------------------------------------------------------------
_REGISTERED: dict[str, TorchOp] = {}
PYTHON_SUFFIX = "__python"
"""The companion operator ``<name>__python`` holds the Python implementation of an operator
registered in C++ (see ``native`` of :class:`TorchOp`)."""
MAX_LEARNED = 64  # kernels of ``resolve`` a C++ kernel runs, per device
# torch's device type names of the dispatch keys an operator is registered under
_DISPATCH = {"cpu": "CPU", "cuda": "CUDA", "npu": "PrivateUse1"}


def registered(qualname: str) -> TorchOp | None:
    """The operator registered under ``qualname`` by tilewright in this process, if any."""
    return _REGISTERED.get(qualname)


def _register(op: TorchOp):
    """Define ``op`` with torch: its schema, an implementation per device type, the fake,
    and for other devices an implementation that raises an OpError saying what to do."""
    existing = _REGISTERED.get(op.qualname)
    if existing is not None:
        raise OpError(f"torch op {op.qualname} is already registered by tilewright "
                      f"({existing.origin or existing.schema}); pick another name, or remove "
                      "the first one (op.remove())")
    try:
        getattr(getattr(torch.ops, op.namespace), op.name)
    except (AttributeError, RuntimeError):
        pass
    else:
        raise OpError(f"torch op {op.qualname} already exists (registered outside tilewright); "
                      "pick another name")
    lib = torch.library.Library(op.namespace, "FRAGMENT")
    try:
        lib.define(f"{op.name}{op.schema}")
        for device in op.variants:
            key = _DISPATCH.get(device)
            if key is None:
                raise OpError(f"torch op {op.qualname}: tilewright cannot register kernels "
                              f"for device type {device!r}")
            if device == "npu" and torch._C._get_privateuse1_backend_name() != "npu":
                continue  # torch_npu is not loaded: no tensor can be on an NPU
            kernel = op._native_factory and \
                op._native_factory(op.qualname, device, key, len(op.arguments))
            if kernel:
                op._native[device] = kernel
                if len(op._native) == 1:
                    lib.define(f"{op.name}{PYTHON_SUFFIX}{op.schema}")
                lib.impl(op.name + PYTHON_SUFFIX, _device_impl(op, device), key)
            else:
                lib.impl(op.name, _device_impl(op, device), key)
        lib.impl(op.name, _no_device_impl(op), "CompositeExplicitAutograd")
        torch.library.register_fake(op.qualname, op.fake, lib=lib)
    except BaseException:
        for kernel in op._native.values():
            kernel.remove()
        lib._destroy()
        raise
    _REGISTERED[op.qualname] = op
    return lib


def _device_impl(op: TorchOp, device: str):
    def impl(*args):
        return op.run(device, args)

    impl.__name__ = f"{op.name}_{device}"
    return impl


def _no_device_impl(op: TorchOp):
    def impl(*args):
        device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "none")
        have = ", ".join(op.variants) or "no device"
        advice = op.unavailable.get(device) or \
            f"no installed tilewright backend runs on {device!r}; install one"
        raise OpError(f"torch op {op.qualname} got tensors on {device!r}, where it has no "
                      f"kernel: {advice}. It runs on {have}: move the tensors there")

    return impl


__all__ = ["MAX_LEARNED", "PYTHON_SUFFIX", "SYMBOLIC", "Argument", "ExprError", "OpError",
           "TorchOp", "Variant", "arguments_of", "check_shapes_from_inputs", "fake_outputs",
           "output_shapes", "registered", "schema_of"]
