"""``tilewright.autograd.Function``: a forward and a backward kernel as one differentiable
PyTorch operator, through ``torch.library.register_autograd``.

The kernels are paired by parameter names, so no glue code is written per kernel:

- the backward kernel's inputs are named after the forward's inputs and outputs (saved for
  the backward pass) and ``grad_<output>`` (the gradient flowing into a forward output; zeros
  when that output was not used);
- its outputs are named ``grad_<input>``: the gradient of that forward input. Inputs with no
  such output get no gradient.

Softmax, for example: forward ``X -> Y``, backward ``(Y, grad_Y) -> grad_X``. Both kernels are
registered as operators (``<name>`` and ``<name>_backward``), so ``torch.compile`` sees them
in the forward and the backward graph alike.
"""

from __future__ import annotations

import torch

from ..jit.torch_op import register_eager, register_kernel
from ..runtime.torchop import OpError, TorchOp

GRAD = "grad_"


def _operator(kernel, name: str) -> TorchOp:
    """A compiled kernel, an eager ``@jit`` function or a registered operator, as an
    operator named ``name`` (an existing operator keeps its own)."""
    if isinstance(kernel, TorchOp):
        return kernel
    if hasattr(kernel, "as_torch_op"):
        return register_kernel(kernel, name)
    if getattr(kernel, "factory", True) is False:
        return register_eager(kernel, name)
    raise OpError(f"torch op {name}: expected a compiled kernel, an eager @tilewright.jit "
                  f"kernel or a registered operator, got {type(kernel).__name__} (call a "
                  "kernel factory to get a compiled kernel)")


class Function:
    """``Function("ns::name", forward=..., backward=...)``: call it like the forward kernel;
    gradients come from the backward kernel (see the module docstring for the pairing)."""

    def __init__(self, name: str, forward, backward):
        self.forward = _operator(forward, name)
        try:
            self.backward = _operator(backward, f"{name}_backward")
            try:
                self._pair(name)
            except BaseException:
                if self.backward is not backward:
                    self.backward.remove()
                raise
        except BaseException:
            if self.forward is not forward:
                self.forward.remove()
            raise
        torch.library.register_autograd(self.forward.qualname, self._backward,
                                        setup_context=self._setup_context)

    def _pair(self, name: str) -> None:
        """Check that the kernels pair by name (an OpError saying which names do not)."""
        inputs = [a.name for a in self.forward.arguments]
        outputs = list(self.forward.outputs)
        known = set(inputs) | set(outputs) | {GRAD + o for o in outputs}
        wanted = [a.name for a in self.backward.arguments]
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise OpError(f"torch op {name}: backward inputs {unknown} are neither inputs nor "
                          f"outputs of the forward kernel ({', '.join(inputs)} -> "
                          f"{', '.join(outputs)}) nor grad_<output>; rename them")
        strays = [g for g in self.backward.outputs if g.removeprefix(GRAD) not in inputs or
                  not g.startswith(GRAD)]
        if strays:
            raise OpError(f"torch op {name}: backward outputs {strays} must be named "
                          f"grad_<input> for a forward input ({', '.join(inputs)})")
        self._inputs, self._outputs, self._wanted = inputs, outputs, wanted
        grads = {GRAD + o for o in outputs}
        self._saved = [n for n in wanted if n not in grads]

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _setup_context(self, ctx, inputs, output):
        values = dict(zip(self._inputs, inputs))
        outs = output if isinstance(output, tuple) else (output,)
        values.update(zip(self._outputs, outs))
        tensors = [n for n in self._saved if isinstance(values[n], torch.Tensor)]
        ctx.save_for_backward(*(values[n] for n in tensors))
        ctx.tensor_names = tensors
        ctx.scalars = {n: values[n] for n in self._saved if n not in tensors}
        ctx.output_meta = [(o.shape, o.dtype, o.device) for o in outs]

    def _backward(self, ctx, *grads):
        values = dict(zip(ctx.tensor_names, ctx.saved_tensors))
        values.update(ctx.scalars)
        for name, grad, (shape, dtype, device) in zip(self._outputs, grads, ctx.output_meta):
            values[GRAD + name] = grad if grad is not None else \
                torch.zeros(shape, dtype=dtype, device=device)
        result = self.backward(*(values[n] for n in self._wanted))
        result = result if isinstance(result, tuple) else (result,)
        by_input = dict(zip(self.backward.outputs, result))
        return tuple(by_input.get(GRAD + n) for n in self._inputs)

    def __repr__(self) -> str:
        return f"Function({self.forward.qualname}, backward={self.backward.qualname})"


__all__ = ["Function"]
