"""CUDA executors: NVRTC (through cuda-python, the default) and ``nvcc``. Both build a cubin
for the target's architecture without a GPU; the kernel needs a GPU only when called.

Each writes ``kernel.cu``, ``kernel.cubin``, ``launch.json`` and ``build.log`` (compiler
messages: registers, spills) into its work folder; ``load`` rebuilds the kernel from them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from tilewright.errors import TilewrightError
from tilewright.plugin import Availability, Executor, GeneratedSource
from tilewright.runtime.cuda import CubinFunction

from . import arch as arch_mod

FLAGS = ("-std=c++17", "-O3")


class CompileError(TilewrightError):
    """The CUDA compiler rejected generated code."""


def cuda_home() -> Path | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and (Path(candidate) / "include").is_dir():
            return Path(candidate)
    nvcc = shutil.which("nvcc")
    return Path(nvcc).resolve().parent.parent if nvcc else None


def include_dirs() -> list[str]:
    """Header folders NVRTC needs for the standard headers TVM's source includes."""
    home = cuda_home()
    if home is None:
        return []
    dirs = [home / "include", home / "include" / "cccl"]
    return [str(d) for d in dirs if d.is_dir()]


_DEFINES = (("cuda.h", "CUDA_VERSION"), ("cccl/cuda/std/__cccl/version.h", "CCCL_VERSION"))


def header_versions() -> str:
    """The versions of the CUDA headers the generated source includes (``cuda_fp16.h``,
    ``cuda/std``): the toolkit's ``CUDA_VERSION`` and libcu++'s ``CCCL_VERSION``."""
    home = cuda_home()
    if home is None:
        return "no CUDA headers"
    return ", ".join(_define(home / "include" / path, name) for path, name in _DEFINES)


@functools.cache
def _define(path: Path, name: str) -> str:
    """``NAME value`` of a ``#define NAME value`` in a header, ``NAME ?`` when absent."""
    try:
        match = re.search(rf"^\s*#\s*define\s+{name}\s+(\S+)", path.read_text(errors="replace"),
                          re.MULTILINE)
    except OSError:
        match = None
    return f"{name} {match.group(1) if match else '?'}"


# -- NVRTC -----------------------------------------------------------------------------------
NVRTC_FLAGS = (FLAGS[0], "--diag-suppress=177,550", "--ptxas-options=-v")


# nvcc's flags that NVRTC, which compiles device code alone, has no option for: each pattern
# with what the flag is about. TileLang's examples give nvcc's flags (compile_flags=["-O3",
# "--expt-relaxed-constexpr", ...]); NVRTC names any other flag it does not know.
NVCC_ONLY = (
    (r"-O[0-3]?", "the host code's optimisation level"),
    (r"-g|--debug", "the host code's debug information (-G is the device code's)"),
    (r"(-Xcompiler|--compiler-options)(=.*)?", "the host compiler's options"),
    (r"-W(no-)?deprecated-declarations", "a warning"),
    (r"--?expt-relaxed-constexpr|--?expt-extended-lambda|--?extended-lambda",
     "a C++ extension of nvcc's front end (the generated code and its headers build without)"),
)
# nvcc splits these options' values at commas; NVRTC hands its value to ptxas as one option
PTXAS = re.compile(r"(--ptxas-options|-Xptxas)=(.*)")


def nvrtc_flags(flags) -> tuple[list[str], list[str]]:
    """(the flags NVRTC gets for nvcc's ``flags``, one line for each left out and why): the
    flags of :data:`NVCC_ONLY` are left out, a ptxas option list is given one option a flag;
    the others pass as they are."""
    kept, dropped = [], []
    flags = iter(flags)
    for flag in flags:
        if flag in ("-Xcompiler", "--compiler-options", "-Xptxas", "--ptxas-options"):
            flag = f"{flag}={next(flags, '')}"  # the value as the next argument
        why = next((w for pattern, w in NVCC_ONLY if re.fullmatch(pattern, flag)), None)
        ptxas = PTXAS.fullmatch(flag)
        if why is not None:
            dropped.append(f"{flag}: {why}")
        elif ptxas is not None:
            kept += [f"--ptxas-options={o}" for o in ptxas.group(2).split(",") if o]
        else:
            kept.append(flag)
    return kept, dropped


def nvrtc_options(arch, flags=()) -> list[str]:
    """NVRTC's options for ``arch``; ``flags`` (NVRTC's, :func:`nvrtc_flags` of the
    compilation's ``compile_flags``: fast math, the user's) come last."""
    return [f"--gpu-architecture={arch.name}", *NVRTC_FLAGS,
            *(f"-I{d}" for d in include_dirs()), *flags]


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"NVRTC {major}.{minor}"


def nvrtc_fingerprint() -> str:
    """What decides an NVRTC cubin besides the source and the architecture (which the
    target gives): NVRTC's version, the CUDA headers' versions and the options."""
    return f"{nvrtc_version()}; {header_versions()}; {' '.join(NVRTC_FLAGS)}"


@functools.lru_cache(maxsize=1)
def nvrtc_available() -> Availability:
    try:
        version = nvrtc_version()
    except Exception as exc:  # noqa: BLE001 - missing wheel or library
        return Availability(False, f"NVRTC is not loadable ({type(exc).__name__}: {exc}); "
                                   "pip install 'cuda-bindings==13.0.*' "
                                   "'nvidia-cuda-nvrtc==13.0.*'")
    if not include_dirs():
        return Availability(False, "NVRTC needs the CUDA headers (cuda/std, cuda_fp16.h): set "
                                   "CUDA_HOME to a CUDA 13 toolkit")
    return Availability(True, version)


def _nvrtc_check(result, prog, what):
    from cuda.bindings import nvrtc

    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {err}")
    return rest


def nvrtc_compile(source: str, arch, workdir: Path, flags=()) -> tuple[bytes, str]:
    """(cubin, log) for ``source``, ``flags`` added to the options; a failure raises
    :class:`CompileError` with the failing generated line and a command that reproduces it."""
    from cuda.bindings import nvrtc

    kept, dropped = nvrtc_flags(flags)
    options = nvrtc_options(arch, kept)
    (prog,) = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []),
                           None, "create")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        (size,) = _nvrtc_check(nvrtc.nvrtcGetProgramLogSize(prog), prog, "log")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.decode(errors="replace").rstrip("\x00 ")
        if dropped:  # said in the build's log, which a kernel keeps
            log = "\n".join(["NVRTC left out nvcc's flags it has no option for:",
                              *(f"  {d}" for d in dropped), log])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise compile_failure("NVRTC", log, source, workdir,
                                  [nvcc_path() or "nvcc", "-cubin", arch.gencode, *FLAGS,
                                   *(f"-I{d}" for d in include_dirs()), *flags, "kernel.cu"])
        (size,) = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), prog, "cubin size")
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_failure(tool: str, log: str, source: str, workdir: Path, command) -> CompileError:
    """The error for a failed build: each failing generated line with its neighbours and line
    numbers, and a command reproducing the failure on a copy of the source that outlives the
    (temporary) build folder."""
    lines = source.splitlines()
    shown = []
    for match in re.finditer(r"kernel\.cu\((\d+)\): error: (.*)", log):
        number = int(match.group(1))
        shown.append(f"  kernel.cu:{number}: error: {match.group(2)}")
        for n in range(max(1, number - 1), min(len(lines), number + 1) + 1):
            shown.append(f"    {'>' if n == number else ' '} {n:5d} | {lines[n - 1]}")
    keep = Path(tempfile.mkdtemp(prefix="tilewright-cuda-failure-"))
    (keep / "kernel.cu").write_text(source)
    repro = f"cd {shlex.quote(str(keep))} && {shlex.join(command)}"
    detail = "\n".join(shown) or log[-2000:]
    return CompileError(f"{tool} failed to compile the generated CUDA (kept at "
                        f"{keep / 'kernel.cu'}):\n{detail}\nreproduce with: {repro}")


# -- nvcc ------------------------------------------------------------------------------------
def nvcc_path() -> str | None:
    home = cuda_home()
    if home is not None and (home / "bin" / "nvcc").exists():
        return str(home / "bin" / "nvcc")
    return shutil.which("nvcc")


def nvcc_available() -> Availability:
    nvcc = nvcc_path()
    if nvcc is None:
        return Availability(False, "nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    return Availability(True, nvcc)


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str:
    """``nvcc --version``'s release and build lines (``Cuda compilation tools, release 13.0,
    V13.0.48``, ``Build cuda_13.0.r13.0/compiler.36424714_0``)."""
    out = subprocess.run([nvcc_path() or "nvcc", "--version"], capture_output=True, text=True,
                         check=False).stdout
    lines = [line.strip() for line in out.splitlines() if line.startswith(("Cuda", "Build"))]
    return "; ".join(lines) or "nvcc of unknown version"


def nvcc_fingerprint() -> str:
    """What decides an nvcc cubin besides the source and the architecture: nvcc's version,
    the CUDA headers' versions and the options."""
    return f"{nvcc_version()}; {header_versions()}; {' '.join(NVCC_FLAGS)}"


NVCC_FLAGS = (*FLAGS, "-Xptxas=-v", "-diag-suppress=177,550")


def nvcc_command(arch, out: str = "kernel.cubin", src: str = "kernel.cu",
                 flags=()) -> list[str]:
    return [nvcc_path() or "nvcc", "-cubin", arch.gencode, *NVCC_FLAGS, *flags, "-o", out,
            src]


def nvcc_compile(source: str, arch, workdir: Path, flags=()) -> tuple[bytes, str]:
    workdir = Path(workdir)
    (workdir / "kernel.cu").write_text(source)
    command = nvcc_command(arch, flags=flags)
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True,
                            check=False)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise compile_failure("nvcc", log, source, workdir, command)
    return (workdir / "kernel.cubin").read_bytes(), log


# -- executors ---------------------------------------------------------------------------------
def _build(compiler):
    def build(source: GeneratedSource, ctx, workdir) -> CubinFunction:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "kernel.cu").write_text(source.text)
        arch = arch_mod.get(source.payload["arch"])
        cubin, log = compiler(source.text, arch, workdir,
                              tuple(source.payload.get("compile_flags", ())))
        (workdir / "kernel.cubin").write_bytes(cubin)
        (workdir / "launch.json").write_text(json.dumps(source.payload, indent=1))
        (workdir / "build.log").write_text(log)
        return CubinFunction(cubin, source.payload, source.text)

    return build


def load(workdir, entry: str) -> CubinFunction:
    workdir = Path(workdir)
    launch = json.loads((workdir / "launch.json").read_text())
    return CubinFunction((workdir / "kernel.cubin").read_bytes(), launch,
                         (workdir / "kernel.cu").read_text())


NVRTC = Executor(name="nvrtc", available=nvrtc_available, build=_build(nvrtc_compile),
                 load=load, from_source=True, fingerprint=nvrtc_fingerprint,
                 doc="NVRTC through cuda-python to a cubin; launched with the driver "
                     "API on torch's current stream")
NVCC = Executor(name="nvcc", available=nvcc_available, build=_build(nvcc_compile), load=load,
                from_source=True, fingerprint=nvcc_fingerprint,
                doc="nvcc -cubin (with -Xptxas -v) to a cubin; launched like nvrtc")
EXECUTORS = (NVRTC, NVCC)
