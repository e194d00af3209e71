"""Running a generated program differentially: on the interpreter (the reference semantics)
and on a backend, comparing every output within the program's error bounds.

A program is a Python module (see :func:`module_source`): the kernel, its input ranges, its
outputs with their absolute tolerances, and a ``__main__`` that calls :func:`reproduce`. The
fuzzer runs exactly that module, and saves it when the backend disagrees, so a saved failure
is a standalone reproducer: ``python repro.py [BACKEND]``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

from .gemm import GemmProgram
from .program import Program

REFERENCE = "interp"
SAFETY = 4.0  # on the error bounds: both sides round, and bounds are per element
_ids = itertools.count()


class Mismatch(AssertionError):
    """The backend's result differs from the interpreter's beyond the program's bounds."""


class Refused(Exception):
    """The backend refused the program at compile time with a deliberate error (a
    :class:`~tilewright.errors.KernelError` raised by tilewright code, not a crash wrapped in
    one): a capability gap, not a wrong result."""


def deliberate(exc: BaseException) -> bool:
    """Whether ``exc`` and every exception it wraps (``raise ... from``) are tilewright's
    kernel errors; an error that wraps a crash (a TVM ``InternalError``) is not."""
    from tilewright.errors import KernelError

    while exc is not None:
        if not isinstance(exc, KernelError):
            return False
        exc = exc.__cause__
    return True


def module_source(program: Program | GemmProgram, backend: str, seed: int,
                  note: str = "") -> str:
    """The program as a standalone module for ``backend``; ``note`` goes in its docstring."""
    inputs = ", ".join(f"({n!r}, {shape!r}, {dtype!r}, {lo!r}, {hi!r})"
                       for n, shape, dtype, lo, hi in program.input_specs())
    outputs = ", ".join(f"({n!r}, {shape!r}, {dtype!r}, {err!r})"
                        for n, shape, dtype, err in program.outputs)
    doc = note.strip().replace('"""', "'''")
    return f'''"""A tile program from tilewright_sdk.fuzz, run on backend {backend!r} against the
interpreter. Run it again: python THIS_FILE [BACKEND]
{doc}
"""

import sys

import tilewright.language as T
from tilewright_sdk.fuzz.check import reproduce

BACKEND = {backend!r}
SEED = {seed!r}
# (name, shape, dtype, low, high): uniform random values (int4: packed two a byte; float8:
# rounded to the format)
INPUTS = [{inputs}]
# (name, shape, dtype, bound of the absolute rounding error of a correct result)
OUTPUTS = [{outputs}]
FEATURES = {sorted(program.features)!r}


{program.kernel_source()}

if __name__ == "__main__":
    sys.exit(reproduce(fuzz, INPUTS, OUTPUTS, sys.argv[1] if len(sys.argv) > 1 else BACKEND,
                       SEED))
'''


def load(source: str, folder) -> object:
    """Import ``source`` as a module from a file in ``folder`` (kernel tracing reads the
    source of the function, so it must live in a file)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = Path(folder) / f"fuzz_{digest}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"tilewright_fuzz_{next(_ids)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(inputs, seed: int) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for _name, shape, dtype, low, high in inputs:
        if dtype.startswith(("int", "uint")):
            values = torch.randint(int(low), int(high) + 1, shape, generator=gen)
        else:
            values = torch.rand(*shape, generator=gen, dtype=torch.float64) * (high - low) + low
        if dtype == "int4":  # as the runtime takes it: int8, two a byte, the low nibble first
            values = (values[..., ::2] & 0xF) | ((values[..., 1::2] & 0xF) << 4)
            dtype = "int8"
        out.append(values.to(getattr(torch, dtype)))
    return out


def run_on(func, target: str, inputs, n_outputs: int) -> list:
    """Compile ``func`` for ``target`` (raising :class:`Refused` for a deliberate refusal) and
    run it on copies of ``inputs``."""
    import tilewright
    from tilewright.errors import KernelError

    out_idx = list(range(len(func.params) - n_outputs, len(func.params)))
    try:
        kernel = tilewright.compile(func, out_idx=out_idx, target=target)
    except KernelError as exc:
        if deliberate(exc):
            raise Refused(str(exc).splitlines()[0]) from exc
        raise
    result = kernel(*[t.clone() for t in inputs])
    return list(result) if isinstance(result, (list, tuple)) else [result]


def compare(got: list, want: list, outputs) -> None:
    """Raise :class:`Mismatch` naming each output beyond its bound."""
    from tilewright.testing import ToleranceError, assert_close, unit_roundoff

    problems = []
    for g, w, (name, _shape, dtype, err) in zip(got, want, outputs):
        if dtype.startswith(("int", "uint")):  # exact; int64 so no square overflows
            rtol, atol = 0.0, 0.0
            g, w = g.long(), w.long()
        else:
            rtol = 2 * SAFETY * unit_roundoff(dtype)
            atol = 2 * SAFETY * err + rtol
        try:
            assert_close(g, w.double() if w.is_floating_point() else w, dtype=dtype,
                         rtol=rtol, atol=atol, max_mismatch_ratio=0.0, name=name)
        except ToleranceError as exc:
            problems.append(str(exc))
    if problems:
        raise Mismatch("\n".join(problems))


def differential(module, backend, seed: int, execute: bool) -> None:
    """Run ``module``'s kernel on the interpreter and on ``backend``; compare when
    ``execute``, else only compile it for the backend."""
    target = backend.target_kinds[0]
    if not execute:
        from tilewright.engine import build, lower
        from tilewright.errors import KernelError

        try:
            lowered = lower(module.fuzz, target)
        except KernelError as exc:
            if deliberate(exc):
                raise Refused(str(exc).splitlines()[0]) from exc
            raise
        with tempfile.TemporaryDirectory(prefix="tw-fuzz-") as workdir:
            build(lowered, workdir)
        return
    inputs = make_inputs(module.INPUTS, seed)
    want = run_on(module.fuzz, REFERENCE, inputs, len(module.OUTPUTS))
    got = run_on(module.fuzz, target, inputs, len(module.OUTPUTS))
    compare(got, want, module.OUTPUTS)


def reproduce(func, inputs, outputs, backend: str, seed: int) -> int:
    """The ``__main__`` of a saved program: 0 when ``backend`` agrees with the interpreter."""
    values = make_inputs(inputs, seed)
    want = run_on(func, REFERENCE, values, len(outputs))
    got = run_on(func, backend, values, len(outputs))
    try:
        compare(got, want, outputs)
    except Mismatch as exc:
        print(f"backend {backend!r} disagrees with the interpreter:\n{exc}", file=sys.stderr)
        return 1
    print(f"backend {backend!r} agrees with the interpreter")
    return 0
