"""Compile-only: the generated source of a kernel, without building or running it.

``python -m tilewright.tools.compile_only [--target T] --output_file F script.py [args...]``
runs ``script.py`` until its first kernel compiles, writes that kernel's source to ``F`` and
stops the script there (nothing is built, no device is touched). The default target ``cpu``
works on any machine; an accelerator target (``cuda``, ``ascend``) needs its backend installed
but no device, since codegen needs none; ``auto`` is refused because choosing it would probe
the devices of this machine. ``--all`` keeps running the script and writes every kernel it
compiles (``F``, ``F.1``, ...): every call of a factory, every eager kernel. There a kernel
call checks its arguments and returns outputs of the right shape, uninitialised (nothing
runs), so a script that checks its results stops at the first check, keeping what it
compiled before.

In Python: :func:`compile_kernel_source` (a PrimFunc and a target, returns the source text).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from ..engine import finish, lower, resolve_target
from ..errors import TargetError, TilewrightError
from ..jit import kernel as kernel_mod
from ..jit.signature import signature_of
from ..runtime.call import KernelCall

DEFAULT_TARGET = "cpu"


def _check_target(target: str) -> str:
    if str(target).split()[0] == "auto":
        raise TargetError("compile-only refuses target 'auto': it would pick a backend by "
                          "probing this machine's devices; name the target (cpu, cuda, "
                          "ascend, ...)")
    return target


def compile_kernel_source(func, target: str = DEFAULT_TARGET, pass_configs=None) -> str:
    """Lower ``func`` (a tile-level PrimFunc) for ``target`` and return the generated source."""
    lowered = lower(func, _check_target(target), pass_configs)
    finish(lowered)
    return lowered.source.text


class _Stop(Exception):
    """Ends the script after its first kernel."""


def _intercept(target: str, keep_going: bool, sources: list):
    """Make ``tilewright.compile`` (and so ``@jit``) lower for ``target`` and record the
    source instead of building."""
    _, backend = resolve_target(target)

    def compile_only(func, out_idx, pass_configs):
        text = compile_kernel_source(func, target, pass_configs)
        signature = signature_of(func, kernel_mod.output_indices(func, out_idx))
        sources.append((signature.name, text))
        if not keep_going:
            raise _Stop()
        return _Unbuilt(signature, backend)

    return kernel_mod.compile_instead(compile_only)


class _Unbuilt:
    """What a compile-only compilation returns when the script goes on (``--all``): a call
    checks its arguments as the kernel's would and returns its outputs uninitialised."""

    def __init__(self, signature, backend):
        self.signature, self.name = signature, signature.name
        self._call = KernelCall(signature, lambda *args: None, backend.device, backend.name)

    def __call__(self, *args):
        return self._call(*args)

    def get_kernel_source(self) -> str:
        return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilewright.tools.compile_only",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=DEFAULT_TARGET,
                        help="target to generate for (default: cpu); 'auto' is refused")
    parser.add_argument("--output_file", "--output-file", "-o", required=True,
                        help="where to write the generated source")
    parser.add_argument("--all", action="store_true",
                        help="write every kernel the script compiles, not only the first")
    parser.add_argument("script", help="the Python script that compiles kernels")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    ns = parser.parse_args(argv)
    try:
        _check_target(ns.target)
        resolve_target(ns.target)
    except TilewrightError as exc:
        print(f"compile_only: {exc}", file=sys.stderr)
        return 2
    script = Path(ns.script)
    if not script.is_file():
        print(f"compile_only: no such script: {script}", file=sys.stderr)
        return 2
    sources: list = []
    old_argv = sys.argv
    sys.argv = [str(script), *ns.args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        with _intercept(ns.target, ns.all, sources):
            runpy.run_path(str(script), run_name="__main__")
    except _Stop:
        pass
    except SystemExit as exc:
        if exc.code not in (0, None) and not sources:
            raise
    except Exception as exc:
        if not (ns.all and sources):
            raise
        print(f"compile_only: the script stopped after {len(sources)} kernel(s) "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        sys.argv = old_argv
        sys.path.pop(0)
    if not sources:
        print(f"compile_only: {script} compiled no kernel", file=sys.stderr)
        return 1
    out = Path(ns.output_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    for n, (name, text) in enumerate(sources):
        path = out if n == 0 else out.with_name(f"{out.name}.{n}")
        path.write_text(text)
        print(f"compile_only: kernel {name} ({ns.target}) -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
