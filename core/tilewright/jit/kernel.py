"""The kernel object and ``compile``: cache lookup, lowering, building, argument checks."""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import tvm
from tvm import tirx

from .. import __version__
from ..engine import build, events, lower, pick_executor, resolve_target, validate
from ..engine.passconfig import debug_requested
from ..errors import ArgumentError
from ..plugin import get_manager
from ..runtime.expr import ExprError
from ..runtime.expr import parse as parse_expr
from .cache import CacheError, DiskCache, make_key
from .signature import KernelSignature


def _torch():
    import torch

    return torch


class JITKernel:
    """A compiled kernel: call it with torch tensors (inputs; outputs are allocated)."""

    def __init__(self, func, signature: KernelSignature, backend, target, executor: str,
                 fn, source: str, source_ext: str, artifact_dir: str | None = None,
                 lowered_text: str | None = None):
        self.func = func
        self.signature = signature
        self.backend = backend
        self.target = target
        self.executor = executor
        self._fn = fn
        self._source = source
        self.source_ext = source_ext
        self.artifact_dir = artifact_dir
        self._lowered_text = lowered_text
        self._plans: dict = {}
        torch = _torch()
        self._dtypes = [getattr(torch, p.dtype) if p.kind == "tensor" else None
                        for p in signature.params]
        self._inputs = [i for i, p in enumerate(signature.params) if not p.is_output]
        self._outputs = [i for i, p in enumerate(signature.params) if p.is_output]
        self._tail_outputs = self._outputs == list(range(len(self._inputs),
                                                         len(signature.params)))
        self._tensor_type, self._empty = torch.Tensor, torch.empty
        self._contiguous = torch.contiguous_format
        self._device = backend.device

    # -- inspection -------------------------------------------------------------------
    def get_kernel_source(self) -> str:
        """The generated source (LLVM IR, CUDA C++, Ascend C ... by backend)."""
        return self._source

    def get_tir(self):
        """The tile-level program this kernel was compiled from."""
        return self.func

    def get_lowered_tir(self) -> str:
        """The IR after the backend's pipeline, as TVMScript text."""
        return self._lowered_text or ""

    def export(self, path):
        """Write a bundle that ``tilewright.runtime.load(path)`` runs without the compiler.
        The executor's kernel object writes it (``fn.export(path, signature_json)``)."""
        exporter = getattr(self._fn, "export", None)
        if exporter is None:
            from ..errors import TilewrightError

            raise TilewrightError(f"executor '{self.executor}' of backend '{self.backend.name}' "
                                  "cannot export kernels; compile for a backend whose "
                                  "executor writes bundles (for example target 'cuda')")
        return exporter(path, self.signature.to_json())

    @property
    def params(self):
        return self.signature.params

    def __repr__(self) -> str:
        return (f"JITKernel({self.signature.name}, target={self.target!s}, "
                f"executor={self.executor})")

    # -- calling ----------------------------------------------------------------------
    def __call__(self, *args):
        # fast path: one dict lookup keyed by what the argument checks depend on
        try:
            key = tuple([(a.dtype, a.shape, a.device, a.is_contiguous(), a.data_ptr() & 255,
                          a.requires_grad) for a in args])
        except AttributeError:  # scalars or non-torch values among the arguments
            key = tuple((a.dtype, a.shape, a.device, a.is_contiguous(), a.data_ptr() & 255,
                         a.requires_grad) if isinstance(a, self._tensor_type) else
                        (type(a), _scalar_key(a)) for a in args)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._new_plan(args)
        outs, copies = plan
        if copies:
            args, written = self._copy_inputs(args, copies)
        if not outs:
            self._fn(*args)
            if copies:
                _copy_back(written)
            return None
        empty = self._empty
        outs = [empty(shape, dtype=dtype, device=device) for shape, dtype, device in outs]
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

    def _copy_inputs(self, args, copies):
        """Inputs the generated code cannot address as they are (a storage offset that breaks
        the alignment it assumes, strides that are not contiguous), as aligned contiguous
        copies; the pairs (original, copy) of those the kernel may write."""
        args = list(args)
        written = []
        for pos, is_written in copies:
            copy = args[pos].clone(memory_format=self._contiguous)
            if is_written:
                written.append((args[pos], copy))
            args[pos] = copy
        return args, written

    def _new_plan(self, args) -> tuple:
        """Check the arguments (count, then :meth:`_plan`); the outputs' (shape, dtype,
        device) and the inputs to pass as copies."""
        inputs = self._inputs
        if len(args) != len(inputs):
            names = ", ".join(self.signature.params[i].name for i in inputs)
            raise ArgumentError(f"kernel {self.signature.name} takes {len(inputs)} input(s) "
                                f"({names}), got {len(args)}")
        shapes, copies = self._plan(args)
        device = args[0].device if args and hasattr(args[0], "device") else self._device
        return tuple((shape, dtype, device) for shape, dtype in shapes), tuple(copies)

    def _plan(self, args):
        """Check every argument against the signature (once per key of :meth:`__call__`);
        compute the output shapes and which inputs must be passed as copies."""
        torch = _torch()
        sig = self.signature
        symbols: dict[str, int] = {}
        copies = []
        for pos, (index, arg) in enumerate(zip(self._inputs, args)):
            spec = sig.params[index]
            where = f"argument {pos} ({spec.name!r}) of kernel {sig.name}"
            if spec.kind == "scalar":
                _check_scalar(arg, spec, where, torch)
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
                                    f"'{self.backend.name}'), got '{arg.device}'")
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
                    if got > _INDEX_MAX[spec.index_dtype]:
                        raise ArgumentError(f"{where}: dimension {dim} ({want} = {got}) does not "
                                            f"fit the kernel's {spec.index_dtype} indices")
            if arg.numel() > _INDEX_MAX[spec.index_dtype]:
                raise ArgumentError(f"{where} has {arg.numel()} elements, more than the "
                                    f"kernel's {spec.index_dtype} indices address; split the "
                                    "work or declare the shape with T.int64 dimensions")
            if not arg.is_contiguous() or arg.data_ptr() % spec.align:
                copies.append((pos, spec.written))
            if arg.requires_grad and torch.is_grad_enabled():
                _warn_once(f"kernel {sig.name}: input {spec.name!r} requires grad, but the "
                           "kernel is not differentiable: its outputs are not connected to "
                           "autograd. Call it under torch.no_grad(), or pair it with a backward "
                           "kernel in a torch.autograd.Function")
        for name, _, _ in sig.symbols:
            symbols.setdefault(name, None)
        shapes = []
        for index in self._outputs:
            spec = sig.params[index]
            shape = tuple(_eval_dim(d, symbols, spec.name) for d in spec.shape)
            if any(d < 0 for d in shape):
                raise ArgumentError(f"output {spec.name!r} of kernel {sig.name} would have shape "
                                    f"{shape} for these inputs")
            shapes.append((shape, self._dtypes[index]))
        for index, arg in zip(self._inputs, args):
            spec = sig.params[index]
            for dim, want in enumerate(spec.shape):
                if isinstance(want, str) and not want.isidentifier():
                    value = _eval_dim(want, symbols, spec.name)
                    if value != arg.shape[dim]:
                        raise ArgumentError(f"argument {spec.name!r}: dimension {dim} must be "
                                            f"{want} = {value}, got {arg.shape[dim]}")
        return shapes, copies


_INDEX_MAX = {"int32": (1 << 31) - 1, "int64": (1 << 63) - 1}
_SCALAR_RANGE = {f"{s}int{b}": ((0, (1 << b) - 1) if s else (-(1 << (b - 1)), (1 << (b - 1)) - 1))
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
    if isinstance(arg, torch.Tensor):
        raise ArgumentError(f"{where} is a scalar of dtype {spec.dtype}, got a tensor")
    if spec.dtype.startswith(("int", "uint")):
        if isinstance(arg, bool) or not isinstance(arg, int):
            raise ArgumentError(f"{where} is an integer scalar ({spec.dtype}), got "
                                f"{type(arg).__name__} {_short_repr(arg)}")
        low, high = _SCALAR_RANGE.get(spec.dtype, (-(1 << 63), (1 << 63) - 1))
        if not low <= arg <= high:
            raise ArgumentError(f"{where} = {arg} does not fit its dtype {spec.dtype}")
    elif spec.dtype.startswith(("float", "bfloat")) and not isinstance(arg, (int, float)):
        raise ArgumentError(f"{where} is a scalar of dtype {spec.dtype}, got "
                            f"{type(arg).__name__} {_short_repr(arg)}")


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


# -- compile -----------------------------------------------------------------------------------
@functools.cache
def _fingerprint(package: str) -> str:
    """A digest of the contents of a package's files (its Python modules and what they read:
    the CUDA backend's headers, say): editing the compiler (core or backend) in place
    invalidates kernels cached by the old code, even at one version."""
    module = sys.modules.get(package) or importlib.import_module(package)
    root = os.path.dirname(module.__file__)
    h = hashlib.sha256()
    files = []
    pending = [root]
    while pending:
        with os.scandir(pending.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif not entry.name.endswith((".pyc", ".pyo")):
                    files.append(entry.path)
    for path in sorted(files):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:24]


def _plugins_fingerprint() -> list:
    """Every loaded plugin with its version and a digest of its package: a plugin may teach
    any backend an op (``tilewright_lowering_rules``), so each can change a binary."""
    manager = get_manager()
    out = []
    for record in sorted(manager.records.values(), key=lambda r: r.name):
        if record.status == "ok" and record.module is not None:
            package = record.module.__name__.split(".")[0]
            module = sys.modules.get(package)
            code = _fingerprint(package) if getattr(module, "__file__", None) else \
                f"in-memory module {package}"
            out.append([record.name, record.version, code])
    return out


def cache_key(func: tirx.PrimFunc, target, backend, executor, configs: dict, outputs) -> str:
    """The disk-cache key of one compile: everything that decides the binary."""
    return make_key({
        "tilewright": __version__, "tvm": tvm.__version__, "backend": backend.name,
        "backend_version": backend.version,
        "code": [_fingerprint("tilewright"),
                 _fingerprint(backend.codegens[target.kind].generate.__module__.split(".")[0])],
        "plugins": _plugins_fingerprint(),
        "target": str(target), "pass_configs": configs, "executor": executor.name,
        "toolchain": executor.fingerprint() if executor.fingerprint is not None else "",
        "out_idx": outputs, "program": func.script(),
    })


def _out_idx(func: tirx.PrimFunc, out_idx):
    declared = [int(i) for i in func.attrs["tw.outputs"]] if func.attrs and \
        "tw.outputs" in func.attrs else []
    if out_idx is None:
        return declared
    out_idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    return sorted(set(declared) | {i % len(func.params) for i in out_idx})


_WARNED: set = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def compile(func: tirx.PrimFunc, out_idx=None, target="auto", pass_configs=None,  # noqa: A001
            execution_backend: str | None = None, cache: DiskCache | None = None) -> JITKernel:
    """Compile a tile-level PrimFunc into a :class:`JITKernel`, through the disk cache.

    When the cache cannot be used (see :mod:`tilewright.jit.cache`), the kernel is compiled
    without it and one warning says why."""
    target_obj, backend = resolve_target(target)
    configs = validate(pass_configs)
    outputs = _out_idx(func, out_idx)
    signature = KernelSignature.from_func(func, outputs)
    executor = pick_executor(backend, execution_backend)
    # a debug tool watching compilations (lower trace, pass timing, IR dumps) needs one to
    # happen, and an edited codegen file must be compiled: such runs bypass the cache
    use_cache = executor.load is not None and not configs.get("tw.disable_cache", False) \
        and not events.active() and not debug_requested(configs)
    built: list = []  # the lowering of a cached attempt, reused if the cache then fails
    if use_cache:
        cache = cache or DiskCache()
        key = cache_key(func, target_obj, backend, executor, configs, outputs)
        try:
            return _compile_cached(cache, key, func, signature, backend, target_obj, configs,
                                   executor, built)
        except CacheError as exc:
            _warn_once(f"tilewright compiled {signature.name} without the disk cache: {exc}")
    lowered = built[0] if built else lower(func, target_obj, configs)
    # executors write their artifacts to a folder; outside the cache it is a private one that
    # lives as long as the kernel
    scratch = tempfile.TemporaryDirectory(prefix="tilewright-")
    fn, chosen = build(lowered, scratch.name, executor.name)
    kernel = JITKernel(func, signature, backend, target_obj, chosen.name, fn,
                       lowered.source.text, lowered.source.file_ext, None,
                       lowered.module.script())
    kernel._scratch = scratch
    return kernel


def _compile_cached(cache, key, func, signature, backend, target, configs, executor,
                    built) -> JITKernel:
    meta = cache.lookup(key)
    if meta is not None:
        kernel = _from_meta(cache, meta, func, signature, backend, target, executor)
        if kernel is not None:
            return kernel
    with cache.lock(key):
        meta = cache.lookup(key)
        if meta is None:
            if not built:
                built.append(lower(func, target, configs))
            meta = _build_into_cache(cache, key, built[0], target, executor.name, signature)
        kernel = _from_meta(cache, meta, func, signature, backend, target, executor)
    if kernel is None:
        raise CacheError(f"the kernel stored in {meta['path']} could not be loaded")
    return kernel


def _build_into_cache(cache, key, lowered, target, executor, signature) -> dict:
    staging = cache.staging()
    try:
        try:
            build(lowered, staging, executor)
        except BaseException:
            if not staging.is_dir():  # removed under us (a 'cache clear' of another process)
                raise CacheError(f"its build folder {staging} was removed during the "
                                 "compile") from None
            raise
        source_name = f"kernel.{lowered.source.file_ext}"
        try:
            (staging / source_name).write_text(lowered.source.text)
            (staging / "lowered.tir").write_text(lowered.module.script())
        except OSError as exc:
            raise CacheError(f"cannot write to {staging}: {exc.strerror or exc}") from None
        meta = {"signature": signature.to_json(), "backend": lowered.ctx.backend.name,
                "target": str(target), "executor": executor, "entry": lowered.source.entry,
                "source": source_name, "timings": lowered.ctx.timings}
        return cache.commit(key, staging, meta)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _from_meta(cache, meta, func, signature, backend, target, executor) -> JITKernel | None:
    """The kernel of a validated entry; None (the entry moved aside with a warning) when the
    executor cannot load it."""
    path = Path(meta["path"])
    try:
        fn = executor.load(path, meta["entry"])
        source = (path / meta["source"]).read_text()
        lowered = path / "lowered.tir"
        lowered_text = lowered.read_text() if lowered.exists() else None
    except FileNotFoundError as exc:  # removed by another process since it was validated
        raise CacheError(f"the cache entry {path} was removed while loading it") from exc
    except Exception as exc:  # noqa: BLE001 - whatever the executor raises on a bad entry
        warnings.warn(f"tilewright cache entry {path} could not be loaded "
                      f"({type(exc).__name__}: {exc}); rebuilding it", RuntimeWarning,
                      stacklevel=4)
        cache.discard(path)
        return None
    return JITKernel(func, signature, backend, target, executor.name, fn, source,
                     meta["source"].rsplit(".", 1)[-1], str(path), lowered_text)
