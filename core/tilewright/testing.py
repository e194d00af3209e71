"""Comparing kernel outputs with references, with tolerances derived from the numbers.

A floating-point result differs from the exact one by rounding. With unit roundoff ``u`` of a
dtype (half the distance from 1.0 to the next representable number), one rounding costs at
most ``u`` relatively, and a sum of ``K`` terms accumulated in a dtype with unit roundoff
``u_acc`` typically drifts by about ``u_acc * sqrt(K)`` relative to the size of its terms.
:func:`tolerance` turns that into ``rtol``/``atol``; :func:`assert_close` compares with them
and explains a failure (how many elements, the worst ones with their indices, the tolerance
used). :func:`float64_reference` computes a reference in float64 from the same inputs the
kernel saw, so the reference's own rounding does not count against the kernel.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import operator
import os
import random
import sys
from dataclasses import dataclass

import numpy as np

from .utils.tensor import torch_assert_close

__all__ = ["Comparison", "Tolerance", "ToleranceError", "assert_close", "compare",
           "float64_reference", "main", "requires_cuda", "requires_cuda_compute_version",
           "requires_cuda_compute_version_eq", "requires_cuda_compute_version_ge",
           "requires_cuda_compute_version_gt", "requires_cuda_compute_version_le",
           "requires_cuda_compute_version_lt", "requires_package", "set_random_seed",
           "tolerance", "torch_assert_close", "unit_roundoff"]

# Unit roundoff u = 2**-(mantissa bits + 1) of each floating dtype.
_UNIT_ROUNDOFF = {
    "float64": 2.0 ** -53,
    "float32": 2.0 ** -24,
    "tfloat32": 2.0 ** -11,
    "float16": 2.0 ** -11,
    "bfloat16": 2.0 ** -8,
    "float8_e4m3fn": 2.0 ** -4,
    "float8_e5m2": 2.0 ** -3,
    "float8_e8m0fnu": 2.0 ** -1,  # powers of two: a conversion may be off by a factor of 1.5
    # Not a dtype: the float32 accumulator of Hopper's fp8 tensor-core instructions (wgmma
    # with e4m3/e5m2 operands), which keeps about 14 bits of each sum (DeepSeek-V3 technical
    # report, section 3.3.2, measured on H800). An accumulation model for ``accum_dtype``.
    "fp8_tensor_core": 2.0 ** -14,
}
# Accumulation dtype assumed when none is given: low-precision kernels accumulate in float32.
_DEFAULT_ACCUM = {"float16": "float32", "bfloat16": "float32", "float8_e4m3fn": "float32",
                  "float8_e5m2": "float32", "tfloat32": "float32"}

SAFETY = 4.0
"""Multiplier on the error estimate: covers a last-bit rounding flip of the output (2u) and the
constant in front of the sqrt(K) random-walk estimate."""


class ToleranceError(AssertionError):
    """Raised by :func:`assert_close`; ``comparison`` holds the numbers."""

    def __init__(self, message: str, comparison: Comparison):
        super().__init__(message)
        self.comparison = comparison


def _dtype_name(dtype) -> str:
    if dtype is None:
        return ""
    text = str(dtype).removeprefix("torch.")
    return {"half": "float16", "float": "float32", "double": "float64"}.get(text, text)


def unit_roundoff(dtype) -> float:
    """The unit roundoff ``u`` of a floating dtype (a name, a torch or numpy dtype)."""
    name = _dtype_name(dtype)
    if name not in _UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for dtype {name!r}; known: "
                         f"{', '.join(sorted(_UNIT_ROUNDOFF))}")
    return _UNIT_ROUNDOFF[name]


@dataclass(frozen=True)
class Tolerance:
    """``|actual - expected| <= atol + rtol * |expected|`` for all but ``max_mismatch_ratio``
    of the elements; ``why`` says where the numbers came from."""

    rtol: float
    atol: float
    max_mismatch_ratio: float
    why: str


def tolerance(dtype, *, reduction_length: int | None = None, accum_dtype=None,
              scale: float = 1.0, safety: float = SAFETY,
              max_mismatch_ratio: float | None = None) -> Tolerance:
    """The tolerance for an output of ``dtype`` computed with a reduction of length
    ``reduction_length`` (None or 1 for elementwise results).

    - ``rtol = safety * (u_out + u_acc * sqrt(K))``: one rounding into the output dtype, plus
      the random-walk error of a length-K sum accumulated in ``accum_dtype`` (float32 for
      16-bit outputs unless given, else the output dtype);
    - ``atol = rtol * scale``: the absolute floor for outputs near zero, where a relative
      bound means nothing; ``scale`` is the typical magnitude of the outputs (
      :func:`compare` passes the root mean square of the reference);
    - ``max_mismatch_ratio``: 0 for 32- and 64-bit outputs; 1e-3 for narrower ones, whose
      last-bit rounding flips are not errors of the kernel.
    """
    out = _dtype_name(dtype) or "float32"
    if out not in _UNIT_ROUNDOFF:  # integer and bool outputs compare exactly
        return Tolerance(0.0, 0.0, 0.0 if max_mismatch_ratio is None else max_mismatch_ratio,
                         f"{out} compares exactly")
    acc = _dtype_name(accum_dtype) or _DEFAULT_ACCUM.get(out, out)
    u_out, u_acc = unit_roundoff(out), unit_roundoff(acc)
    k = max(1, int(reduction_length or 1))
    rtol = safety * (u_out + (u_acc * math.sqrt(k) if k > 1 else 0.0))
    if max_mismatch_ratio is None:
        max_mismatch_ratio = 1e-3 if u_out > 2.0 ** -24 else 0.0
    why = (f"dtype {out} (u={u_out:.3g})" + (f", K={k} accumulated in {acc} (u={u_acc:.3g})"
                                             if k > 1 else "") + f", safety x{safety:g}")
    return Tolerance(rtol, rtol * max(float(scale), 0.0) or rtol, max_mismatch_ratio, why)


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` measured."""

    ok: bool
    tolerance: Tolerance
    total: int
    mismatched: int
    max_abs_error: float
    max_rel_error: float
    worst: tuple  # ((index, actual, expected, abs error, allowed), ...)
    shape: tuple

    def describe(self, name: str = "output") -> str:
        tol = self.tolerance
        ratio = self.mismatched / self.total if self.total else 0.0
        lines = [(f"{name}: {self.mismatched} of {self.total} elements ({ratio:.3%}) differ "
                  f"beyond tolerance (at most {tol.max_mismatch_ratio:.3%} may); "
                  f"rtol={tol.rtol:.3g}, atol={tol.atol:.3g} from {tol.why}; "
                  f"max abs error {self.max_abs_error:.3g}, max rel error "
                  f"{self.max_rel_error:.3g}")]
        for index, got, want, err, allowed in self.worst:
            lines.append(f"  at {index}: actual {got!r}, expected {want!r}, |diff| {err:.3g} "
                         f"(allowed {allowed:.3g})")
        return "\n".join(lines)


def _to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor; bfloat16 has no numpy dtype
        value = value.detach().cpu()
        if str(value.dtype) in ("torch.bfloat16", "torch.float16") or \
                value.dtype.is_floating_point:
            value = value.double()
        return value.numpy()
    return np.asarray(value, dtype=np.float64 if np.asarray(value).dtype.kind == "f" else None)


def compare(actual, expected, *, dtype=None, reduction_length: int | None = None,
            accum_dtype=None, rtol: float | None = None, atol: float | None = None,
            max_mismatch_ratio: float | None = None, worst: int = 5) -> Comparison:
    """Compare two tensors or arrays; see :func:`assert_close`."""
    dtype = dtype if dtype is not None else getattr(actual, "dtype", None)
    got, want = _to_numpy(actual), _to_numpy(expected)
    if got.shape != want.shape:
        raise ToleranceError(f"shape mismatch: actual {got.shape}, expected {want.shape}",
                             Comparison(False, Tolerance(0, 0, 0, ""), want.size, want.size,
                                        math.inf, math.inf, (), want.shape))
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want64)  # the scale in float64: the squares of int8 values wrap
    scale = float(np.sqrt(np.mean(np.square(want64[finite])))) if finite.any() else 1.0
    tol = tolerance(dtype, reduction_length=reduction_length, accum_dtype=accum_dtype,
                    scale=scale or 1.0, max_mismatch_ratio=max_mismatch_ratio)
    if rtol is not None or atol is not None:
        tol = Tolerance(tol.rtol if rtol is None else rtol, tol.atol if atol is None else atol,
                        tol.max_mismatch_ratio, "given rtol/atol")
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got64 - want64)
        allowed = tol.atol + tol.rtol * np.abs(want64)
        same_special = (np.isnan(got64) & np.isnan(want64)) | (
            np.isinf(want64) & (got64 == want64))
        bad = ~(((err <= allowed) & np.isfinite(want64)) | same_special)
        err = np.where(same_special, 0.0, np.where(np.isnan(err), np.inf, err))
        rel = err / np.maximum(np.abs(want64), np.finfo(np.float64).tiny)
    total, mismatched = int(want.size), int(bad.sum())
    ok = mismatched <= tol.max_mismatch_ratio * total
    with np.errstate(invalid="ignore"):
        excess = np.nan_to_num(err - allowed, nan=np.inf)
    order = np.argsort(-excess, axis=None, kind="stable")[:worst] if bad.any() else []
    rows = []
    for flat in order:
        index = tuple(int(i) for i in np.unravel_index(int(flat), want.shape))
        if not bad[index]:
            break
        rows.append((index, float(got64[index]), float(want64[index]), float(err[index]),
                     float(allowed[index])))
    return Comparison(ok, tol, total, mismatched,
                      float(err.max()) if total else 0.0,
                      float(rel.max()) if total else 0.0, tuple(rows), tuple(want.shape))


def assert_close(actual, expected, *, dtype=None, reduction_length: int | None = None,
                 accum_dtype=None, rtol: float | None = None, atol: float | None = None,
                 max_mismatch_ratio: float | None = None, name: str = "output") -> Comparison:
    """Check that ``actual`` matches ``expected`` within the tolerance of :func:`tolerance`.

    ``dtype`` is the dtype the kernel produced (default: ``actual``'s), ``reduction_length``
    the length K of the longest reduction behind each element (a GEMM's K, a row sum's N).
    ``rtol``/``atol`` override the derived values. NaNs match NaNs and infinities match
    infinities of the same sign. On failure raises :class:`ToleranceError` naming how many
    elements differ, the worst ones with their indices, and the tolerance used.
    """
    result = compare(actual, expected, dtype=dtype, reduction_length=reduction_length,
                     accum_dtype=accum_dtype, rtol=rtol, atol=atol,
                     max_mismatch_ratio=max_mismatch_ratio)
    if not result.ok:
        raise ToleranceError(result.describe(name), result)
    return result


def float64_reference(fn, *args, **kwargs):
    """Run ``fn`` on float64 copies of the floating-point tensors in ``args``/``kwargs``.

    Integer tensors, packed float4 tensors (``float4_e2m1fn_x2``: torch converts them to
    nothing) and other values pass unchanged. The result is left in float64: compare it with
    :func:`assert_close`, which rounds nothing.
    """

    def widen(value):
        if hasattr(value, "is_floating_point") and value.is_floating_point() and \
                value.dtype != _torch().float4_e2m1fn_x2:
            return value.detach().to(dtype=_torch().float64)
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        return value

    return fn(*(widen(a) for a in args), **{k: widen(v) for k, v in kwargs.items()})


def _torch():
    import torch

    return torch


# -- TileLang's test helpers (``tilelang.testing``) -------------------------------------------
def set_random_seed(seed: int = 42) -> None:
    """Seed Python's, NumPy's and torch's generators."""
    random.seed(seed)
    np.random.seed(seed)
    _torch().manual_seed(seed)


def main() -> None:
    """Run pytest on the calling test file (``if __name__ == "__main__": testing.main()``)."""
    import pytest

    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([test_file, *sys.argv[1:]]))


# "9.0": the requires_cuda* decorators act as if a device of that compute capability were
# present (tools/port_tilelang_tests.py runs TileLang's CUDA tests on another backend so)
ASSUME_CUDA_ENV = "TILEWRIGHT_TESTING_ASSUME_CUDA"


def _cuda_capability() -> tuple[int, int] | None:
    """The compute capability of torch's current CUDA device (or the one
    ``$TILEWRIGHT_TESTING_ASSUME_CUDA`` names), or None without one."""
    assumed = os.environ.get(ASSUME_CUDA_ENV)
    if assumed:
        major, _, minor = assumed.partition(".")
        return int(major), int(minor or 0)
    torch = _torch()
    if not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability())


def _skip_unless(condition: bool, reason: str):
    import pytest

    return pytest.mark.skipif(not condition, reason=reason)


def requires_cuda(func):
    """Skip the test when no CUDA device is present."""
    return _skip_unless(_cuda_capability() is not None, "needs a CUDA device")(func)


_MODES = {"ge": operator.ge, "gt": operator.gt, "eq": operator.eq, "lt": operator.lt,
          "le": operator.le}


def requires_cuda_compute_version(major_version: int, minor_version: int = 0,
                                  mode: str = "ge"):
    """Skip the test unless a CUDA device's compute capability compares with
    ``(major_version, minor_version)`` as ``mode`` (ge, gt, eq, lt, le) says."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    capability = _cuda_capability()
    wanted = (major_version, minor_version)
    ok = capability is not None and _MODES[mode](capability, wanted)
    return _skip_unless(ok, f"needs a CUDA device of compute capability {mode} "
                            f"{major_version}.{minor_version}")


def _compute_version(mode: str):
    def check(major_version: int, minor_version: int = 0):
        return requires_cuda_compute_version(major_version, minor_version, mode)

    check.__name__ = f"requires_cuda_compute_version_{mode}"
    check.__doc__ = f"``requires_cuda_compute_version(..., mode={mode!r})``."
    return check


requires_cuda_compute_version_ge = _compute_version("ge")
requires_cuda_compute_version_gt = _compute_version("gt")
requires_cuda_compute_version_eq = _compute_version("eq")
requires_cuda_compute_version_lt = _compute_version("lt")
requires_cuda_compute_version_le = _compute_version("le")


def requires_package(*names: str):
    """Skip the test unless every named package can be imported."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    return _skip_unless(not missing, f"needs the package(s) {', '.join(missing)}")
