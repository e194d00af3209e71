"""``kernel.get_profiler()``: TileLang's profiler of one compiled kernel. It makes inputs for
the kernel's parameters (:class:`~tilewright.utils.tensor.TensorSupplyType`), runs the kernel
once, compares it with a reference program and times it."""

from __future__ import annotations

import functools

from ..utils.tensor import TensorSupplyType, get_tensor_supply, torch_assert_close
from .bench import do_bench


def _as_list(outputs) -> list:
    if outputs is None:
        return []
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


class Profiler:
    """Profiles ``kernel`` with inputs made as ``supply_type`` says."""

    def __init__(self, kernel, supply_type: TensorSupplyType = TensorSupplyType.Auto):
        self.kernel = kernel
        self.supply_type = supply_type
        self.supply = get_tensor_supply(supply_type, device=kernel.backend.device)

    @property
    def func(self):
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    def _get_inputs(self, with_output: bool = False) -> list:
        """New tensors for the kernel's inputs (and outputs, when ``with_output``)."""
        params = [p for p in self.kernel.params if with_output or not p.is_output]
        scalars = [p.name for p in params if p.kind != "tensor"]
        if scalars:
            raise ValueError(f"the profiler cannot make scalar argument(s) "
                             f"{', '.join(scalars)} of kernel {self.kernel.signature.name}; "
                             "pass input_tensors")
        return [self.supply(p) for p in params]

    def run_once(self, func=None):
        """Run ``func`` (default: the kernel) once on new inputs; its result."""
        return (func or self.kernel)(*self._get_inputs())

    def assert_allclose(self, reference_program, input_tensors=None, atol: float = 1e-2,
                        rtol: float = 1e-2, max_mismatched_ratio: float = 0.01) -> None:
        """Run the kernel and ``reference_program`` on the same inputs and compare every
        output (``torch_assert_close``); a ``None`` reference output is not compared."""
        ins = self._get_inputs() if input_tensors is None else list(input_tensors)
        ref = _as_list(reference_program(*ins))
        out = _as_list(self.kernel(*ins))
        if len(out) != len(ref):
            raise AssertionError(f"the kernel returned {len(out)} output(s) but the reference "
                                 f"program {len(ref)}")
        for lhs, rhs in zip(out, ref):
            if lhs is None or rhs is None:
                continue
            if lhs.dtype.itemsize == 1 and lhs.dtype.is_floating_point:
                lhs, rhs = lhs.float(), rhs.float()
            torch_assert_close(lhs, rhs.to(lhs.device), rtol=rtol, atol=atol,
                               max_mismatched_ratio=max_mismatched_ratio,
                               base_name="tilewright", ref_name="ref")

    def manual_assert_close(self, reference_program, input_tensors=None,
                            manual_check_prog=None) -> None:
        """Run both programs and hand their outputs to ``manual_check_prog(outs, ref_outs)``."""
        ins = self._get_inputs() if input_tensors is None else list(input_tensors)
        ref = _as_list(reference_program(*ins))
        out = _as_list(self.kernel(*ins))
        if len(out) != len(ref):
            raise AssertionError(f"the kernel returned {len(out)} output(s) but the reference "
                                 f"program {len(ref)}")
        manual_check_prog(out, ref)

    def assert_consistent(self, repeat: int = 10) -> None:
        """Run the kernel ``repeat`` times on the same inputs; every run must agree exactly."""
        ins = self._get_inputs()
        first = _as_list(self.kernel(*ins))
        for _ in range(repeat):
            for lhs, rhs in zip(_as_list(self.kernel(*ins)), first):
                torch_assert_close(lhs, rhs, rtol=0, atol=0, max_mismatched_ratio=0,
                                   base_name="run", ref_name="first run")

    def do_bench(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0,
                 n_repeat: int = 0, input_tensors=None, backend: str = "event",
                 quantiles=None, return_mode: str = "mean", dynamic_symbolic_constraints=None,
                 device=None, early_stop_baseline=None) -> float:
        """Time ``func`` (default: the kernel) on new inputs (or ``input_tensors``), in ms;
        the arguments are :func:`tilewright.profiler.do_bench`'s. Inputs for dynamic shapes
        (``dynamic_symbolic_constraints``) and early stopping are not supported."""
        if dynamic_symbolic_constraints:
            raise ValueError("Profiler.do_bench: dynamic_symbolic_constraints are not "
                             "supported; pass input_tensors of the sizes to time")
        if early_stop_baseline is not None:
            raise ValueError("Profiler.do_bench: early_stop_baseline is not supported")
        ins = self._get_inputs() if input_tensors is None else list(input_tensors)
        return do_bench(functools.partial(func or self.kernel, *ins), warmup=warmup, rep=rep,
                        _n_warmup=n_warmup, _n_repeat=n_repeat, quantiles=quantiles,
                        backend=backend, return_mode=return_mode, device=device)
