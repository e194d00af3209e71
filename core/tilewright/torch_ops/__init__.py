"""Kernels as PyTorch operators: ``torch.ops.<ns>.<name>`` for ``torch.compile``, autograd and
kernel packages.

- ``kernel.as_torch_op("ns::name")`` and ``@tilewright.jit(torch_op="ns::name")`` register
  kernels (see :mod:`tilewright.jit.torch_op` for what each authoring style registers);
- ``tilewright.autograd.Function`` pairs a forward and a backward kernel
  (:mod:`tilewright.torch_ops.autograd`);
- ``tilewright package`` / :func:`build_package` turn kernels into a wheel that registers
  them with torch alone (:mod:`tilewright.torch_ops.package`).

The operators themselves (schema, fake implementation, dispatch over compiled variants) are
:mod:`tilewright.runtime.torchop`, which needs only torch, so packages ship it.
"""

from ..runtime.torchop import OpError, TorchOp, registered

__all__ = ["OpError", "TorchOp", "registered"]
