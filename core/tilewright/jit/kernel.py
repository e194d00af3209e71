"""The kernel object and ``compile``: cache lookup, lowering, building, argument checks."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import tvm
from tvm import tirx

from ..engine import build, events, lower, pick_executor, resolve_target, validate
from ..errors import TilewrightError
from ..plugin import get_manager
from ..plugin.passconfig import debug_requested
from ..profiler.kernel_profiler import Profiler
from ..runtime.call import KernelCall, warn_once
from ..runtime.signature import KernelSignature
from ..utils.tensor import TensorSupplyType
from ..version import __version__
from .cache import CacheError, DiskCache, make_key
from .signature import output_indices, signature_of


class JITKernel(KernelCall):
    """A compiled kernel: call it with torch tensors (inputs; outputs are allocated)."""

    def __init__(self, func, signature: KernelSignature, backend, target, executor: str,
                 fn, source: str, source_ext: str, artifact_dir: str | None = None,
                 lowered_text: str | None = None):
        super().__init__(signature, fn, backend.device, backend.name)
        self.func = func
        self.backend = backend
        self.target = target
        self.executor = executor
        self._source = source
        self.source_ext = source_ext
        self.artifact_dir = artifact_dir
        self._lowered_text = lowered_text

    # -- inspection -------------------------------------------------------------------
    def get_kernel_source(self, kernel_only: bool = False) -> str:
        """The generated source (LLVM IR, CUDA C++, Ascend C ... by backend). ``kernel_only``
        (TileLang's: its device code without the host launcher) changes nothing: the source
        is the kernel's."""
        return self._source

    def get_tir(self):
        """The tile-level program this kernel was compiled from."""
        return self.func

    def get_lowered_tir(self) -> str:
        """The IR after the backend's pipeline, as TVMScript text."""
        return self._lowered_text or ""

    @property
    def executable(self):
        """What the executor built: the callable taking every parameter in kernel order (a
        ``tilewright.runtime.cuda.CubinFunction`` with ``cubin`` and ``launch`` for CUDA)."""
        return self._fn

    def export(self, path, extra: dict | None = None):
        """Write a bundle that ``tilewright.runtime.load(path)`` runs without the compiler;
        ``extra`` adds files to it (role -> (file name, bytes)), listed in its manifest like
        the others. The executor's kernel object writes it (``fn.export(path, signature_json,
        extra)``)."""
        exporter = getattr(self._fn, "export", None)
        if exporter is None:
            raise TilewrightError(f"executor '{self.executor}' of backend '{self.backend.name}' "
                                  "cannot export kernels; compile for a backend whose "
                                  "executor writes bundles (for example target 'cuda')")
        return exporter(path, self.signature.to_json(), extra)

    @property
    def params(self):
        return self.signature.params

    def as_torch_op(self, name: str):
        """Register this kernel as the PyTorch operator ``torch.ops.<ns>.<name>`` (``name`` is
        ``"ns::name"``); returns the :class:`~tilewright.runtime.torchop.TorchOp`. See
        :mod:`tilewright.torch_ops`."""
        from .torch_op import register_kernel  # torch is imported only for operators

        return register_kernel(self, name)

    def get_profiler(self, tensor_supply_type=None):
        """A :class:`~tilewright.profiler.Profiler` of this kernel, whose inputs are made as
        ``tensor_supply_type`` (a :class:`~tilewright.TensorSupplyType`, default ``Auto``)
        says."""
        return Profiler(self, tensor_supply_type or TensorSupplyType.Auto)

    def run_once(self, func=None):
        """Call the kernel (or ``func``) once on inputs the profiler makes, as TileLang's
        ``kernel.run_once()``; returns what the call returns."""
        return self.get_profiler().run_once(func)

    def __repr__(self) -> str:
        return (f"JITKernel({self.signature.name}, target={self.target!s}, "
                f"executor={self.executor})")

# -- compile -----------------------------------------------------------------------------------
@functools.cache
def _fingerprint(package: str) -> str:
    """A digest of the contents of a package's files (its Python modules and what they read:
    the CUDA backend's headers, say): editing the compiler (core or backend) in place
    invalidates kernels cached by the old code, even at one version. The package is found
    without importing it (a plugin the compile did not need stays unimported)."""
    module = sys.modules.get(package)
    origin = getattr(module, "__file__", None) if module is not None else \
        getattr(importlib.util.find_spec(package), "origin", None)
    if origin is None:
        return f"no files: {package}"
    root = os.path.dirname(origin)
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
    """Every selected plugin, loaded or not, with its version and a digest of its package: a
    plugin may teach any backend an op (``tilewright_lowering_rules``), so each can change a
    binary, and the key must not depend on which plugins this process happened to import."""
    return [[name, version, _fingerprint(package)]
            for name, version, package in get_manager().sources()]


def cache_key(func: tirx.PrimFunc, target, backend, executor, configs: dict, outputs) -> str:
    """The disk-cache key of one compile: everything that decides the binary. The program's
    text includes its metadata: TVM's printer leaves a string with a newline (the CUDA source
    of ``T.CUDASourceCodeKernel`` or ``T.import_source``) out of the text otherwise."""
    return make_key({
        "tilewright": __version__, "tvm": tvm.__version__, "backend": backend.name,
        "backend_version": backend.version,
        "code": [_fingerprint("tilewright"),
                 _fingerprint(backend.codegens[target.kind].generate.__module__.split(".")[0])],
        "plugins": _plugins_fingerprint(),
        "target": str(target), "pass_configs": configs, "executor": executor.name,
        "toolchain": executor.fingerprint() if executor.fingerprint is not None else "",
        "out_idx": outputs, "program": func.script(show_meta=True),
    })


_stand_ins: list = []  # compile_instead's functions, innermost last


@contextlib.contextmanager
def compile_instead(stand_in):
    """Within the block, every :func:`compile` (``tilewright.compile``, ``@jit`` kernels,
    ``par_compile``) returns ``stand_in(func, out_idx, pass_configs)`` instead of building:
    the seam of compile-only tools (``tilewright.tools.compile_only``), which works whatever
    module imported ``compile`` and when."""
    _stand_ins.append(stand_in)
    try:
        yield
    finally:
        _stand_ins.remove(stand_in)


def compile(func: tirx.PrimFunc, out_idx=None, target="auto", pass_configs=None,  # noqa: A001
            execution_backend: str | None = None, cache: DiskCache | None = None) -> JITKernel:
    """Compile a tile-level PrimFunc into a :class:`JITKernel`, through the disk cache.

    When the cache cannot be used (see :mod:`tilewright.jit.cache`), the kernel is compiled
    without it and one warning says why."""
    if _stand_ins:
        return _stand_ins[-1](func, out_idx, pass_configs)
    target_obj, backend = resolve_target(target)
    configs = validate(pass_configs)
    outputs = output_indices(func, out_idx)
    signature = signature_of(func, outputs)
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
            warn_once(f"tilewright compiled {signature.name} without the disk cache: {exc}")
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
