"""PyTorch operators of JIT kernels: ``kernel.as_torch_op(name)`` and ``@jit(torch_op=name)``.

- A compiled kernel (``kernel.as_torch_op("ns::name")``) becomes an operator whose schema is
  its inputs in kernel order (tensors, and scalars as ``int``/``float``/``bool``), registered
  for the device type of the backend that compiled it.
- A kernel factory (``@jit(torch_op=...)``) registers its operator when it first returns a
  kernel; a kernel it returns later (other compile-time arguments) joins the operator when
  some input tells the kernels apart (another dtype or static shape) and is refused with an
  error naming both otherwise.
- An eager kernel (``@jit(torch_op=...)``) registers its operator at once, with the Python
  function's parameters as arguments: tensors, and its compile-time parameters (they need a
  default) as schema scalars. Each call compiles, once per specialisation, for the backend of
  the tensors' device; the fake implementation traces the program with its ``T.const``
  symbols left symbolic, so output sizes follow input sizes without specialising.
"""

from __future__ import annotations

import inspect

import torch

from ..engine import resolve_target
from ..plugin import get_manager
from ..runtime.torchop import Argument, OpError, TorchOp, arguments_of, fake_outputs
from .native_op import native_kernel
from .signature import output_indices, signature_of

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}


def device_targets(target) -> tuple[dict, dict]:
    """(device type -> target to compile for, device type -> why no backend runs there).

    An explicit target runs on its backend's device only; ``"auto"`` runs on every device an
    installed backend can run on (the CPU backend for ``cpu``)."""
    manager = get_manager()
    runnable, unavailable = {}, {}
    if target not in (None, "auto"):
        _, backend = resolve_target(target)
        runnable[backend.device] = target  # as given: a cheap key of the eager kernel cache
    else:
        for backend in sorted(manager.backends().values(), key=lambda b: b.name):
            if backend.device == "cpu":
                continue
            available = backend.device_available()
            if available and any(e.available() for e in backend.executors):
                runnable.setdefault(backend.device, backend.target_kinds[0])
            else:
                reason = getattr(available, "reason", "") or "no usable executor"
                unavailable.setdefault(backend.device, f"backend '{backend.name}' is installed "
                                       f"but cannot run here ({reason})")
        runnable["cpu"] = "cpu"
    for backend in manager.backends().values():
        if backend.device not in runnable and backend.device not in unavailable:
            unavailable[backend.device] = (
                f"its kernels are compiled for target '{target}'; compile the kernel for "
                f"'{backend.device}' too (backend '{backend.name}') and register it as "
                "another operator")
    return runnable, unavailable


def register_kernel(kernel, name: str, origin: str = "") -> TorchOp:
    """``kernel.as_torch_op(name)``: an operator running this one compiled kernel."""
    signature = kernel.signature
    device = kernel.backend.device
    _, unavailable = device_targets(kernel.target)
    op = TorchOp(name, arguments_of(signature), [p.name for p in signature.outputs], [device],
                 origin=origin or f"kernel {signature.name}", unavailable=unavailable,
                 native=native_kernel)
    try:
        op.add(device, kernel, signature)
    except BaseException:
        op.remove()
        raise
    return op


def bind_factory_kernel(op: TorchOp | None, name: str, kernel, fn) -> TorchOp:
    """The operator of a factory after it returned ``kernel``: registered with it, or with it
    added (an OpError when it would be ambiguous)."""
    if op is None:
        return register_kernel(kernel, name, f"kernel factory {fn.__qualname__}")
    op.add(kernel.backend.device, kernel, kernel.signature)
    return op


def register_eager(jitfn, name: str) -> TorchOp:
    """The operator of an eager kernel: one schema over every specialisation."""
    params = inspect.signature(jitfn.fn).parameters
    static_types = {}
    for pname, p in params.items():
        kind = _SCALARS.get(p.annotation if p.annotation in _SCALARS else type(p.default))
        if p.default is not inspect.Parameter.empty or p.annotation in _SCALARS:
            if kind is None or p.default is inspect.Parameter.empty:
                raise OpError(f"torch op {name}: compile-time parameter {pname!r} of "
                              f"{jitfn.fn.__name__} becomes an operator argument, so it needs "
                              "a default of type int, float, bool or str")
            static_types[pname] = kind
    tensors = [p for p in params if p not in static_types]
    defaults = {k: params[k].default for k in static_types}
    signature = _generic_signature(jitfn, defaults, tensors)
    specs = {p.name: p for p in signature.inputs}
    strays = sorted(set(specs) - set(tensors))
    if strays:
        raise OpError(f"torch op {name}: kernel inputs {strays} of {jitfn.fn.__name__} are not "
                      "among its tensor parameters")
    arguments = [Argument(p, "Tensor", specs[p].written if p in specs else False)
                 if p in specs or p in tensors else
                 Argument(p, static_types[p], False, defaults[p], True) for p in params]
    runnable, unavailable = device_targets(jitfn.target)
    order = list(params)
    generic: dict = {}

    def resolve(device, args):
        return jitfn.specialize(args, {}, target=runnable[device])

    def fake(*args, **kwargs):
        bound = {**defaults, **dict(zip(order, args)), **kwargs}
        static = {k: _concrete(bound[k]) for k in static_types}
        key = tuple(sorted(static.items()))
        sig = generic.get(key)
        if sig is None:
            sig = generic[key] = _generic_signature(jitfn, static, tensors)
        return fake_outputs(name, sig, [bound[p.name] for p in sig.inputs])

    return TorchOp(name, arguments, [p.name for p in signature.outputs], list(runnable),
                   origin=f"eager kernel {jitfn.fn.__qualname__}", resolve=resolve, fake=fake,
                   unavailable=unavailable, native=native_kernel,
                   learn=jitfn.specialisations_follow_arguments)


def _generic_signature(jitfn, static: dict, tensors: list):
    func = jitfn.generic_tir(static, dict.fromkeys(tensors))
    return signature_of(func, output_indices(func, jitfn.out_idx))


def _concrete(value):
    """A compile-time argument's value: a symbolic int from a trace is specialised (the
    kernel is compiled for each value)."""
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(value)](value)
    return value
