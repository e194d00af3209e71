"""The kernel object and ``compile``: cache lookup, lowering, building, argument checks."""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tvm import tirx

from .. import __version__
from ..engine import build, events, lower, pick_executor, resolve_target, validate
from ..engine.passconfig import debug_requested
from ..errors import ArgumentError
from ..profiler.kernel_profiler import Profiler
from ..utils.tensor import TensorSupplyType
from .cache import DiskCache, make_key
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

    def get_profiler(self, tensor_supply_type=None):
        """A :class:`~tilewright.profiler.Profiler` of this kernel, whose inputs are made as
        ``tensor_supply_type`` (a :class:`~tilewright.TensorSupplyType`, default ``Auto``)
        says."""
        return Profiler(self, tensor_supply_type or TensorSupplyType.Auto)

    def __repr__(self) -> str:
        return (f"JITKernel({self.signature.name}, target={self.target!s}, "
                f"executor={self.executor})")

    # -- calling ----------------------------------------------------------------------
    def __call__(self, *args):
        # fast path: one dict lookup keyed by what the argument checks depend on
        try:
            key = tuple([(a.dtype, a.shape, a.device, a.is_contiguous()) for a in args])
        except AttributeError:  # scalars or non-torch values among the arguments
            key = tuple((a.dtype, a.shape, a.device, a.is_contiguous())
                        if isinstance(a, self._tensor_type) else type(a) for a in args)
        outs = self._plans.get(key)
        if outs is None:
            outs = self._plans[key] = self._new_plan(args)
        if not outs:
            self._fn(*args)
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
        return outs[0] if len(outs) == 1 else outs

    def _new_plan(self, args) -> tuple:
        """Check the arguments (count, then :meth:`_plan`); the outputs' (shape, dtype,
        device)."""
        inputs = self._inputs
        if len(args) != len(inputs):
            names = ", ".join(self.signature.params[i].name for i in inputs)
            raise ArgumentError(f"kernel {self.signature.name} takes {len(inputs)} input(s) "
                                f"({names}), got {len(args)}")
        shapes = self._plan(args)
        device = args[0].device if args and hasattr(args[0], "device") else self._device
        return tuple((shape, dtype, device) for shape, dtype in shapes)

    def _plan(self, args):
        """Check every argument against the signature (once per shape/dtype/device key) and
        compute the output shapes."""
        torch = _torch()
        sig = self.signature
        symbols: dict[str, int] = {}
        for pos, (index, arg) in enumerate(zip(self._inputs, args)):
            spec = sig.params[index]
            where = f"argument {pos} ({spec.name!r}) of kernel {sig.name}"
            if spec.kind == "scalar":
                if isinstance(arg, torch.Tensor):
                    raise ArgumentError(f"{where} is a scalar of dtype {spec.dtype}, got a tensor")
                continue
            if not isinstance(arg, torch.Tensor):
                raise ArgumentError(f"{where} must be a torch.Tensor, got {type(arg).__name__}")
            if arg.dtype != self._dtypes[index]:
                raise ArgumentError(f"{where} must have dtype {spec.dtype}, got "
                                    f"{str(arg.dtype).removeprefix('torch.')}")
            if arg.device.type != self._device:
                raise ArgumentError(f"{where} must be on device '{self._device}' (backend "
                                    f"'{self.backend.name}'), got '{arg.device}'")
            if not arg.is_contiguous():
                raise ArgumentError(f"{where} must be contiguous; call .contiguous() first")
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
        for name, _, _ in sig.symbols:
            symbols.setdefault(name, None)
        shapes = []
        for index in self._outputs:
            spec = sig.params[index]
            shapes.append((tuple(_eval_dim(d, symbols, spec.name) for d in spec.shape),
                           self._dtypes[index]))
        for index, arg in zip(self._inputs, args):
            spec = sig.params[index]
            for dim, want in enumerate(spec.shape):
                if isinstance(want, str) and not want.isidentifier():
                    value = _eval_dim(want, symbols, spec.name)
                    if value != arg.shape[dim]:
                        raise ArgumentError(f"argument {spec.name!r}: dimension {dim} must be "
                                            f"{want} = {value}, got {arg.shape[dim]}")
        return shapes


def _fmt(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _eval_dim(dim, symbols: dict, param: str) -> int:
    if isinstance(dim, int):
        return dim
    unknown = [n for n, v in symbols.items() if v is None and n in dim]
    try:
        value = eval(dim, {"__builtins__": {}}, {k: v for k, v in symbols.items()  # noqa: S307
                                                 if v is not None})
    except NameError:
        raise ArgumentError(f"the shape of {param!r} uses {dim!r}, which no input tensor's "
                            f"shape provides{' (' + ', '.join(unknown) + ')' if unknown else ''}"
                            ) from None
    return int(value)


# -- compile -----------------------------------------------------------------------------------
@functools.cache
def _fingerprint(package: str) -> str:
    """A digest of the size and mtime of a package's files (its Python modules and what they
    read: the CUDA backend's headers, say): editing the compiler (core or backend) in place
    invalidates kernels cached by the old code, even at one version."""
    module = sys.modules.get(package) or importlib.import_module(package)
    root = os.path.dirname(module.__file__)
    entries = []
    pending = [root]
    while pending:  # os.scandir reuses the directory's stat data: this runs on every cold start
        with os.scandir(pending.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                    pending.append(entry.path)
                elif not entry.name.endswith((".pyc", ".pyo")):
                    stat = entry.stat()
                    name = os.path.relpath(entry.path, root)
                    entries.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns};")
    return hashlib.sha256("".join(sorted(entries)).encode()).hexdigest()[:16]


def _out_idx(func: tirx.PrimFunc, out_idx):
    declared = [int(i) for i in func.attrs["tw.outputs"]] if func.attrs and \
        "tw.outputs" in func.attrs else []
    if out_idx is None:
        return declared
    out_idx = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    return sorted(set(declared) | {i % len(func.params) for i in out_idx})


def compile(func: tirx.PrimFunc, out_idx=None, target="auto", pass_configs=None,  # noqa: A001
            execution_backend: str | None = None, cache: DiskCache | None = None) -> JITKernel:
    """Compile a tile-level PrimFunc into a :class:`JITKernel`, through the disk cache."""
    target_obj, backend = resolve_target(target)
    configs = validate(pass_configs)
    outputs = _out_idx(func, out_idx)
    signature = KernelSignature.from_func(func, outputs)
    executor = pick_executor(backend, execution_backend)
    # a debug tool watching compilations (lower trace, pass timing, IR dumps) needs one to
    # happen, and an edited codegen file must be compiled: such runs bypass the cache
    use_cache = executor.load is not None and not configs.get("tw.disable_cache", False) \
        and not events.active() and not debug_requested(configs)
    cache = cache or DiskCache()
    key = make_key({
        "tilewright": __version__, "backend": backend.name, "backend_version": backend.version,
        "code": [_fingerprint("tilewright"),
                 _fingerprint(backend.codegens[target_obj.kind].generate.__module__.split(".")[0])],
        "target": str(target_obj), "pass_configs": configs, "executor": executor.name,
        "toolchain": executor.fingerprint() if executor.fingerprint is not None else "",
        "out_idx": outputs, "program": func.script(),
    })
    if use_cache:
        meta = cache.lookup(key)
        if meta is None:
            with cache.lock(key):
                meta = cache.lookup(key) or _build_into_cache(cache, key, func, target_obj,
                                                              configs, executor.name, signature)
        return _from_meta(meta, func, signature, backend, target_obj, executor)
    lowered = lower(func, target_obj, configs)
    # executors write their artifacts to a folder; outside the cache it is a private one that
    # lives as long as the kernel
    scratch = tempfile.TemporaryDirectory(prefix="tilewright-")
    fn, chosen = build(lowered, scratch.name, executor.name)
    kernel = JITKernel(func, signature, backend, target_obj, chosen.name, fn,
                       lowered.source.text, lowered.source.file_ext, None,
                       lowered.module.script())
    kernel._scratch = scratch
    return kernel


def _build_into_cache(cache, key, func, target, configs, executor, signature) -> dict:
    lowered = lower(func, target, configs)
    staging = cache.staging()
    try:
        build(lowered, staging, executor)
        source_name = f"kernel.{lowered.source.file_ext}"
        (staging / source_name).write_text(lowered.source.text)
        (staging / "lowered.tir").write_text(lowered.module.script())
        meta = {"signature": signature.to_json(), "backend": lowered.ctx.backend.name,
                "target": str(target), "executor": executor, "entry": lowered.source.entry,
                "source": source_name, "timings": lowered.ctx.timings}
        return cache.commit(key, staging, meta)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _from_meta(meta, func, signature, backend, target, executor) -> JITKernel:
    path = Path(meta["path"])
    fn = executor.load(path, meta["entry"])
    source = (path / meta["source"]).read_text()
    lowered = path / "lowered.tir"
    return JITKernel(func, signature, backend, target, executor.name, fn, source,
                     meta["source"].rsplit(".", 1)[-1], str(path),
                     lowered.read_text() if lowered.exists() else None)
