"""The C++ kernel of tilewright's operators on the CPU: ``torch.ops.<ns>.<name>`` runs the
compiled kernel's C entry point without entering Python.

torch's boundary into a Python operator implementation costs microseconds per call (4 to 11 us
measured here, more than a small kernel runs), so an operator whose kernels are CPU shared
libraries registers for the ``CPU`` dispatch key a boxed C++ kernel (``csrc/tw_torch_op.cpp``)
instead. It checks the inputs against each variant's signature as
:class:`~tilewright.runtime.call.KernelCall` does, allocates the outputs and calls the entry
point (:attr:`~tilewright.runtime.call.KernelCall.entry_address`) with the tensors' data
pointers and shapes. Everything else -- no variant fits, an input to copy or one that
requires grad, any failed check or kernel error -- goes to the operator's Python
implementation, defined as the companion operator ``<ns>::<name>__python`` and called from
C++, which runs the call or raises the error that names the problem.

The extension is built once per machine with the host C++ compiler against the headers of
the installed torch, into tilewright's disk cache (``runtime/tw_torch_op-<digest>.so``; the
folder :data:`DIR_ENV` names, when set) under the cache's file lock, written under a
temporary name and renamed into place, checked against its checksum when loaded; and loaded
once per process. Without a C++ compiler or torch's headers, or with
``TILEWRIGHT_TORCH_OP_NATIVE=0``, operators keep their Python implementation and one log
line says why.

The variants reach C++ as a flat int64 program (:func:`encode_variant`), per variant::

    n_params n_symbols
    per parameter: kind (0 tensor, 1 scalar) is_output source
        a tensor: dl_code dl_bits align index_max covered rank (tag value)*rank
                  (tag 0: a static size; 1: a symbol's index; 2: an expression's index)
        a scalar: ffi_kind low high
    n_exprs, per expression: length, postfix code (:data:`OPCODES`)
    n_ranges, per range: symbol low high
    n_consts, per compile-time value: argument kind (0 int, 1 float, 2 bool) value

preceded by the number of variants; ``source`` is the operator argument an input comes from.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import torch

from ..log import get_logger
from ..runtime.call import INDEX_MAX, SCALAR_RANGE
from ..runtime.cpu import DL_DTYPES, FFI_BOOL, FFI_FLOAT, FFI_INT, load_private
from ..runtime.expr import COMPARISONS, ExprError, Semantics
from ..runtime.expr import parse as parse_expr
from ..runtime.torchop import PYTHON_SUFFIX, Variant
from .cache import CacheError, DiskCache

SOURCE = Path(__file__).parent / "csrc" / "tw_torch_op.cpp"
ENV = "TILEWRIGHT_TORCH_OP_NATIVE"
DIR_ENV = "TILEWRIGHT_TORCH_OP_DIR"
"""A disk cache folder for the extension alone, instead of tilewright's cache (the tests
share one across sessions)."""
FLAGS = ("-O2", "-std=c++20", "-shared", "-fPIC")
OPCODES = {"push": 0, "sym": 1, "add": 2, "sub": 3, "mul": 4, "floordiv": 5, "mod": 6,
           "neg": 7, "min": 8, "max": 9, "truncdiv": 10, "truncmod": 11}
_INT64 = ((-(1 << 63)), (1 << 63) - 1)
_LOG = get_logger("torch_ops")


class NotNative(Exception):
    """A variant the C++ kernel cannot run (its calls take the Python path)."""


# -- building and loading ----------------------------------------------------------------------
def toolchain() -> tuple[list[str], list[str]]:
    """(the compiler and its flags, the libraries to link): a NotNative naming what is
    missing when there is no C++ compiler or torch has no headers."""
    cxx = next((shutil.which(c) for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None:
        raise NotNative("no C++ compiler (c++, g++ or clang++) on PATH")
    root = Path(torch.__file__).parent
    include, lib = root / "include", root / "lib"
    if not (include / "torch" / "library.h").is_file():
        raise NotNative(f"torch {torch.__version__} has no C++ headers ({include})")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return ([cxx, *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{include}",
             f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}"],
            [f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"])


def build(target: Path) -> None:
    """Compile the extension into ``target``."""
    _LOG.info("building the torch operators' C++ extension (once per machine and torch "
              "version; about half a minute)")
    compiler, libraries = toolchain()
    command = [*compiler, "-o", str(target), str(SOURCE), *libraries]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise NotNative(f"building it failed: {' '.join(command)}\n{result.stderr[-4000:]}")


@functools.cache
def extension() -> ctypes.CDLL | None:
    """The loaded extension, built on first use; None (one log line says why) when it cannot
    be built or is switched off."""
    if os.environ.get(ENV, "1").strip() == "0":
        _LOG.info("tilewright operators use their Python implementation: %s=0", ENV)
        return None
    try:
        compiler, libraries = toolchain()
        key = f"torch {torch.__version__} {' '.join(compiler + libraries)}"
        digest = hashlib.sha256(SOURCE.read_bytes() + key.encode()).hexdigest()[:16]
        name = f"tw_torch_op-{digest}.so"
        try:
            path = DiskCache(os.environ.get(DIR_ENV) or None).helper_library(name, build)
        except CacheError as exc:
            _LOG.info("the torch operator extension is built outside the disk cache: %s", exc)
            path = Path(tempfile.mkdtemp(prefix="tilewright-torch-op-")) / name
            build(path)
        lib = load_private(path.read_bytes(), name, ctypes.RTLD_LOCAL)
    except (NotNative, OSError) as exc:
        _LOG.warning("tilewright operators use their Python implementation (torch's boundary "
                     "into Python costs microseconds per call): the C++ kernel is not "
                     "available: %s", exc)
        return None
    lib.tw_op_error.restype = ctypes.c_char_p
    lib.tw_op_register.restype = ctypes.c_void_p
    lib.tw_op_register.argtypes = [ctypes.c_char_p] * 4 + [ctypes.c_int64]
    lib.tw_op_set_variants.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                       ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    lib.tw_op_destroy.argtypes = [ctypes.c_void_p]
    return lib


# -- encoding the variants ---------------------------------------------------------------------
def _code(x) -> list:
    return x if isinstance(x, list) else [OPCODES["push"], int(x)]


def _binary(name):
    return lambda a, b: _code(a) + _code(b) + [OPCODES[name]]


def _refused(*_args):
    raise NotNative("a shape expression with a comparison, a condition or a boolean")


POSTFIX = Semantics(
    value=lambda v: v, add=_binary("add"), sub=_binary("sub"), mul=_binary("mul"),
    floordiv=_binary("floordiv"), mod=_binary("mod"), neg=lambda a: _code(a) + [OPCODES["neg"]],
    not_=_refused, compare=dict.fromkeys(COMPARISONS, _refused), and_=_refused, or_=_refused,
    ite=_refused,
    calls={k: _binary(k) for k in ("min", "max", "truncdiv", "truncmod")})
"""Semantics that write an expression as postfix code (the arithmetic C++ evaluates); the
rest raises NotNative."""


def _const(value) -> tuple[int, int]:
    if isinstance(value, bool):
        return 2, int(value)
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise NotNative(f"compile-time value {value} beyond int64")
        return 0, value
    if isinstance(value, float):
        return 1, struct.unpack("<q", struct.pack("<d", value))[0]
    raise NotNative(f"compile-time value of type {type(value).__name__}")


def encode_variant(variant: Variant, sources, consts: dict) -> list[int]:
    """One variant's part of the program; ``sources[i]`` is the operator argument of kernel
    input ``i``, ``consts`` maps operator arguments to the compile-time values the variant
    needs. A NotNative when C++ cannot run it."""
    signature = variant.signature
    if variant.call is None or getattr(variant.call, "entry_address", None) is None:
        raise NotNative(f"kernel {signature.name} has no C entry point")
    symbols = {s: i for i, (s, _, _) in enumerate(signature.symbols)}
    refs = {s: [OPCODES["sym"], i] for s, i in symbols.items()}
    exprs: list[list[int]] = []
    params: list[int] = []
    inputs = iter(sources)
    outputs = 0
    for p in signature.params:
        if p.is_output:
            source, outputs = outputs, outputs + 1
        else:
            source = next(inputs)
        if p.kind != "tensor":
            kind = FFI_BOOL if p.dtype == "bool" else FFI_FLOAT if \
                p.dtype.startswith(("float", "bfloat")) else FFI_INT
            low, high = SCALAR_RANGE.get(p.dtype, _INT64)
            params += [1, int(p.is_output), source, kind, max(low, _INT64[0]),
                       min(high, _INT64[1])]
            continue
        if p.dtype not in DL_DTYPES:
            raise NotNative(f"dtype {p.dtype}")
        if p.strides:  # passed with their strides, which C++ does not check
            raise NotNative(f"T.StridedTensor {p.name!r}")
        params += [0, int(p.is_output), source, *DL_DTYPES[p.dtype], p.align,
                   INDEX_MAX[p.index_dtype], int(p.covered), len(p.shape)]
        for d in p.shape:
            if isinstance(d, int):
                params += [0, d]
            elif d in symbols:
                params += [1, symbols[d]]
            else:
                try:
                    code = parse_expr(d).evaluate(refs, POSTFIX)
                except ExprError as exc:
                    raise NotNative(f"shape {d!r}: {exc}") from None
                exprs.append(_code(code))
                params += [2, len(exprs) - 1]
    out = [len(signature.params), len(symbols), *params, len(exprs)]
    for code in exprs:
        out += [len(code), *code]
    out.append(len(variant.ranges))
    for s, (low, high) in variant.ranges.items():
        out += [symbols[s], low, high]
    out.append(len(consts))
    for arg, value in consts.items():
        out += [arg, *_const(value)]
    return out


class NativeKernel:
    """The C++ kernel of one operator for one dispatch key; :meth:`update` gives it the
    variants to run."""

    def __init__(self, lib: ctypes.CDLL, qualname: str, key: str, arguments: int):
        namespace, name = qualname.split("::")
        self._lib = lib
        self._handle = lib.tw_op_register(namespace.encode(), name.encode(),
                                          (name + PYTHON_SUFFIX).encode(), key.encode(),
                                          arguments)
        if not self._handle:
            raise RuntimeError(f"torch op {qualname}: registering its C++ kernel failed: "
                               f"{lib.tw_op_error().decode(errors='replace')}")
        self.qualname = qualname
        self._keep: list = []

    def update(self, variants) -> None:
        """Run ``variants`` (triples of a Variant, its sources and its compile-time values).
        One that C++ cannot run is left out: no two variants accept the same inputs, so its
        calls find none and take the Python path, which runs it."""
        program, entries, kept = [0], [], []
        for variant, sources, consts in variants:
            try:
                program += encode_variant(variant, sources, consts)
            except NotNative as exc:
                _LOG.info("torch op %s runs kernel %s through its Python implementation: %s",
                          self.qualname, variant.signature.name, exc)
                continue
            entries.append(variant.call.entry_address)
            kept.append(variant.call)
        program[0] = len(entries)
        data = (ctypes.c_int64 * len(program))(*program)
        addresses = (ctypes.c_int64 * max(1, len(entries)))(*entries)
        if self._lib.tw_op_set_variants(self._handle, data, len(program), addresses) != 0:
            raise RuntimeError(f"torch op {self.qualname}: {self._lib.tw_op_error().decode()}")
        self._keep = kept  # the entry points live as long as their kernels

    def remove(self) -> None:
        if self._handle:
            self._lib.tw_op_destroy(self._handle)
            self._handle = None


def native_kernel(qualname: str, device: str, key: str, arguments: int) -> NativeKernel | None:
    """The C++ kernel to register for an operator on ``device`` (the CPU only), or None when
    the extension is not available."""
    if device != "cpu":
        return None
    lib = extension()
    return None if lib is None else NativeKernel(lib, qualname, key, arguments)


__all__ = ["DIR_ENV", "ENV", "NativeKernel", "NotNative", "build", "encode_variant",
           "extension", "native_kernel", "toolchain"]
