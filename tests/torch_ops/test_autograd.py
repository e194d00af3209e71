"""tilewright.autograd.Function: a forward and a backward kernel paired by parameter names,
checked by torch.autograd.gradcheck in float64 and through torch.compile."""

import pytest
import tilewright
import torch
from tilewright.torch_ops import OpError, registered
from torch_kernels import rmsnorm, softmax_bwd, softmax_fwd

M, N = 8, 16


@pytest.fixture(scope="module")
def softmax():
    fn = tilewright.autograd.Function("tw_test::softmax", forward=softmax_fwd(M, N),
                                      backward=softmax_bwd(M, N))
    yield fn
    fn.forward.remove()
    fn.backward.remove()


def test_gradcheck_in_float64(softmax):
    x = torch.randn(M, N, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=1))
    assert torch.autograd.gradcheck(softmax, (x,), eps=1e-6, atol=1e-8)


def test_gradients_match_torch_through_torch_compile(softmax):
    x = torch.randn(M, N, dtype=torch.float64, requires_grad=True)
    w = torch.randn(M, N, dtype=torch.float64)
    fn = torch.compile(lambda x: (softmax(x) * w).sum(), fullgraph=True)
    fn(x).backward()
    ours = x.grad.clone()
    x.grad = None
    (torch.softmax(x, dim=1) * w).sum().backward()
    torch.testing.assert_close(ours, x.grad)


def test_unused_output_gradients_are_zeros(softmax):
    x = torch.randn(M, N, dtype=torch.float64, requires_grad=True)
    (softmax(x)[:, 0] * 0).sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros_like(x))


def test_backward_names_must_pair():
    with pytest.raises(OpError, match=r"backward inputs \['W', 'eps'\] are neither inputs "
                                      r"nor outputs of the forward kernel \(X -> Y\)"):
        tilewright.autograd.Function("tw_test::bad_pair", forward=softmax_fwd(M, N),
                                     backward=rmsnorm(M, N, dtype="float64"))
    # nothing stays registered from a pairing that failed
    assert registered("tw_test::bad_pair") is None
    assert registered("tw_test::bad_pair_backward") is None
