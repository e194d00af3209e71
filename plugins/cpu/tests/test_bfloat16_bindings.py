"""bfloat16 values read, converted or stored around the CPU's ``Let`` bindings (the vector
``exp``) where the store is an ``if_then_else`` whose branch reads a fragment: the branch's
read was left inside a binding that TVM's BF16ComputeLegalize does not visit ("Load/Store of
buffer ... occurred before its declaration"). The other forms are the conformance row
``narrow_math``."""

import pytest
import tilewright
import tilewright.language as T
import torch

N = 64
FORMS = {
    "cast of a select": (
        lambda x, y: T.cast(T.if_then_else(x > 0, T.exp(T.cast(x, "float32")),
                                           T.cast(y, "float32")), "bfloat16"),
        lambda x, y: torch.where(x > 0, x.float().exp(), y.float()).bfloat16()),
    "select of a cast": (
        lambda x, y: T.if_then_else(x > 0, T.cast(T.exp(T.cast(x, "float32")), "bfloat16"), y),
        lambda x, y: torch.where(x > 0, x.float().exp().bfloat16(), y)),
}


@tilewright.jit(out_idx=[-1], target="cpu")
def guarded(form):
    @T.prim_func
    def main(X: T.Tensor((N,), "bfloat16"), P: T.Tensor((N,), "bfloat16"),
             Y: T.Tensor((N,), "bfloat16")):
        with T.Kernel(1, threads=128) as _bx:
            x = T.alloc_fragment((N,), "bfloat16")
            T.copy(X, x)
            for i in T.Parallel(N):
                Y[i] = FORMS[form][0](x[i], P[i])
    return main


@pytest.mark.parametrize("form", FORMS)
def test_guarded_fragment_read_in_a_binding(form):
    gen = torch.Generator().manual_seed(0)
    x, p = (torch.randn(N, generator=gen).bfloat16() for _ in range(2))
    assert torch.equal(guarded(form)(x, p), FORMS[form][1](x, p))
