"""Front-end check of generated Ascend C against the vendor's Ascend C API (asc-devkit).

Each source is compiled by the host C++ compiler (``g++ -fsyntax-only``) against the
asc-devkit headers for the target's ``__NPU_ARCH__`` (2201 for ``ascend``, 3510 for
``ascend-950``), twice: as the cube core (``__DAV_CUBE__``)
and as a vector core (``__DAV_VEC__``). What bisheng builds in and the headers take for
granted (address-space qualifiers, ``half``/``bfloat16_t``, the compiler's enums, the device
builtins) comes from ``devkit/device_stubs.h`` (and, for 3510, ``devkit/device_stubs_3510.h``:
the SIMT and register-API builtins, the 8- and 4-bit types); the kit's high-level API headers
(``include/adv_api``, whose implementation the kit does not ship) are empty stand-ins. The
headers then parse without a diagnostic, so every diagnostic of a check comes from the
generated source: a wrong function, overload, template argument, or a ``static_assert`` of the
vendor's implementation (for example a dtype an A2 instruction does not take).

The kit is found at the path in ``TILEWRIGHT_ASC_DEVKIT`` or at a default the caller gives;
the headers are precompiled once per core for a check. Run it as
``python -m tilewright_ascend.kit.headers [--devkit PATH] [--target ascend|ascend-950]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import filelock

from ..facts.arch import ARCHS, NPU_ARCH
from .sources import REPO, generated, source_set

DEVKIT_ENV = "TILEWRIGHT_ASC_DEVKIT"
STUBS = Path(__file__).parent / "devkit"
CORES = {"AIC": "__DAV_CUBE__", "AIV": "__DAV_VEC__"}
# kit paths the headers include each other by
INCLUDES = (".", "include", "include/basic_api", "include/utils", "impl", "impl/basic_api",
            "impl/utils")
FLAGS = ("-std=c++17", "-fsyntax-only", "-Wno-attributes", "-DTW_DEVICE_ONLY")
# per architecture: 3510's SIMT headers instantiate their own LgammaImpl<int> at the end of
# every translation unit (kernel_simt_bessel_impl.h), converting +inf to int: a vendor warning
ARCH_FLAGS = {3510: ("-Wno-overflow",)}


def find_devkit(default: Path | None = None) -> Path | None:
    """The asc-devkit root: ``$TILEWRIGHT_ASC_DEVKIT``, else ``default``; None when neither
    holds the kit's ``include/kernel_operator.h``."""
    for candidate in (os.environ.get(DEVKIT_ENV), default):
        if candidate and (Path(candidate) / "include" / "kernel_operator.h").is_file():
            return Path(candidate).resolve()
    return None


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++")


def unavailable(devkit: Path | None) -> str | None:
    """Why the check cannot run here, or None."""
    if devkit is None:
        return (f"the asc-devkit headers are not here (set {DEVKIT_ENV} to the kit's root, the "
                "folder holding include/kernel_operator.h)")
    if compiler() is None:
        return "no host C++ compiler (g++) on PATH"
    return None


@dataclass(frozen=True)
class Finding:
    """The diagnostics of one source compiled as one core."""

    name: str
    core: str
    text: str


class HeaderCheck:
    """Compiles sources against the kit; :meth:`prepare` builds the precompiled headers."""

    def __init__(self, devkit: Path, workdir: Path, npu_arch: int = NPU_ARCH):
        self.devkit, self.workdir, self.npu_arch = Path(devkit), Path(workdir), npu_arch
        self.shim = self.workdir / "adv_api_stand_ins"
        self.prelude: dict[str, Path] = {}

    def include_flags(self) -> list[str]:
        return [f"-I{self.shim}", *(f"-I{self.devkit / p}" for p in INCLUDES)]

    def core_flags(self, core: str) -> list[str]:
        return [*FLAGS, *ARCH_FLAGS.get(self.npu_arch, ()), f"-D__NPU_ARCH__={self.npu_arch}",
                f"-D{CORES[core]}", *self.include_flags()]

    def prepare(self) -> None:
        """The empty stand-ins of ``include/adv_api`` and one precompiled prelude per core.
        Processes sharing ``workdir`` (the workers of a test run) build them once: the first
        under a lock, the others find them done."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(self.workdir / "prepare.lock"):
            done = self.workdir / "prepared"
            if not done.exists():
                self._build_preludes()
                done.touch()
        self.prelude = {core: self.workdir / core / "tw_devkit.h" for core in CORES}

    def _build_preludes(self) -> None:
        for header in (self.devkit / "include" / "adv_api").rglob("*.h"):
            stand_in = self.shim / header.relative_to(self.devkit)
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.touch()
        for core in CORES:
            folder = self.workdir / core
            folder.mkdir(parents=True, exist_ok=True)
            prelude = folder / "tw_devkit.h"
            prelude.write_text(f'#include "{STUBS / "device_stubs.h"}"\n'
                               '#include "kernel_operator.h"\n')
            flags = [f for f in self.core_flags(core) if f != "-fsyntax-only"]
            proc = subprocess.run([compiler(), *flags, "-x", "c++-header", str(prelude), "-o",
                                   f"{prelude}.gch"], capture_output=True, text=True)
            if proc.returncode or proc.stderr.strip():
                raise RuntimeError(f"the asc-devkit headers do not parse as the {core} of "
                                   f"__NPU_ARCH__ {self.npu_arch} with the stubs of {STUBS}:"
                                   f"\n{proc.stderr[-4000:]}")

    def compile(self, name: str, text: str, core: str) -> Finding | None:
        """The diagnostics of ``text`` compiled as ``core``, or None when there are none. Each
        core compiles a file of its own: the two compiles of one source run at once, and one
        rewriting the file the other's compiler was reading made it "shorter than expected";
        for the same reason each process sharing ``workdir`` has a folder of its own."""
        source = self.workdir / "sources" / str(os.getpid()) / core / f"{name}.cpp"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
        proc = subprocess.run([compiler(), *self.core_flags(core), "-Winvalid-pch", "-include",
                               str(self.prelude[core]), str(source)],
                              capture_output=True, text=True)
        out = proc.stderr.strip()
        return Finding(name, core, out) if proc.returncode or out else None

    def check(self, sources: dict[str, str], jobs: int = 2) -> list[Finding]:
        """Every source as both cores; the findings, in order."""
        if not self.prelude:
            self.prepare()
        work = [(name, text, core) for name, text in sources.items() for core in CORES]
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            results = list(pool.map(lambda w: self.compile(*w), work))
        return [r for r in results if r is not None]


def check_sources(sources: dict[str, str], devkit: Path, jobs: int = 2,
                  npu_arch: int = NPU_ARCH, workdir: Path | None = None) -> list[Finding]:
    """Check ``sources`` (name -> generated Ascend C) in ``workdir``, whose precompiled
    headers are built on its first use and kept (a folder per ``npu_arch``), or else in a
    temporary folder."""
    if workdir is not None:
        return HeaderCheck(devkit, Path(workdir), npu_arch).check(sources, jobs)
    with tempfile.TemporaryDirectory(prefix="tw-devkit-check-") as folder:
        return HeaderCheck(devkit, Path(folder), npu_arch).check(sources, jobs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devkit", type=Path, default=None,
                        help=f"asc-devkit root (default ${DEVKIT_ENV}, else "
                             "../shared/vendor/asc-devkit next to the repository)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--target", choices=tuple(ARCHS), default="ascend",
                        help="the target whose sources are checked against its architecture's "
                             "headers (default ascend: A2, 2201; ascend-950: 3510)")
    args = parser.parse_args(argv)
    devkit = find_devkit(args.devkit or REPO.parent / "shared" / "vendor" / "asc-devkit")
    reason = unavailable(devkit)
    if reason:
        print(f"skipped: {reason}")
        return 0
    sources, refused = generated(source_set(target=args.target))
    findings = check_sources(sources, devkit, args.jobs, ARCHS[args.target].npu_arch)
    for f in findings:
        print(f"== {f.name} as {f.core}\n{f.text}\n")
    for line in refused:
        print(f"refused, not checked: {line}")
    print(f"{args.target}: {len(sources)} sources x {len(CORES)} cores: {len(findings)} with "
          "diagnostics"
          f" ({len(refused)} kernels refused by the backend)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
