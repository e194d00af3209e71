"""Executors: the CPU emulator of the generated Ascend C, and bisheng + torch_npu on an NPU.

The emulator compiles the generated source with the host C++ compiler against
``csrc/kernel_operator.h`` (the subset of the Ascend C API our codegen uses) and the runtime
``csrc/tw_emu.cpp`` (compiled once per runtime version and cached, as is a precompiled
``kernel_operator.h``: most of a kernel's compile time is that header), then runs it on CPU
torch tensors through ctypes. The launch harness is compiled in the kernel's translation unit,
after the precompiled header (``-include``): a file of its own would parse ``<functional>``
again. Races and synchronisation errors raise :class:`EmulatorError`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import filelock
from tilewright.errors import TilewrightError
from tilewright.plugin import Availability, Executor, GeneratedSource

from .exception_dump import encode_descriptor
from .facts.arch import ARCH, EMULATOR_SPACES, MEMORIES
from .facts.device import npu_available

CSRC = Path(__file__).parent / "csrc"
LIBRARY = "kernel.so"
META = "emulator.json"
FLAGS = ["-std=c++17", "-fPIC", "-DTW_DEVICE_ONLY"]  # kernels build at -O0: compile time wins
_last_stats: dict = {}
A2_CAPACITIES = [MEMORIES[s].capacity for s in EMULATOR_SPACES]


class EmulatorError(TilewrightError):
    """The emulator found races or synchronisation errors in the generated Ascend C."""


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def emulator_available() -> Availability:
    if _compiler() is None:
        return Availability(False, "no C++ compiler (g++ or clang++) on PATH; install g++")
    return Availability(True)


def _cache_root() -> Path:
    return Path(os.environ.get("TILEWRIGHT_ASCEND_EMU_DIR") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") /
                "tilewright-ascend")


def _runtime_digest() -> str:
    """A digest of the runtime sources, the compiler and the flags."""
    return _digest(_compiler() or "")


@functools.cache
def _digest(compiler: str) -> str:
    """The runtime's digest with ``compiler``: its sources are read once per process."""
    digest = hashlib.sha256()
    for path in sorted(p for p in CSRC.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(CSRC)).encode() + path.read_bytes())
    digest.update(" ".join([compiler, *FLAGS]).encode())
    return digest.hexdigest()[:16]


def _cached(name: str, build) -> Path:
    """``name`` in the user cache, made by ``build(temporary_path)`` once: one process builds
    it while the others wait on a lock beside it (the workers of a test run start together),
    written under a temporary name and renamed, so a killed build leaves no torn file."""
    root = _cache_root()
    target = root / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(f"{target}.lock"):
        if target.exists():  # built by another process while this one waited
            return target
        fd, tmp = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
        os.close(fd)
        try:
            build(tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


def _runtime_object() -> Path:
    """``tw_emu.o``, built once per (runtime sources, compiler) and kept in a user cache."""
    return _cached(f"tw_emu-{_runtime_digest()}.o", lambda tmp: _run(
        [_compiler(), *FLAGS, "-O2", "-I", str(CSRC), "-c", str(CSRC / "tw_emu.cpp"), "-o", tmp]))


def _header() -> Path:
    """``kernel_operator.h`` in a folder beside its ``.gch``, precompiled with the kernels' own
    flags: the compiler uses the ``.gch``, or, should it not fit, the header next to it."""
    header = "kernel_operator.h"
    folder = f"pch-{_runtime_digest()}"
    _cached(f"{folder}/{header}", lambda tmp: shutil.copyfile(CSRC / header, tmp))
    return _cached(f"{folder}/{header}.gch", lambda tmp: _run(
        [_compiler(), *FLAGS, "-x", "c++-header", str(CSRC / header), "-o", tmp])).with_suffix("")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise TilewrightError(f"the emulator build failed:\n  {' '.join(cmd)}\n"
                              f"{proc.stderr[-4000:]}")


def _harness(payload: dict) -> str:
    params, dims = payload["params"], payload.get("dims", [])
    decl = ", ".join(["uint8_t*" for _ in params] + ["int32_t" for _ in dims])
    call = ", ".join([f"(uint8_t*)args[{i}]" for i in range(len(params))] +
                     [f"(int32_t)dims[{i}]" for i in range(len(dims))])
    if payload.get("exception_dump"):  # no exception handler on the CPU: no descriptor
        decl, call = decl + ", uint8_t*", call + ", nullptr"
    # the target architecture's memories (A2's for a payload from before there were two)
    capacities = ", ".join(f"{int(c)}ull" for c in payload.get("capacities", A2_CAPACITIES))
    # the kernels in launch order (one, or the blocks of a kernel sequence): each launch
    # starts after the one before has finished; one that finds problems stops the sequence
    launches = [k for k, _ in _launches(payload)]
    runs = "".join(
        f'    errors = tw_emu::launch(int(blocks[{n}]), {len(params)}, args, sizes, names, '
        f'[&] {{ {kernel}({call}); }});\n    if (errors) return errors;\n'
        for n, kernel in enumerate(launches))
    return (
        "#include <cstdint>\n#include <functional>\n"
        "namespace tw_emu { int launch(int, int, void**, const int64_t*, const char**, "
        "const std::function<void()>&); void set_capacities(const uint64_t*); }\n"
        + "".join(f'extern "C" void {kernel}({decl});\n' for kernel in launches) +
        'extern "C" int tw_run(void** args, const int64_t* sizes, const char** names, '
        'const int64_t* blocks, const int64_t* dims) {\n'
        '    (void)dims;\n'
        f'    static const uint64_t capacities[] = {{{capacities}}};\n'
        '    tw_emu::set_capacities(capacities);\n'
        '    int errors = 0;\n'
        f'{runs}'
        '    return errors;\n}\n')


def _launches(meta: dict) -> list:
    """The (kernel, blocks) of each launch, in order (a payload from before sequences has
    one, as ``kernel`` and ``blocks``)."""
    return meta.get("launches") or [[meta["kernel"], meta["blocks"]]]


class EmulatedKernel:
    """The loaded emulator library, callable with the kernel's CPU torch tensors."""

    def __init__(self, path: Path, meta: dict):
        self.meta = meta
        self.lib = ctypes.CDLL(str(path))
        self.lib.tw_run.restype = ctypes.c_int
        self.lib.tw_emu_report.restype = ctypes.c_char_p
        self.lib.tw_emu_stats.restype = ctypes.c_char_p
        params = meta["params"]
        self.names = (ctypes.c_char_p * len(params))(*[p[0].encode() for p in params])
        self.last_stats: dict = {}

    def __call__(self, *tensors):
        params = self.meta["params"]
        tensors = (*tensors, *_workspaces(self.meta, tensors, float("nan")))
        ptrs, sizes = [], []
        for (name, _, _), t in zip(params, tensors):
            if getattr(t, "device", None) is not None and t.device.type != "cpu":
                raise TilewrightError(f"the Ascend emulator runs on CPU tensors; argument "
                                      f"{name!r} is on {t.device}")
            if not t.is_contiguous():
                raise TilewrightError(f"argument {name!r} must be contiguous")
            ptrs.append(t.data_ptr())
            sizes.append(t.numel() * t.element_size())
        args = (ctypes.c_void_p * len(ptrs))(*ptrs)
        c_sizes = (ctypes.c_int64 * len(sizes))(*sizes)
        dims = launch_dims(self.meta, tensors)
        c_dims = (ctypes.c_int64 * max(1, len(dims)))(*dims.values())
        grids = [launch_blocks({"blocks": blocks}, dims) for _, blocks in _launches(self.meta)]
        errors = self.lib.tw_run(args, c_sizes, self.names, (ctypes.c_int64 * len(grids))(*grids),
                                 c_dims)
        self.last_stats = json.loads(self.lib.tw_emu_stats().decode())
        _last_stats.clear()
        _last_stats.update(self.last_stats)
        if errors:
            report = self.lib.tw_emu_report().decode()
            message = (f"the Ascend emulator found {errors} problem(s) in kernel "
                       f"{self.meta['kernel']}:\n{report}")
            if self.meta.get("races") == "warn":
                import warnings

                warnings.warn(message, stacklevel=2)
            else:
                raise EmulatorError(message)


def launch_dims(meta: dict, tensors) -> dict:
    """The dynamic dimensions (T.dynamic) of a launch, read from the tensors' shapes."""
    out = {}
    for name, index, axis in meta.get("dims", []):
        value = int(tensors[index].shape[axis])
        if value >= 2 ** 31:
            raise TilewrightError(f"dimension {name} = {value} does not fit the kernel's int32")
        out[name] = value
    return out


def launch_blocks(meta: dict, dims: dict) -> int:
    """The grid size: fixed, or computed from the dynamic dimensions at each launch."""
    blocks = meta["blocks"]
    if isinstance(blocks, int):
        return blocks
    return int(eval(blocks, {"__builtins__": {}, "min": min, "max": max}, dict(dims)))  # noqa: S307 - our own expression over ints


def _workspaces(meta: dict, tensors, fill: float) -> list:
    """GM workspaces for the trailing workspace parameters of a split kernel (see
    :mod:`.transforms.split`), on the device of the kernel's tensors. Float ones start as
    ``fill``: NaN on the emulator, so a read before the producer's write shows in the results;
    0 on an NPU, where a NaN reaching Mmad is what its documentation warns against."""
    count = int(meta.get("workspaces", 0))
    if not count:
        return []
    import torch

    device = tensors[0].device if tensors else "cpu"
    out = [torch.empty(shape, dtype=getattr(torch, dtype), device=device)
           for _, dtype, shape in meta["params"][-count:]]
    return [t.fill_(fill) if t.is_floating_point() else t.zero_() for t in out]


def last_run_stats() -> dict:
    """Per-pipe activity of the last emulated launch: instructions, bytes and busy cycles per
    pipe, total cycles, and the fraction of MTE2 time that overlaps V or M work."""
    return dict(_last_stats)


def build_emulator(source: GeneratedSource, ctx, workdir) -> EmulatedKernel:
    workdir = Path(workdir)
    (workdir / "kernel.cpp").write_text(source.text)
    (workdir / "harness.cpp").write_text(_harness(source.payload))
    obj = _link(workdir, workdir)
    meta = {**source.payload, "runtime": obj.name,
            "races": str(ctx.pass_configs.get("ascend.emulator_races", "error"))}
    (workdir / META).write_text(json.dumps(meta))
    return EmulatedKernel(workdir / LIBRARY, meta)


def _link(sources: Path, out: Path) -> Path:
    """Build ``sources``' kernel and harness into ``out``'s library: one translation unit, the
    precompiled header first (the kernel's own ``#include`` of it is then the same file, which
    ``#pragma once`` skips), the harness next, then the kernel."""
    obj = _runtime_object()
    header = _header()
    _run([_compiler(), *FLAGS, "-shared", "-I", str(header.parent), "-I", str(CSRC),
          "-include", str(header), "-include", str(sources / "harness.cpp"),
          str(sources / "kernel.cpp"), str(obj), "-o", str(out / LIBRARY)])
    return obj


def load_emulator(workdir, entry: str) -> EmulatedKernel:
    workdir = Path(workdir)
    meta = json.loads((workdir / META).read_text())
    if meta.get("runtime") != _runtime_object().name:
        # the cached library was linked with an older emulator runtime: relink it privately
        fresh = Path(tempfile.mkdtemp(prefix="tilewright-ascend-"))
        _link(workdir, fresh)
        return EmulatedKernel(fresh / LIBRARY, meta)
    return EmulatedKernel(workdir / LIBRARY, meta)


def compile_and_run_source(text: str, payload: dict, tensors, workdir) -> EmulatedKernel:
    """Build ``text`` (for example a hand-edited generated source) and run it once."""
    source = GeneratedSource(text, "ascendc", "cpp", payload, payload["kernel"])

    ctx = type("EmulatorContext", (), {"pass_configs": {}})()
    kernel = build_emulator(source, ctx, workdir)
    kernel(*tensors)
    return kernel


def bisheng_command(home, source, library) -> list[str]:
    """The bisheng command that builds ``source`` into the shared library ``library`` for
    dav-2201 against the CANN installation ``home`` (``$ASCEND_HOME_PATH``). The backend
    inserts every flag itself, so the compiler's own synchronisation is off."""
    home = Path(home)
    return ["bisheng", f"--npu-arch={ARCH}", "-O2", "-std=c++17", "-xasc",
            "--cce-auto-sync=off", "-fPIC", "--shared", f"-I{home}/include",
            f"-I{home}/compiler/tikcpp/tikcfw", f"-I{home}/compiler/tikcpp/tikcfw/impl",
            f"-I{home}/compiler/tikcpp/tikcfw/interface", str(source), f"-L{home}/lib64",
            "-lruntime", "-lascendcl", "-o", str(library)]


def _build_npu(source: GeneratedSource, ctx, workdir):
    workdir = Path(workdir)
    (workdir / "kernel.cpp").write_text(source.text)
    _run(bisheng_command(os.environ["ASCEND_HOME_PATH"], workdir / "kernel.cpp",
                         workdir / LIBRARY))
    (workdir / META).write_text(json.dumps(source.payload))
    return _load_npu(workdir, source.entry)


def _load_npu(workdir, entry: str):
    """The launcher of a bisheng-built library, written to be captured by ``torch.npu.graph``
    (ACLGraph) as the CUDA launch path is by ``torch.cuda.graph``:

    - the kernel goes on the current stream of the tensors' device (inside
      ``torch.npu.graph``, the capturing stream), through the generated host function, which
      is one ``<<<blocks, nullptr, stream>>>`` launch;
    - no host synchronisation: the grid and the dynamic dimensions come from the tensors'
      shapes on the host, nothing is read back from the device;
    - no device allocation of its own: workspaces come from torch's caching allocator on that
      stream (under capture, from the graph's private pool) and are zeroed by a kernel on it;
    - the exception-dump descriptor is copied from the host at each launch, which a capture
      cannot record: a kernel built with ``ascend.exception_dump`` refuses to be captured.

    torch_npu is never imported here: the user imports it, which makes ``torch.npu``."""
    import torch  # torch_npu registers the device when imported by the user

    meta = json.loads((Path(workdir) / META).read_text())
    lib = ctypes.CDLL(str(Path(workdir) / LIBRARY))
    launch = getattr(lib, f"{entry}_launch")

    def run(*tensors):
        npu = torch.npu  # type: ignore[attr-defined]
        device = tensors[0].device if tensors else None
        if meta.get("exception_dump") and npu.is_current_stream_capturing():
            raise TilewrightError(
                f"kernel {meta['kernel']} was built with ascend.exception_dump, which copies a "
                "descriptor from the host at every launch; a torch.npu.graph capture cannot "
                "record that copy. Compile it without ascend.exception_dump to capture it")
        stream = npu.current_stream(device).npu_stream
        run.workspaces = _workspaces(meta, tensors, 0.0)  # kept until the next launch
        tensors = (*tensors, *run.workspaces)
        dims = launch_dims(meta, tensors)
        args = [ctypes.c_void_p(stream), *[ctypes.c_void_p(t.data_ptr()) for t in tensors],
                *[ctypes.c_int32(v) for v in dims.values()]]
        if meta.get("exception_dump"):  # the host function's last parameter
            run.descriptor = _descriptor(meta, tensors)
            args.append(ctypes.c_void_p(run.descriptor.data_ptr()))
        launch(*args)

    run.meta = meta
    return run


def _descriptor(meta: dict, tensors):
    """The exception-dump descriptor of a launch (:mod:`.exception_dump`) in device memory."""
    import torch

    data = encode_descriptor(meta["kernel"], [
        (t.numel() * t.element_size(), t.data_ptr(), str(t.dtype).removeprefix("torch."))
        for t in tensors])
    host = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return host.to(tensors[0].device if tensors else "cpu")


EMULATOR = Executor(
    name="emulator", available=emulator_available, build=build_emulator, load=load_emulator,
    from_source=True,
    doc="compiles the generated Ascend C with g++ against a CPU model of the Ascend C API; "
        "runs on CPU tensors and reports races and synchronisation errors",
)
BISHENG = Executor(
    name="bisheng", available=npu_available, build=_build_npu, load=_load_npu, from_source=True,
    doc="bisheng (CANN) builds the Ascend C; ctypes launches it on torch_npu tensors",
)
EXECUTORS = (BISHENG, EMULATOR)
