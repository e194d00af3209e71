"""Running CPU kernel libraries (``cpu-so`` bundles) without TVM: ctypes and a small shim.

The CPU backend's kernels are shared libraries whose entry ``__tvm_ffi_<name>`` follows the
tvm-ffi calling convention (``int fn(void* self, const TVMFFIAny* args, int32_t num_args,
TVMFFIAny* result)``, tensors passed as ``DLTensor`` pointers). They need from a runtime only
what ``csrc/tw_kernel_shim.c`` provides: ``TVMFFIErrorSetRaisedFromCStrParts`` (their argument
checks report through it), and the functions their context pointers
(``__TVMBackendParallelLaunch`` ...) are set to. Before a library is loaded, its ELF symbol
table is read: a library needing any other symbol is refused, naming it.

The shim is a prebuilt ``libtw_kernel_shim.so`` beside this module (kernel packages ship one,
built when the package is built) or is built from its C source with the host compiler on
first use. Needs only the standard library and torch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from ..errors import ArgumentError
from .bundle import Bundle, BundleError, write_bundle
from .call import KernelCall
from .signature import KernelSignature, SignatureError

SHIM = "libtw_kernel_shim.so"
SHIM_SOURCE = Path(__file__).parent / "csrc" / "tw_kernel_shim.c"
ERROR_SYMBOL = "TVMFFIErrorSetRaisedFromCStrParts"
# the kernel's context pointers and the shim function each is set to
PARALLEL_LAUNCH = "__TVMBackendParallelLaunch"
CONTEXT = {PARALLEL_LAUNCH: "tw_shim_parallel_launch",
           "__TVMBackendAllocWorkspace": "tw_shim_alloc_workspace",
           "__TVMBackendFreeWorkspace": "tw_shim_free_workspace"}
_ENTRY = re.compile(r"^__tvm_ffi_[A-Za-z_][A-Za-z0-9_]{0,1023}$")
DL_DTYPES = {"bool": (6, 8), "float16": (2, 16), "bfloat16": (4, 16), "float32": (2, 32),
           "float64": (2, 64), "float8_e4m3fn": (10, 8), "float8_e5m2": (12, 8),
           "float8_e8m0fnu": (14, 8),
           **{f"int{b}": (0, b) for b in (8, 16, 32, 64)},
           **{f"uint{b}": (1, b) for b in (8, 16, 32, 64)}}
FFI_INT, FFI_BOOL, FFI_FLOAT, FFI_TENSOR = 1, 2, 3, 7
_CPU = 1


class _Value(ctypes.Union):
    _fields_ = [("v_int64", ctypes.c_int64), ("v_float64", ctypes.c_double),
                ("v_ptr", ctypes.c_void_p)]


class TVMFFIAny(ctypes.Structure):
    _fields_ = [("type_index", ctypes.c_int32), ("zero_padding", ctypes.c_uint32),
                ("value", _Value)]


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_ENTRY_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(TVMFFIAny),
                               ctypes.c_int32, ctypes.POINTER(TVMFFIAny))


# -- the shim --------------------------------------------------------------------------------
def compiler() -> str | None:
    """The host C compiler, if any."""
    for cc in ("cc", "gcc", "clang"):
        path = shutil.which(cc)
        if path:
            return path
    return None


def build_shim(target: Path) -> Path:
    """Compile the shim into ``target`` with the host C compiler."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("building the kernel shim needs a C compiler (cc, gcc or clang)")
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = target.with_name(f".{target.name}.{os.getpid()}")
    cmd = [cc, "-O2", "-shared", "-fPIC", "-D_GNU_SOURCE", "-o", str(stage), str(SHIM_SOURCE),
           "-lpthread", "-ldl"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the kernel shim failed: {' '.join(cmd)}\n{result.stderr}")
    os.replace(stage, target)
    return target


CACHE_MARKER = "CACHEDIR.TAG"  # the file that makes a folder a tilewright disk cache


def _shim_folder() -> Path:
    """Where the shim is built: the ``runtime`` folder of the user's cache when the cache is
    tilewright's (marked), new or empty; else a private folder of this process, so that a
    ``TILEWRIGHT_CACHE_DIR`` naming a folder of the user's own is never written to."""
    root = Path(os.environ.get("TILEWRIGHT_CACHE_DIR") or Path.home() / ".cache" / "tilewright")
    try:
        ours = not root.exists() or (root / CACHE_MARKER).is_file() or \
            (root.is_dir() and not root.is_symlink() and not any(root.iterdir()))
    except OSError:
        ours = False
    return root / "runtime" if ours else Path(tempfile.mkdtemp(prefix="tilewright-shim-"))


@functools.lru_cache(maxsize=1)
def shim() -> ctypes.CDLL:
    """The shim, loaded once with ``RTLD_GLOBAL`` so kernels resolve its error function: the
    prebuilt one beside this module, else one built into the user's cache folder (see
    :func:`_shim_folder`)."""
    path = Path(__file__).with_name(SHIM)
    if not path.is_file():
        digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:16]
        path = _shim_folder() / f"tw_kernel_shim-{digest}.so"
        if not path.is_file():
            build_shim(path)
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.tw_shim_last_error.restype = ctypes.c_char_p
    return lib


def bind_context(library: ctypes.CDLL, pointers=tuple(CONTEXT)) -> None:
    """Point the context pointers named in ``pointers`` (keys of :data:`CONTEXT`) of the
    loaded kernel ``library`` at the shim's functions; a pointer the library lacks (a kernel
    without parallel loops has no launcher) is skipped."""
    lib = shim()
    for pointer in pointers:
        try:
            slot = ctypes.c_void_p.in_dll(library, pointer)
        except ValueError:
            continue
        slot.value = ctypes.cast(getattr(lib, CONTEXT[pointer]), ctypes.c_void_p).value


# -- ELF symbols -----------------------------------------------------------------------------
def elf_symbols(data: bytes) -> tuple[set, set]:
    """(undefined, defined) global symbols of the dynamic symbol table of an ELF64
    little-endian shared library; weak undefined symbols count as neither."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize)
                for i in range(count)]
    undefined, defined = set(), set()
    for _, kind, _, _, offset, size, link, _, _, sym_size in sections:
        if kind != 11 or not sym_size:  # SHT_DYNSYM
            continue
        str_offset = sections[link][4]
        for at in range(offset, offset + size, sym_size):
            name_at, info, _, index = struct.unpack_from("<IBBH", data, at)
            end = data.index(b"\0", str_offset + name_at)
            name = data[str_offset + name_at:end].decode()
            binding = info >> 4
            if not name or binding not in (1, 2):
                continue
            if index == 0:
                if binding == 1:
                    undefined.add(name)
            else:
                defined.add(name)
    return undefined, defined


def check_library(binary: bytes, helper: bytes | None, where) -> None:
    """A BundleError unless the kernel library needs nothing but the shim, its helper and the
    C library."""
    try:
        undefined, defined = elf_symbols(binary)
        provided = elf_symbols(helper)[1] if helper else set()
    except (ValueError, struct.error, IndexError) as exc:
        raise BundleError(where, "binary", f"the kernel library cannot be read: {exc}") from None
    missing = sorted(s for s in undefined - provided - {ERROR_SYMBOL} if not _in_c_library(s))
    if missing:
        raise BundleError(where, "binary", f"the kernel library needs {', '.join(missing)}, "
                                           "which the kernel package runtime does not provide")
    unknown = sorted(s for s in defined if s.startswith("__TVM") and s not in CONTEXT)
    if unknown:
        raise BundleError(where, "binary", f"the kernel library calls the TVM runtime through "
                                           f"{', '.join(unknown)}, which the kernel package "
                                           "runtime does not provide")


@functools.lru_cache(maxsize=1)
def _c_libraries() -> tuple:
    names = [ctypes.util.find_library(n) for n in ("c", "m")]
    return tuple(ctypes.CDLL(n) for n in names if n)


def _in_c_library(symbol: str) -> bool:
    """Whether the C library (libc, libm) defines ``symbol``: kernels call memset and the
    math functions from it, resolved in every process."""
    return any(hasattr(lib, symbol) for lib in _c_libraries())


# -- calling -------------------------------------------------------------------------------
class LibraryFunction:
    """The entry of a CPU kernel library loaded from ``binary`` (bytes; loaded from a private
    copy), called with every kernel parameter in kernel order like the JIT's kernels."""

    def __init__(self, binary: bytes, symbol: str, signature: KernelSignature,
                 helper: bytes | None = None, where="kernel"):
        check_library(binary, helper, where)
        lib = shim()
        self._keep = []
        if helper:
            self._keep.append(load_private(helper, "helper.so", ctypes.RTLD_GLOBAL))
        self._lib = load_private(binary, "kernel.so", ctypes.RTLD_LOCAL)
        bind_context(self._lib)
        self._fn = _ENTRY_TYPE((symbol, self._lib))
        self.address = ctypes.cast(self._fn, ctypes.c_void_p).value
        """The entry's C function (the tvm-ffi calling convention), alive with this object."""
        self._last_error = lib.tw_shim_last_error
        self.name = signature.name
        self._kinds = []
        # the positions of T.StridedTensor parameters, passed with their strides
        self._strided = {i for i, p in enumerate(signature.params) if p.strides}
        for p in signature.params:
            if p.kind == "tensor":
                code, bits = DL_DTYPES[p.dtype]
                self._kinds.append((FFI_TENSOR, _DLDataType(code, bits, 1)))
            elif p.dtype == "bool":
                self._kinds.append((FFI_BOOL, None))
            elif p.dtype.startswith(("float", "bfloat")):
                self._kinds.append((FFI_FLOAT, None))
            else:
                self._kinds.append((FFI_INT, None))
        self._shapes: dict = {}

    def __call__(self, *args):
        n = len(args)
        packed = (TVMFFIAny * n)()
        keep = []
        for i, ((kind, dtype), arg) in enumerate(zip(self._kinds, args)):
            slot = packed[i]
            slot.type_index = kind
            if kind == FFI_TENSOR:
                shape = tuple(arg.shape)
                dims = self._shapes.get(shape)
                if dims is None:
                    dims = self._shapes[shape] = (ctypes.c_int64 * len(shape))(*shape)
                strides = None
                if i in self._strided:
                    strides = (ctypes.c_int64 * len(shape))(*arg.stride())
                    keep.append(strides)
                tensor = DLTensor(arg.data_ptr(), _DLDevice(_CPU, 0), len(shape), dtype, dims,
                                  strides, 0)
                keep.append(tensor)
                slot.value.v_ptr = ctypes.addressof(tensor)
            elif kind == FFI_FLOAT:
                slot.value.v_float64 = float(arg)
            else:
                slot.value.v_int64 = int(arg)
        result = TVMFFIAny()
        if self._fn(None, packed, n, ctypes.byref(result)) != 0:
            message = self._last_error().decode(errors="replace") or _raised_in_tvm_ffi()
            raise ArgumentError(f"kernel {self.name}: {message}")


class _ByteArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


_OBJECT_HEADER = 24  # sizeof(TVMFFIObject); the error cell (kind, message, ...) follows it


def _raised_in_tvm_ffi() -> str:
    """The error a kernel raised when a TVM FFI runtime loaded into this process before the
    shim (tvm_ffi's library, loaded globally) received it instead: moved out of that
    runtime through its C API."""
    process = ctypes.CDLL(None)
    move = getattr(process, "TVMFFIErrorMoveFromRaised", None)
    if move is None:
        return "the kernel failed without a message"
    handle = ctypes.c_void_p()
    move(ctypes.byref(handle))
    if not handle.value:
        return "the kernel failed without a message"
    parts = [_ByteArray.from_address(handle.value + _OBJECT_HEADER + i * ctypes.sizeof(_ByteArray))
             for i in range(2)]
    kind, message = (ctypes.string_at(p.data, p.size).decode(errors="replace") for p in parts)
    process.TVMFFIObjectDecRef(handle)
    return f"{kind}: {message}"


def load_private(data: bytes, name: str, mode: int) -> ctypes.CDLL:
    """Load a shared library from ``data`` through a private file, removed once loaded: what
    runs is exactly the bytes that were checked."""
    with tempfile.TemporaryDirectory(prefix="tilewright-load-") as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        return ctypes.CDLL(str(path), mode=mode)


class CpuBundleKernel(KernelCall):
    """A ``cpu-so`` bundle's kernel: inputs in, outputs allocated and returned, with the
    argument checks of the compiled kernel."""

    def __init__(self, function: LibraryFunction, signature: KernelSignature):
        super().__init__(signature, function, "cpu", "cpu")
        self.function = function
        self.name = signature.name

    @staticmethod
    def from_bundle(bundle: Bundle) -> CpuBundleKernel:
        try:
            signature = KernelSignature.from_json(bundle.json("signature"))
        except SignatureError as exc:
            raise BundleError(bundle.path, "fields", str(exc)) from None
        launch = bundle.json("launch")
        symbol = launch.get("symbol") if isinstance(launch, dict) else None
        if not isinstance(symbol, str) or not _ENTRY.match(symbol):
            raise BundleError(bundle.path, "fields", f"entry symbol {symbol!r}")
        return CpuBundleKernel(LibraryFunction(bundle.files["binary"], symbol, signature,
                                               bundle.files.get("helper"), bundle.path),
                               signature)


def export_library(path, library: Path, entry: str, signature: dict, source: str = "",
                   helper: Path | None = None, extra: dict | None = None) -> Path:
    """Write a ``cpu-so`` bundle: the kernel library, its entry, signature, LLVM IR source and
    the helper library its atomics call (``helper``), checked as :func:`check_library` does
    before anything is written."""
    binary = Path(library).read_bytes()
    helper_bytes = Path(helper).read_bytes() if helper else None
    check_library(binary, helper_bytes, path)
    symbol = f"__tvm_ffi_{entry}"
    files = {"binary": ("kernel.so", binary),
             "launch": ("launch.json", json.dumps({"symbol": symbol}).encode()),
             "signature": ("signature.json", json.dumps(signature, indent=1).encode()),
             "source": ("kernel.ll", source.encode()), **(extra or {})}
    if helper_bytes is not None:
        files["helper"] = ("helper.so", helper_bytes)
    return write_bundle(path, "cpu-so", files, entry=symbol)
