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
import logging
import os
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

from tvm import tirx

from ..engine import lower as _lower_engine
from ..engine import resolve_target
from ..errors import ArgumentError, KernelError
from ..language.dtypes import DTYPES, DType
from ..language.kernel import ParamSlot, trace_eager
from ..plugin.passconfig import NAMES
from .kernel import JITKernel
from .kernel import compile as _compile_kernel
from .reads import Reads

_log = logging.getLogger(__name__)
# TileLang's execution backends; where the chosen backend has no executor of that name, its
# default executor runs the kernel (said once per name)
TILELANG_EXECUTORS = ("auto", "tvm_ffi", "cython", "nvrtc", "torch", "cutedsl", "ctypes")
_NOTED: set = set()


def _note(message: str, *args) -> None:
    text = message % args
    if text not in _NOTED:
        _NOTED.add(text)
        _log.warning(text)


def _executor(backend, name):
    """``name`` when ``backend`` has an executor so named; None (its default) for "auto" and
    for TileLang's executor names it lacks."""
    if name is None or name == "auto":
        return None
    if any(e.name == name for e in backend.executors) or name not in TILELANG_EXECUTORS:
        return name
    _note("execution_backend=%r is TileLang's; backend '%s' runs kernels with its own "
          "executors (%s)", name, backend.name, ", ".join(e.name for e in backend.executors))
    return None


_CACHE = {"enabled": True}


def disable_cache() -> None:
    """Compile every kernel from now on, bypassing the disk cache (TileLang's
    ``tilelang.disable_cache``)."""
    _CACHE["enabled"] = False


def enable_cache() -> None:
    """Use the disk cache again (the default)."""
    _CACHE["enabled"] = True


def is_cache_enabled() -> bool:
    return _CACHE["enabled"]


def _with_flags(pass_configs, compile_flags):
    """``compile_flags`` travel as TileLang's TL_DEVICE_COMPILE_FLAGS pass config; with the
    cache disabled, ``tw.disable_cache`` is set."""
    configs = dict(pass_configs or {})
    if compile_flags is not None:
        configs[NAMES.TL_DEVICE_COMPILE_FLAGS] = compile_flags
    if not _CACHE["enabled"]:
        configs["tw.disable_cache"] = True
    return configs


def prim_func_of(func, api: str) -> tirx.PrimFunc:
    """The tile program ``func`` names for ``tilewright.<api>``: a ``@T.prim_func`` itself, a
    compiled :class:`JITKernel`'s (its ``get_tir()``); anything else is an ``ArgumentError``
    (a TypeError) naming what was passed, a ``@jit`` factory with how to get its program."""
    if isinstance(func, tirx.PrimFunc):
        return func
    if isinstance(func, JITKernel):
        return func.get_tir()
    if isinstance(func, JITFunction):
        raise ArgumentError(
            f"tilewright.{api} takes a T.prim_func, got the @jit function "
            f"'{func.__name__}': pass {func.__name__}.get_tir(<its arguments>), or call it "
            "to compile")
    raise ArgumentError(f"tilewright.{api} takes a T.prim_func (or a compiled kernel), got "
                        f"{type(func).__name__} {func!r:.80}")


def compile(func, out_idx=None, execution_backend=None, target="auto",  # noqa: A001
            target_host=None, verbose=None, pass_configs=None, compile_flags=None,
            cache=None) -> JITKernel:
    """Compile a tile-level PrimFunc into a :class:`JITKernel` (TileLang's ``compile``).

    ``compile_flags`` become the ``TL_DEVICE_COMPILE_FLAGS`` pass config (a backend that
    compiles device code with flags uses them; the others say in one log line that they do
    not); ``target_host`` is logged as having no effect (each backend builds its own host
    code); ``verbose`` prints one line per compilation (name, target, executor, seconds)."""
    if target_host is not None:
        _note("target_host=%r has no effect: each backend builds its own host code",
              target_host)
    target_obj, backend = resolve_target(target)  # a bad target is named first
    func = prim_func_of(func, "compile")
    start = time.perf_counter()
    kernel = _compile_kernel(func, out_idx=out_idx, target=target_obj,
                             pass_configs=_with_flags(pass_configs, compile_flags),
                             execution_backend=_executor(backend, execution_backend),
                             cache=cache)
    if verbose:
        print(f"tilewright: compiled {kernel.signature.name} for {target_obj} (backend "
              f"{backend.name}, executor {kernel.executor}) in "
              f"{time.perf_counter() - start:.2f} s", flush=True)
    return kernel


def par_compile(funcs, out_idx=None, execution_backend=None, target="auto", target_host=None,
                verbose=None, pass_configs=None, compile_flags=None, num_workers=None,
                ignore_error: bool = False) -> list:
    """Compile several PrimFuncs on ``num_workers`` threads (default: one per core); the
    kernels in order. With ``ignore_error`` a failed compilation is logged and gives None."""
    funcs = [prim_func_of(func, "par_compile") for func in funcs]

    def one(func):
        try:
            return compile(func, out_idx, execution_backend, target, target_host, verbose,
                           pass_configs, compile_flags)
        except Exception as exc:
            if not ignore_error:
                raise
            _log.warning("par_compile: %s failed: %s: %s",
                         func.attrs["global_symbol"] if func.attrs else "kernel",
                         type(exc).__name__, exc)
            return None

    workers = num_workers or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(funcs) or 1))) as pool:
        return list(pool.map(one, funcs))


def lower(func, target="auto", pass_configs=None):
    """Lower ``func`` for ``target`` without building it; returns the engine's
    :class:`~tilewright.engine.Lowered` (final IR module and generated source)."""
    resolve_target(target)  # a bad target is named first
    return _lower_engine(prim_func_of(func, "lower"), target, pass_configs)


# the language's annotations of a parameter that only a kernel takes (a tensor, an address)
KERNEL_PARAMETERS = frozenset({"Tensor", "StridedTensor", "ptr"})


def _function_tree(fn) -> ast.AST | None:
    """The syntax tree of ``fn``'s definition; None where its source cannot be read."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError):
        return None


def _body_scalars(top: ast.AST | None) -> frozenset:
    """The names an eager kernel's body annotates with a dtype (``n: T.int32``, TileLang's
    dynamic scalars): parameters given at run time."""
    if top is None:
        return frozenset()
    return frozenset(
        node.target.id for node in ast.walk(top)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and
        node.value is None and isinstance(node.annotation, ast.Attribute) and
        node.annotation.attr in DTYPES)


def _matched_params(top: ast.AST | None) -> frozenset:
    """The names ``T.match_buffer(name, ...)`` takes in the function: parameters that become
    tensors (their ``T.const`` sizes read from the tensor passed)."""
    if top is None:
        return frozenset()
    return frozenset(
        node.args[0].id for node in ast.walk(top)
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "match_buffer")


def _is_factory(top: ast.AST | None) -> bool:
    """A kernel factory defines a ``@T.prim_func`` or returns a PrimFunc made elsewhere; an
    eager kernel opens ``T.Kernel`` itself or declares its tensors (``A: T.Tensor[...]`` in
    its body or its signature, or a ``T.ptr`` there), the ``T.Kernel`` in a ``T.macro`` it
    calls (TileLang's eager kernels). ``top``: its definition's syntax tree."""
    if top is None:
        return True
    args = (*top.args.posonlyargs, *top.args.args, *top.args.kwonlyargs) \
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else ()
    params = {a.arg for a in args}
    # a parameter annotated as a tensor or an address (``A: T.Tensor[...]``, ``p: T.ptr``)
    eager = any(isinstance(n, ast.Attribute) and n.attr in KERNEL_PARAMETERS
                for a in args if a.annotation is not None for n in ast.walk(a.annotation))
    for node in ast.walk(top):
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                target = call.func if isinstance(call, ast.Call) else call
                eager = eager or getattr(target, "attr", None) == "Kernel"
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            eager = eager or node.target.id in params
        if node is top or not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "prim_func":
                return True
    return not eager


_TENSOR_TYPES: dict[type, bool] = {}  # type -> whether its values are tensors


def _is_tensor(value) -> bool:
    kind = type(value)
    known = _TENSOR_TYPES.get(kind)
    if known is None:
        known = _TENSOR_TYPES[kind] = kind.__module__.startswith("torch") and \
            hasattr(value, "dtype") and hasattr(value, "shape")
    return known


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
                 execution_backend=None, target_host=None, verbose=None, debug_root_path=None,
                 compile_flags=None, torch_op=None):
        self.fn = fn
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        self.execution_backend = execution_backend
        self.target_host = target_host
        self.verbose = verbose
        self.debug_root_path = debug_root_path
        self.compile_flags = compile_flags
        tree = _function_tree(fn)
        self.factory = _is_factory(tree)
        self._signature = inspect.signature(fn)
        # for binding a call without inspect (see _bind): the parameter names in order and
        # the defaults, when every parameter may be passed by position or by keyword
        kinds = {p.kind for p in self._signature.parameters.values()}
        simple = kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD}
        self._names = tuple(self._signature.parameters) if simple else None
        self._defaults = {k: p.default for k, p in self._signature.parameters.items()
                          if p.default is not inspect.Parameter.empty}
        # an eager kernel's parameters its signature annotates with a dtype (``p: T.ptr``,
        # ``n: T.int32``): given at run time (an int, a float or a tensor's address), never
        # compiled in; but for addresses the body makes tensors with ``T.match_buffer``
        self._scalars = (frozenset(
            name for name, annotation in inspect.get_annotations(fn).items()
            if isinstance(annotation, DType)) | _body_scalars(tree)) & \
            frozenset(self._signature.parameters) - _matched_params(tree)
        self._kernels: dict = {}
        self._recipes: dict = {}
        # an eager kernel's calls by position: (reads, each argument's dtype and shape or
        # value) -> (kernel, the position of each kernel input among the arguments)
        self._calls: dict = {}
        self._reads = Reads(fn)
        functools.update_wrapper(self, fn)
        # the PyTorch operator (tilewright.torch_ops): an eager kernel's is registered now, a
        # factory's when the factory first returns a kernel
        self.torch_op_name = torch_op
        self.torch_op = None
        if torch_op is not None and not self.factory:
            from .torch_op import register_eager  # torch is imported only for operators

            self.torch_op = register_eager(self, torch_op)

    def cache_clear(self) -> None:
        """Forget the kernels compiled in this process (the disk cache is kept), those its
        operator's C++ kernel learned included."""
        self._kernels.clear()
        self._recipes.clear()
        self._calls.clear()
        if self.torch_op is not None:
            self.torch_op.forget_learned()

    def specialisations_follow_arguments(self) -> bool:
        """Whether the kernel an eager call compiles to depends on its arguments alone (the
        dtypes, ranks and ``T.const`` sizes of its tensors and its compile-time values):
        the function reads nothing from outside but tilewright's language and the libraries
        (see :meth:`Reads.library_only`)."""
        return self._reads.library_only()

    def _compile(self, func, target=None) -> JITKernel:
        kernel = compile(func, self.out_idx, self.execution_backend, target or self.target,
                         self.target_host, self.verbose, self.pass_configs, self.compile_flags)
        if self.debug_root_path:
            self._dump(func, kernel)
        return kernel

    def _dump(self, func, kernel: JITKernel) -> None:
        """``debug_root_path``: the generated source and the tile program, as TileLang
        writes them (``tilewright_jit_kernel_<name>.<ext>``, ``..._program_<name>.py``)."""
        os.makedirs(self.debug_root_path, exist_ok=True)
        name = self.fn.__name__
        with open(os.path.join(self.debug_root_path,
                               f"tilewright_jit_kernel_{name}.{kernel.source_ext}"), "w") as f:
            f.write(kernel.get_kernel_source())
        with open(os.path.join(self.debug_root_path,
                               f"tilewright_jit_program_{name}.py"), "w") as f:
            f.write(func.script())

    def get_tir(self, *args, **kwargs):
        """The tile-level PrimFunc for these arguments (factory arguments, or an eager
        kernel's compile-time arguments and ``T.const`` values by name), uncompiled."""
        if self.factory:
            return self._factory_func(args, kwargs)
        static, consts = self._eager_static(args, kwargs)
        return trace_eager(self.fn, static, consts)[0]

    def _factory_func(self, args, kwargs):
        """The factory's PrimFunc for these arguments. One it left named ``main`` (the usual
        name of the inner function) is named after the factory, so that every tool and the
        generated source call it by the name the user wrote."""
        func = self.fn(*args, **kwargs)
        if not hasattr(func, "script"):
            raise KernelError(f"{self.fn.__name__} must return a @T.prim_func, got "
                              f"{type(func).__name__}")
        if func.attrs is not None and str(func.attrs.get("global_symbol", "")) == "main":
            func = func.with_attr("global_symbol", self.fn.__name__)
        return func

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The generated source of the kernel these arguments compile to."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def par_compile(self, configs, num_workers=None, ignore_error: bool = False) -> list:
        """Compile one kernel per config (a dict of keyword arguments or a tuple of
        positional ones) on ``num_workers`` threads; see :func:`par_compile`."""
        funcs = []
        for config in configs:
            if isinstance(config, dict):
                funcs.append(self.get_tir(**config))
            elif isinstance(config, tuple):
                funcs.append(self.get_tir(*config))
            else:
                raise ArgumentError(f"par_compile: a config is a dict or a tuple, got "
                                    f"{type(config).__name__}")
        kernels = par_compile(funcs, self.out_idx, self.execution_backend, self.target,
                              self.target_host, self.verbose, self.pass_configs,
                              self.compile_flags, num_workers, ignore_error)
        if self.debug_root_path:
            for func, kernel in zip(funcs, kernels):
                if kernel is not None:
                    self._dump(func, kernel)
        return kernels

    def parse_cache_key(self, *args, **kwargs) -> tuple:
        """The key under which a call with these arguments finds its compiled kernel in this
        process (TileLang's name): a factory's arguments, or an eager kernel's tensors'
        dtypes and shapes, run-time arguments' types and compile-time values; with the
        values of the globals the function reads."""
        if self.factory:
            return (_freeze(args), _freeze(kwargs), self._reads.snapshot())
        if kwargs or self._names is None:
            arguments = self._bind(args, kwargs)
            return (self._reads.snapshot(), _freeze({
                k: (type(v),) if k in self._scalars else
                (v.dtype, v.shape) if _is_tensor(v) else v for k, v in arguments.items()}))
        scalars = self._scalars
        return (self._reads.snapshot(), tuple([
            (type(a),) if scalars and self._names[i] in scalars else
            (a.dtype, a.shape) if _is_tensor(a) else (type(a), _freeze(a))
            for i, a in enumerate(args)]))

    def __call__(self, *args, **kwargs):
        if self.factory:
            key = self.parse_cache_key(*args, **kwargs)
            kernel = self._kernels.get(key)
            if kernel is None:
                kernel = self._compile(self._factory_func(args, kwargs))
                if self.torch_op_name is not None:
                    from .torch_op import bind_factory_kernel  # (torch: as above)

                    self.torch_op = bind_factory_kernel(self.torch_op, self.torch_op_name,
                                                        kernel, self.fn)
                self._kernels[key] = kernel
            return kernel
        if kwargs or self._names is None:
            kernel, inputs = self.specialize(args, kwargs)
            return kernel(*inputs)
        # every call of an eager kernel comes here: one dict lookup when the arguments'
        # dtypes, shapes and compile-time values and the globals the kernel reads are those
        # of an earlier call
        key = self.parse_cache_key(*args)
        known = self._calls.get(key)
        if known is None:
            kernel, inputs = self.specialize(args, kwargs)
            names = self._names[:len(args)]
            if any(p.name not in names for p in kernel.signature.inputs):
                return kernel(*inputs)  # an input from a default: not cached by position
            positions = [names.index(p.name) for p in kernel.signature.inputs]
            known = self._calls[key] = (kernel, positions)
        kernel, positions = known
        return kernel(*[args[i] for i in positions])

    def specialize(self, args, kwargs, target=None) -> tuple[JITKernel, list]:
        """An eager kernel's compiled kernel for these arguments (compiled once per
        specialisation; for ``target`` when given, else the decorator's) and its inputs in
        kernel order."""
        arguments = self._bind(args, kwargs)
        # (a tensor given for a ``T.ptr`` parameter is its address: a run-time scalar)
        scalars = {k: v for k, v in arguments.items() if k in self._scalars}
        tensors = {k: v for k, v in arguments.items() if _is_tensor(v) and k not in scalars}
        static = {k: v for k, v in arguments.items() if k not in tensors and k not in scalars}
        kernel = self._eager_kernel(tensors, static, target, tuple(scalars))
        inputs = [tensors[p.name] if p.name in tensors else scalars.get(p.name)
                  for p in kernel.signature.inputs]
        missing = [p.name for p, t in zip(kernel.signature.inputs, inputs) if t is None]
        if missing:
            raise ArgumentError(f"{self.fn.__name__}: no tensor passed for {', '.join(missing)}")
        return kernel, inputs

    def _bind(self, args, kwargs) -> dict:
        """Every parameter's value for a call (defaults filled in), by name. A call that names
        each parameter once, positionally or by keyword, is bound directly (this runs on
        every call of an eager kernel); any other goes through ``inspect``, which raises the
        usual TypeError for a wrong one."""
        names, defaults = self._names, self._defaults
        if names is not None and len(args) <= len(names) and \
                all(k in names[len(args):] for k in kwargs):
            given = dict(zip(names, args))
            given.update(kwargs)
            if all(n in given or n in defaults for n in names):
                return {n: given[n] if n in given else defaults[n] for n in names}
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    def generic_tir(self, static: dict, tensors: dict):
        """An eager kernel's program for compile-time arguments ``static`` with its
        ``T.const`` symbols left symbolic (``tensors`` stand for the tensor arguments: only
        their dtype and rank are read)."""
        slots = {k: ParamSlot(k, t) for k, t in tensors.items()}
        func, _, _ = trace_eager(self.fn, {**static, **slots}, None)
        return func

    def _eager_kernel(self, tensors: dict, static: dict, target=None,
                      scalars: tuple = ()) -> JITKernel:
        """``scalars``: the names of the parameters given at run time that are not tensors
        (their values are not part of the kernel)."""
        level1 = (_freeze(static), tuple((k, str(t.dtype), t.dim()) for k, t in tensors.items()),
                  self._reads.snapshot(), target, scalars)
        recipe = self._recipes.get(level1)
        if recipe is None:
            slots = {**{k: ParamSlot(k) for k in scalars},
                     **{k: ParamSlot(k, t) for k, t in tensors.items()}}
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
        consts = {name: source.value(tensors) for name, source in recipe.items()}
        key = (level1, tuple(sorted(consts.items())))
        kernel = self._kernels.get(key)
        if kernel is None:
            slots = {**{k: ParamSlot(k) for k in scalars},
                     **{k: ParamSlot(k, t) for k, t in tensors.items()}}
            func, _, _ = trace_eager(self.fn, {**static, **slots}, consts)
            kernel = self._kernels[key] = self._compile(func, target)
        return kernel

    def _eager_static(self, args, kwargs) -> tuple[dict, dict]:
        """An eager kernel's compile-time arguments (positional or by name; tensors are
        slots) and its ``T.const`` values (the other keyword arguments)."""
        params = self._signature.parameters
        static = dict(zip(params, args))
        static.update({k: v for k, v in kwargs.items() if k in params})
        consts = {k: v for k, v in kwargs.items() if k not in params}
        for name, param in params.items():
            if name not in static and param.default is not inspect.Parameter.empty:
                static[name] = param.default
            elif name not in static or _is_tensor(static[name]) or \
                    name in self._scalars and not isinstance(static[name], tirx.Var):
                static[name] = ParamSlot(name)  # a run-time argument
        return static, consts

    def compile(self, *args, **kwargs) -> JITKernel:
        """Compile without running: factory arguments, or ``T.const`` values by name (eager)."""
        if self.factory:
            return self(*args, **kwargs)
        return self._compile(self.get_tir(*args, **kwargs))


def jit(fn=None, *, out_idx=None, target="auto", target_host=None, execution_backend=None,
        verbose=None, pass_configs=None, debug_root_path=None, compile_flags=None,
        torch_op=None):
    """Decorate a kernel factory or an eager kernel (see the module docstring).

    The keyword arguments are TileLang's: ``out_idx``, ``target``, ``pass_configs`` and
    ``execution_backend`` (an executor of the target's backend; TileLang's names that the
    backend lacks, and ``"auto"``, pick its default) choose how to compile; ``verbose`` prints
    one line per compilation; ``debug_root_path`` writes each kernel's generated source and
    tile program into that folder; ``compile_flags`` and ``target_host``: see
    :func:`compile`. ``torch_op="ns::name"`` registers the kernel as the PyTorch operator
    ``torch.ops.ns.name`` (see :mod:`tilewright.torch_ops`): an eager kernel at once, one
    operator for every specialisation; a factory's when it first returns a kernel, later
    kernels joining it when inputs tell them apart. Any other keyword is a TypeError."""
    def wrap(f):
        return JITFunction(f, out_idx, target, pass_configs, execution_backend, target_host,
                           verbose, debug_root_path, compile_flags, torch_op)

    return wrap(fn) if fn is not None else wrap
