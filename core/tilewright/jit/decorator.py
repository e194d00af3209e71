"""``@tilewright.jit``, ``tilewright.compile`` and ``tilewright.lower``.

Two authoring styles:

- kernel factory: the decorated function takes compile-time values and returns a
  ``@T.prim_func``; calling it returns a compiled :class:`JITKernel`;
- eager: the decorated function takes tensors (declared in the body with ``A: T.Tensor``),
  declares outputs with ``T.empty`` and returns them; calling it with tensors compiles (once
  per specialisation) and runs the kernel.

Compiled kernels are kept in memory keyed by the arguments and by a snapshot of the globals,
closure variables and helper functions the kernel's code reads (see
:mod:`tilewright.jit.reads` for exactly what is noticed); ``fn.cache_clear()`` forgets them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from ..engine import lower as _lower_engine
from ..errors import ArgumentError, KernelError
from .kernel import JITKernel, compile
from .reads import Reads


def lower(func, target="auto", pass_configs=None):
    """Lower ``func`` for ``target`` without building it; returns the engine's
    :class:`~tilewright.engine.Lowered` (final IR module and generated source)."""
    return _lower_engine(func, target, pass_configs)


def _is_factory(fn) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return True
    for node in ast.walk(tree.body[0]):
        if node is tree.body[0] or not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "prim_func":
                return True
    return False


def _is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "dtype") and \
        hasattr(value, "shape")


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise ArgumentError(f"compile-time argument {value!r} must be hashable") from None
    return value


class JITFunction:
    """What ``@jit`` returns."""

    def __init__(self, fn, out_idx=None, target="auto", pass_configs=None,
                 execution_backend=None):
        self.fn = fn
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        self.execution_backend = execution_backend
        self.factory = _is_factory(fn)
        self._signature = inspect.signature(fn)
        self._kernels: dict = {}
        self._recipes: dict = {}
        self._reads = Reads(fn)
        functools.update_wrapper(self, fn)

    def cache_clear(self) -> None:
        """Forget the kernels compiled in this process (the disk cache is kept)."""
        self._kernels.clear()
        self._recipes.clear()

    def _compile(self, func) -> JITKernel:
        return compile(func, out_idx=self.out_idx, target=self.target,
                       pass_configs=self.pass_configs, execution_backend=self.execution_backend)

    def __call__(self, *args, **kwargs):
        if self.factory:
            key = (_freeze(args), _freeze(kwargs), self._reads.snapshot())
            kernel = self._kernels.get(key)
            if kernel is None:
                func = self.fn(*args, **kwargs)
                if not hasattr(func, "script"):
                    raise KernelError(f"{self.fn.__name__} must return a @T.prim_func, got "
                                      f"{type(func).__name__}")
                kernel = self._kernels[key] = self._compile(func)
            return kernel
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        tensors = {k: v for k, v in bound.arguments.items() if _is_tensor(v)}
        static = {k: v for k, v in bound.arguments.items() if k not in tensors}
        kernel = self._eager_kernel(tensors, static)
        inputs = [tensors.get(p.name) for p in kernel.signature.inputs]
        missing = [p.name for p, t in zip(kernel.signature.inputs, inputs) if t is None]
        if missing:
            raise ArgumentError(f"{self.fn.__name__}: no tensor passed for {', '.join(missing)}")
        return kernel(*inputs)

    def _eager_kernel(self, tensors: dict, static: dict) -> JITKernel:
        from ..language.kernel import _ParamSlot, trace_eager

        level1 = (_freeze(static), tuple((k, str(t.dtype), t.dim()) for k, t in tensors.items()),
                  self._reads.snapshot())
        recipe = self._recipes.get(level1)
        slots = {k: _ParamSlot(k, t) for k, t in tensors.items()}
        if recipe is None:
            _, builder, _ = trace_eager(self.fn, {**static, **slots}, None)
            declared = {p.name for p in builder.params}
            undeclared = sorted(set(tensors) - declared)
            if undeclared:
                raise KernelError(f"{self.fn.__name__}: tensor argument(s) {undeclared} are "
                                  "never declared; add 'NAME: T.Tensor(shape, dtype)' in the body")
            unbound = sorted(set(builder.const_symbols) - set(builder.const_sources))
            if unbound:
                raise KernelError(f"{self.fn.__name__}: T.const symbol(s) {unbound} appear in "
                                  "no tensor annotation, so no argument gives their value")
            recipe = self._recipes[level1] = dict(builder.const_sources)
        consts = {name: int(tensors[p].shape[d]) for name, (p, d) in recipe.items()}
        key = (level1, tuple(sorted(consts.items())))
        kernel = self._kernels.get(key)
        if kernel is None:
            func, _, _ = trace_eager(self.fn, {**static, **slots}, consts)
            kernel = self._kernels[key] = self._compile(func)
        return kernel

    def compile(self, *args, **kwargs) -> JITKernel:
        """Compile without running: factory arguments, or ``T.const`` values by name (eager)."""
        if self.factory:
            return self(*args, **kwargs)
        from ..language.kernel import _ParamSlot, trace_eager

        params = self._signature.parameters
        static = {k: v for k, v in kwargs.items() if k in params}
        consts = {k: v for k, v in kwargs.items() if k not in params}
        for name, param in params.items():
            if name not in static and param.default is not inspect.Parameter.empty:
                static[name] = param.default
            elif name not in static:
                static[name] = _ParamSlot(name)
        func, _, _ = trace_eager(self.fn, static, consts)
        return self._compile(func)


def jit(fn=None, *, out_idx=None, target="auto", pass_configs=None, execution_backend=None,
        **_ignored):
    """Decorate a kernel factory or an eager kernel (see the module docstring)."""
    def wrap(f):
        return JITFunction(f, out_idx, target, pass_configs, execution_backend)

    return wrap(fn) if fn is not None else wrap
